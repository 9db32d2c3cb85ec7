// The CTR cache's rows of a text file: its lines through a format's line parser (ctr_cache.h).
#include "worker/data/ctr_cache.h"
#include "worker/data/line_reader.h"

namespace pstrain {
namespace {

class TextRows final : public CtrRows {
 public:
  TextRows(const std::string& path, const CtrCacheLayout& layout, std::unique_ptr<CtrLineParser> parser)
      : path_(path),
        max_line_(layout.max_line),
        parser_(std::move(parser)),
        in_(path, layout.max_line, true) {}

  bool next(CtrRecord& out, std::string& problem, bool* skip) override {
    if (!in_.next(line_)) return false;
    problem = in_.too_long() ? "line longer than " + std::to_string(max_line_) + " bytes"
                             : parser_->parse(line_, in_.number(), out, skip);
    return true;
  }
  uint64_t number() const override { return in_.number(); }
  std::string where(uint64_t number) const override { return path_ + ":" + std::to_string(number); }
  const char* unit() const override { return "line"; }

 private:
  std::string path_;
  size_t max_line_;
  std::unique_ptr<CtrLineParser> parser_;
  LineReader in_;
  std::string line_;
};

}  // namespace

std::unique_ptr<CtrRows> text_rows(const std::string& path, const CtrCacheLayout& layout,
                                   std::unique_ptr<CtrLineParser> parser) {
  return std::make_unique<TextRows>(path, layout, std::move(parser));
}

}  // namespace pstrain
