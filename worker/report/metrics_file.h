// The chief's metrics file (docs/operations.md, "Metrics file"): one JSON object per line
// (JSON Lines), one for each progress line, each epoch's evaluation and the summary, with the
// figures those lines print at full precision, for programs to read (pandas.read_json(path,
// lines=True), jq). Written as the run goes, each line flushed; a file that cannot be opened is an
// error before the first step.
#pragma once

#include <cstdio>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "worker/report/metrics_sink.h"

namespace pstrain {

class MetricsFile final : public MetricsSink {
 public:
  MetricsFile() = default;  // no file: write() does nothing
  // Opens `path` to append to (a chief that replaces a killed one, or a resumed job's, goes on
  // with the same file), making its directory; throws pstrain::Error naming `flag`, the path and
  // the reason.
  MetricsFile(const std::string& path, const std::string& flag);

  bool is_open() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  // Appends `record` as one line, with "time_s" (seconds since the file was opened) first among
  // its keys when it has none; a failed write is logged once, never fatal.
  void write(const nlohmann::ordered_json& record) override;

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file_;
  std::string path_;
  double opened_ = 0;  // steady clock, seconds
  bool failed_ = false;
};

}  // namespace pstrain
