#include "worker/data/criteo_dataset.h"

#include <fcntl.h>
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

// The cache file (native byte order: the cache is local):
//   kMagic; uint64 header_bytes (kFixedBytes), records, lines (of the source), bad_lines
//   (skipped), first_bad_bytes, list_ids;
//   `records` records of kRecordBytes: 26 uint64 ID slots, 13 float32 dense values, int32 label,
//   uint32 lists (bit f set: field f holds several IDs);
//   list_ids uint64 IDs: the lists, record by record, field by field;
//   the first bad line's message (written last, so the records need not wait for it).
// A field of one ID has it in its slot; a field of several has (offset << 16 | count) there,
// offset being its first ID's index in the lists. So a file of one ID per field (Criteo's own)
// reads one pread per record or run of records, as before lists; a record with lists takes one
// more (its lists are contiguous). Format 02 added the lists: a cache of format 01 is not this
// magic's, so it is parsed anew.
constexpr char kMagic[8] = {'P', 'S', 'C', 'T', 'R', '0', '2', '\n'};
constexpr size_t kFixedBytes = sizeof kMagic + 6 * 8;
constexpr size_t kIdsBytes = kCriteoCategorical * sizeof(uint64_t);
constexpr size_t kDenseBytes = kCriteoDense * sizeof(float);
constexpr size_t kLabelAt = kIdsBytes + kDenseBytes;
constexpr size_t kListsAt = kLabelAt + sizeof(int32_t);
constexpr size_t kRecordBytes = kListsAt + sizeof(uint32_t);
constexpr size_t kChunkBytes = 64 << 10;                 // bytes written, and read for a run, at once
constexpr size_t kChunkRecords = kChunkBytes / kRecordBytes;
constexpr unsigned kCountBits = 16;                      // of a list's slot: its count
constexpr uint64_t kMaxListOffset = uint64_t{1} << (64 - kCountBits);
static_assert(kCriteoMaxIds < (1u << kCountBits) && kCriteoCategorical <= 32, "the slot and mask layouts");

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);
  return v;
}

// The record's fixed part; `list_at` is where its first list goes among the lists (advanced).
void encode(const CriteoRecord& r, uint64_t& list_at, uint8_t* out) {
  uint64_t slots[kCriteoCategorical];
  uint32_t lists = 0;
  for (size_t c = 0; c < kCriteoCategorical; ++c) {
    slots[c] = r.ids[c];
    if (r.counts[c] > 1) {
      slots[c] = list_at << kCountBits | r.counts[c];
      list_at += r.counts[c];
      lists |= uint32_t{1} << c;
    }
  }
  std::memcpy(out, slots, kIdsBytes);
  std::memcpy(out + kIdsBytes, r.dense, kDenseBytes);
  std::memcpy(out + kLabelAt, &r.label, sizeof r.label);
  std::memcpy(out + kListsAt, &lists, sizeof lists);
}

