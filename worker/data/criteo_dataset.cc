#include "worker/data/criteo_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/data/criteo.h"
#include "worker/data/file_io.h"
#include "worker/data/line_reader.h"

namespace pstrain {
namespace {

// The cache file: kMagic, then uint64 header_bytes (kFixedBytes), records, lines (of the
// source), bad_lines (skipped), first_bad_bytes; then `records` records of kRecordBytes: 26
// uint64 IDs, 13 float32 dense values, int32 label; then the first bad line's message (written
// last, so the records need not wait for it). Native byte order: the cache is local.
constexpr char kMagic[8] = {'P', 'S', 'C', 'T', 'R', '0', '1', '\n'};
constexpr size_t kFixedBytes = sizeof kMagic + 5 * 8;
constexpr size_t kIdsBytes = kCriteoCategorical * sizeof(uint64_t);
constexpr size_t kDenseBytes = kCriteoDense * sizeof(float);
constexpr size_t kRecordBytes = kIdsBytes + kDenseBytes + sizeof(int32_t);
constexpr size_t kChunkBytes = 64 << 10;                 // bytes written, and read for a run, at once
constexpr size_t kChunkRecords = kChunkBytes / kRecordBytes;

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);
  return v;
}

void encode(const CriteoRecord& r, uint8_t* out) {
  std::memcpy(out, r.ids, kIdsBytes);
  std::memcpy(out + kIdsBytes, r.dense, kDenseBytes);
  std::memcpy(out + kIdsBytes + kDenseBytes, &r.label, sizeof r.label);
}

// Parses the Criteo file at `path` into the cache format, written to fd.
class Converter {
 public:
  Converter(const std::string& path, bool skip, int fd, const std::string& tmp)
      : path_(path), skip_(skip), fd_(fd), tmp_(tmp), in_(path, kCriteoMaxLine, true) {}

  void run() {
    std::string placeholder(kFixedBytes, '\0');
    write_all(fd_, placeholder.data(), placeholder.size(), tmp_);
    std::string line;
    CriteoRecord record;
    while (in_.next(line)) {
      const std::string problem = in_.too_long()
                                      ? "line longer than " + std::to_string(kCriteoMaxLine) + " bytes"
                                      : parse_criteo_line(line, record);
      if (!problem.empty()) {
        bad(path_ + ":" + std::to_string(in_.number()) + ": " + problem);
        continue;
      }
      out_.resize(out_.size() + kRecordBytes);
      encode(record, out_.data() + out_.size() - kRecordBytes);
      if (out_.size() >= kChunkRecords * kRecordBytes) flush();
      ++records_;
    }
    if (in_.number() == 0) throw Error(path_ + ":1: no records (the file is empty)");
    if (records_ == 0) {
      throw Error(path_ + ": no records: all " + std::to_string(in_.number()) +
                  " lines are bad (skipped by --skip-bad-lines; the first: " + first_bad_ + ")");
    }
    flush();
    write_header();
  }

 private:
  void bad(const std::string& message) {
    if (!skip_) throw Error(message);
    if (bad_lines_++ == 0) first_bad_ = message;
  }

  void flush() {
    write_all(fd_, out_.data(), out_.size(), tmp_);
    out_.clear();
  }

  // The first bad line's message after the records, then the header over its placeholder.
  void write_header() {
    write_all(fd_, first_bad_.data(), first_bad_.size(), tmp_);
    std::string h(kMagic, sizeof kMagic);
    for (const uint64_t v : {uint64_t{kFixedBytes}, records_, in_.number(), bad_lines_, uint64_t{first_bad_.size()}})
      put_u64(h, v);
    if (::lseek(fd_, 0, SEEK_SET) != 0) throw Error(tmp_ + ": seek failed: " + errno_text(errno));
    write_all(fd_, h.data(), h.size(), tmp_);
  }

  std::string path_;
  bool skip_;
  int fd_;
  std::string tmp_;
  LineReader in_;
  uint64_t records_ = 0, bad_lines_ = 0;
  std::string first_bad_;
  std::vector<uint8_t> out_;
};