// Parses the Criteo file at `path` into the cache format, written to fd. The lists go to a
// second, unlinked file beside it (made at the first list) and are copied after the records.
class Converter {
 public:
  Converter(const std::string& path, bool skip, int fd, const std::string& tmp)
      : path_(path), skip_(skip), fd_(fd), tmp_(tmp), in_(path, kCriteoMaxLine, true) {}
  ~Converter() {
    if (lists_fd_ >= 0) ::close(lists_fd_);
  }
  Converter(const Converter&) = delete;
  Converter& operator=(const Converter&) = delete;

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
      if (!record.lists.empty()) add_lists(record.lists);
      out_.resize(out_.size() + kRecordBytes);
      encode(record, list_ids_, out_.data() + out_.size() - kRecordBytes);
      if (out_.size() >= kChunkRecords * kRecordBytes) flush();
      ++records_;
    }
    if (in_.number() == 0) throw Error(path_ + ":1: no records (the file is empty)");
    if (records_ == 0) {
      throw Error(path_ + ": no records: all " + std::to_string(in_.number()) +
                  " lines are bad (skipped by --skip-bad-lines; the first: " + first_bad_ + ")");
    }
    flush();
    copy_lists();
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

  void add_lists(const std::vector<uint64_t>& ids) {
    if (list_ids_ + ids.size() >= kMaxListOffset) throw Error(path_ + ": more than 2^48 IDs in lists");
    if (lists_fd_ < 0) {
      const std::string name = tmp_ + ".lists";
      lists_fd_ = ::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (lists_fd_ < 0) throw Error(name + ": cannot create: " + errno_text(errno));
      ::unlink(name.c_str());  // gone with the descriptor, whatever happens
    }
    const size_t at = lists_.size();
    lists_.resize(at + ids.size() * sizeof(uint64_t));
    std::memcpy(lists_.data() + at, ids.data(), ids.size() * sizeof(uint64_t));
    if (lists_.size() >= kChunkBytes) flush_lists();
  }

  void flush_lists() {
    write_all(lists_fd_, lists_.data(), lists_.size(), tmp_ + ".lists");
    lists_.clear();
  }

  // The lists after the records, kChunkBytes at a time.
  void copy_lists() {
    if (lists_fd_ < 0) return;
    flush_lists();
    if (::lseek(lists_fd_, 0, SEEK_SET) != 0) throw Error(tmp_ + ".lists: seek failed: " + errno_text(errno));
    std::vector<char> buf(kChunkBytes);
    uint64_t copied = 0;
    for (;;) {
      const ssize_t n = ::read(lists_fd_, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error(tmp_ + ".lists: read failed: " + errno_text(errno));
      if (n == 0) break;
      write_all(fd_, buf.data(), static_cast<size_t>(n), tmp_);
      copied += static_cast<uint64_t>(n);
    }
    if (copied != list_ids_ * sizeof(uint64_t)) throw Error(tmp_ + ".lists: read back short");
  }

  // The first bad line's message after the lists, then the header over its placeholder.
  void write_header() {
    write_all(fd_, first_bad_.data(), first_bad_.size(), tmp_);
    std::string h(kMagic, sizeof kMagic);
    for (const uint64_t v : {uint64_t{kFixedBytes}, records_, in_.number(), bad_lines_, uint64_t{first_bad_.size()},
                             list_ids_})
      put_u64(h, v);
    if (::lseek(fd_, 0, SEEK_SET) != 0) throw Error(tmp_ + ": seek failed: " + errno_text(errno));
    write_all(fd_, h.data(), h.size(), tmp_);
  }

  std::string path_;
  bool skip_;
  int fd_;
  std::string tmp_;
  LineReader in_;
  uint64_t records_ = 0, bad_lines_ = 0, list_ids_ = 0;
  std::string first_bad_;
  std::vector<uint8_t> out_;
  int lists_fd_ = -1;
  std::vector<uint8_t> lists_;  // lists not written yet
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
      std::memcpy(&labels[i], r + kLabelAt, sizeof(int32_t));
      if (labels[i] != 0 && labels[i] != 1) {
        throw Error(path_ + ": record " + std::to_string(records[i]) + " has label " +
                    std::to_string(labels[i]) + " in the cache file (it changed after it was opened?)");
      }
    });
  }

  void read_ids(const size_t* records, size_t count, IdLists* out) const override {
    out->ids.clear();
    out->counts.clear();
    std::vector<uint64_t> lists;
    for_each(records, count, [&](size_t i, const uint8_t* r) { append_ids(records[i], r, lists, *out); });
  }

 private:
  // Record `record`'s fields (encoded at r) to out; `lists` is scratch for its lists.
  void append_ids(size_t record, const uint8_t* r, std::vector<uint64_t>& lists, IdLists& out) const {
    uint32_t mask = 0;
    std::memcpy(&mask, r + kListsAt, sizeof mask);
    const size_t at = out.ids.size();
    out.counts.resize(out.counts.size() + kCriteoCategorical, 1);
    if (mask == 0) {
      out.ids.resize(at + kCriteoCategorical);
      std::memcpy(out.ids.data() + at, r, kIdsBytes);
      return;
    }
    uint64_t slots[kCriteoCategorical];
    std::memcpy(slots, r, kIdsBytes);
    // The record's lists are contiguous, in field order: [first, end) of the lists section.
    uint64_t first = 0, end = 0;
    const auto corrupt = [&](const std::string& why) {
      return Error(path_ + ": record " + std::to_string(record) + " in the cache file: " + why +
                   " (the cache changed after it was opened?)");
    };
    for (size_t c = 0; c < kCriteoCategorical; ++c) {
      if ((mask >> c & 1) == 0) continue;
      const uint64_t offset = slots[c] >> kCountBits, n = slots[c] & ((uint64_t{1} << kCountBits) - 1);
      if (n < 2 || n > kCriteoMaxIds || (end > 0 && offset != end) || offset > list_ids_ || n > list_ids_ - offset)
        throw corrupt("a bad list slot");
      if (end == 0) first = offset;
      end = offset + n;
    }
    if (mask >> kCriteoCategorical != 0) throw corrupt("a bad list mask");
    lists.resize(end - first);
    file_->read_exact(lists_at_ + first * sizeof(uint64_t), lists.size() * sizeof(uint64_t), lists.data());
    uint32_t* counts = out.counts.data() + out.counts.size() - kCriteoCategorical;
    for (size_t c = 0; c < kCriteoCategorical; ++c) {
      if ((mask >> c & 1) == 0) {
        out.ids.push_back(slots[c]);
        continue;
      }
      const uint64_t offset = slots[c] >> kCountBits, n = slots[c] & ((uint64_t{1} << kCountBits) - 1);
      out.ids.insert(out.ids.end(), lists.begin() + static_cast<std::ptrdiff_t>(offset - first),
                     lists.begin() + static_cast<std::ptrdiff_t>(offset - first + n));
      counts[c] = static_cast<uint32_t>(n);
    }
  }

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
    const uint64_t bad = get_u64(fixed + 32), message_bytes = get_u64(fixed + 40), list_ids = get_u64(fixed + 48);
    if (header != kFixedBytes || records == 0 || records > file->size() / kRecordBytes ||
        list_ids > file->size() / sizeof(uint64_t) || message_bytes > 4 * kCriteoMaxLine || bad > lines ||
        records + bad != lines ||
        kFixedBytes + records * kRecordBytes + list_ids * sizeof(uint64_t) + message_bytes != file->size() ||
        (bad > 0) != (message_bytes > 0)) {
      return false;
    }
    lists_at_ = kFixedBytes + records * kRecordBytes;
    list_ids_ = list_ids;
    first_bad_.resize(message_bytes);
    file->read_exact(lists_at_ + list_ids * sizeof(uint64_t), message_bytes, first_bad_.data());
    records_ = records;
    lines_ = lines;
    bad_lines_ = bad;
    file_ = std::move(file);
    return true;
  }

  std::string path_;
  std::unique_ptr<RandomAccessFile> file_;
  uint64_t records_ = 0, lines_ = 0, bad_lines_ = 0;
  uint64_t lists_at_ = 0, list_ids_ = 0;  // the lists section: its offset and IDs
  std::string first_bad_;
  int classes_ = 2;
};

}  // namespace

std::unique_ptr<Dataset> open_criteo_dataset(const std::string& path, const std::string& cache_dir,
                                             bool skip_bad_lines, const LabelRange& labels_range) {
  return std::make_unique<CriteoDataset>(path, cache_dir, skip_bad_lines, labels_range);
}

}  // namespace pstrain