class CriteoDataset final : public Dataset {
 public:
  CriteoDataset(const std::string& path, const std::string& cache_dir, bool skip_bad_lines,
                const LabelRange& range)
      : path_(path) {
    if (range.classes == 1) throw Error(path + ": Criteo labels are 0 and 1, but " + range.origin + " allows 1 class");
    classes_ = range.classes > 0 ? range.classes : 2;
    const std::string cache = parsed_cache_path(path, cache_dir, ".pstrain-criteo");
    if (::access(cache.c_str(), R_OK) != 0 || !load(cache)) {
      PSLOG(INFO) << "parsing " << path << " (Criteo TSV) into " << cache;
      create_file_atomically(cache, [&](int fd, const std::string& tmp) {
        Converter(path, skip_bad_lines, fd, tmp).run();
      });
      if (!load(cache)) throw Error(cache + ": the cache file just written is not valid");
    }
    if (bad_lines_ > 0 && !skip_bad_lines) throw Error(first_bad_);
    if (bad_lines_ > 0) {
      PSLOG(INFO) << path << ": skipped " << bad_lines_ << " of " << lines_
                  << " lines (--skip-bad-lines); the first: " << first_bad_;
    }
  }

  size_t size() const override { return records_; }
  size_t feature_dim() const override { return kCriteoDense; }
  int num_classes() const override { return classes_; }
  size_t id_fields() const override { return kCriteoCategorical; }

  void read(const size_t* records, size_t count, float* features, int32_t* labels) const override {
    for_each(records, count, [&](size_t i, const uint8_t* r) {
      std::memcpy(features + i * kCriteoDense, r + kIdsBytes, kDenseBytes);
      std::memcpy(&labels[i], r + kIdsBytes + kDenseBytes, sizeof(int32_t));
      if (labels[i] != 0 && labels[i] != 1) {
        throw Error(path_ + ": record " + std::to_string(records[i]) + " has label " +
                    std::to_string(labels[i]) + " in the cache file (it changed after it was opened?)");
      }
    });
  }

  void read_ids(const size_t* records, size_t count, uint64_t* ids) const override {
    for_each(records, count,
             [&](size_t i, const uint8_t* r) { std::memcpy(ids + i * kCriteoCategorical, r, kIdsBytes); });
  }

 private:
  // Calls f(i, encoded record i) for i < count; runs of consecutive records (the test set, an
  // unshuffled epoch) are read kChunkRecords at a time, others one by one.
  template <typename F>
  void for_each(const size_t* records, size_t count, F f) const {
    std::vector<uint8_t> buf(std::min(count, kChunkRecords) * kRecordBytes);
    for (size_t i = 0; i < count;) {
      size_t run = 0;
      do {
        if (records[i + run] >= records_) {
          throw Error(path_ + ": record " + std::to_string(records[i + run]) + " out of range (" +
                      std::to_string(records_) + " records)");
        }
        ++run;
      } while (i + run < count && run < kChunkRecords && records[i + run] == records[i] + run);
      file_->read_exact(kFixedBytes + records[i] * kRecordBytes, run * kRecordBytes, buf.data());
      for (size_t j = 0; j < run; ++j) f(i + j, buf.data() + j * kRecordBytes);
      i += run;
    }
  }

  bool load(const std::string& cache_path) {
    auto file = std::make_unique<RandomAccessFile>(cache_path, path_ + " (cache " + cache_path + ")");
    uint8_t fixed[kFixedBytes];
    if (file->read_some(0, sizeof fixed, fixed) < sizeof fixed || std::memcmp(fixed, kMagic, sizeof kMagic) != 0)
      return false;
    const uint64_t header = get_u64(fixed + 8), records = get_u64(fixed + 16), lines = get_u64(fixed + 24);
    const uint64_t bad = get_u64(fixed + 32), message_bytes = get_u64(fixed + 40);
    if (header != kFixedBytes || records == 0 || records > file->size() / kRecordBytes ||
        message_bytes > 4 * kCriteoMaxLine || bad > lines || records + bad != lines ||
        kFixedBytes + records * kRecordBytes + message_bytes != file->size() || (bad > 0) != (message_bytes > 0)) {
      return false;
    }
    first_bad_.resize(message_bytes);
    file->read_exact(kFixedBytes + records * kRecordBytes, message_bytes, first_bad_.data());
    records_ = records;
    lines_ = lines;
    bad_lines_ = bad;
    file_ = std::move(file);
    return true;
  }

  std::string path_;
  std::unique_ptr<RandomAccessFile> file_;
  uint64_t records_ = 0, lines_ = 0, bad_lines_ = 0;
  std::string first_bad_;
  int classes_ = 2;
};

}  // namespace

std::unique_ptr<Dataset> open_criteo_dataset(const std::string& path, const std::string& cache_dir,
                                             bool skip_bad_lines, const LabelRange& labels_range) {
  return std::make_unique<CriteoDataset>(path, cache_dir, skip_bad_lines, labels_range);
}

}  // namespace pstrain
