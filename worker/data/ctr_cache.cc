#include "worker/data/ctr_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/data/file_io.h"

namespace pstrain {
namespace {

// The cache file (native byte order: the cache is local):
//   magic (8 bytes, the layout's); uint64 header_bytes (kFixedBytes), records, lines (of the
//   source), bad_lines (skipped), first_bad_bytes, list_ids;
//   `records` records of record_bytes: `fields` uint64 ID slots, `dense` float32 values, int32
//   label (kNoLabel in a file without the label column), ceil(fields / 32) uint32 mask words
//   (bit f set: field f holds several IDs);
//   list_ids uint64 IDs: the lists, record by record, field by field;
//   the first bad line's message (written last, so the records need not wait for it).
// A field of one ID has it in its slot; a field of several has (offset << 16 | count) there,
// offset being its first ID's index in the lists. So a file of one ID per field (Criteo's own)
// reads one pread per record or run of records; a record with lists takes one more (its lists
// are contiguous). Criteo's layout (26 fields, 13 dense: one mask word, 268-byte records) is the
// format PSCTR02 has had since lists; a cache of another magic is parsed anew.
constexpr size_t kFixedBytes = 8 + 6 * 8;
constexpr size_t kChunkBytes = 64 << 10;  // bytes written, and read for a run, at once
constexpr unsigned kCountBits = 16;       // of a list's slot: its count
constexpr uint64_t kMaxListOffset = uint64_t{1} << (64 - kCountBits);

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);
  return v;
}

struct RecordShape {
  explicit RecordShape(const CtrCacheLayout& l)
      : fields(l.fields),
        dense(l.dense),
        ids_bytes(l.fields * sizeof(uint64_t)),
        label_at(ids_bytes + l.dense * sizeof(float)),
        mask_at(label_at + sizeof(int32_t)),
        mask_words((l.fields + 31) / 32),
        record_bytes(mask_at + mask_words * sizeof(uint32_t)),
        chunk_records(std::max<size_t>(1, kChunkBytes / record_bytes)) {}
  size_t fields, dense, ids_bytes, label_at, mask_at, mask_words, record_bytes, chunk_records;
};

// The record's fixed part; `list_at` is where its first list goes among the lists (advanced).
void encode(const RecordShape& s, const CtrRecord& r, uint64_t& list_at, std::vector<uint64_t>& slots,
            std::vector<uint32_t>& mask, uint8_t* out) {
  slots.assign(r.ids.begin(), r.ids.end());
  mask.assign(s.mask_words, 0);
  for (size_t c = 0; c < s.fields; ++c) {
    if (r.counts[c] > 1) {
      slots[c] = list_at << kCountBits | r.counts[c];
      list_at += r.counts[c];
      mask[c / 32] |= uint32_t{1} << (c % 32);
    }
  }
  std::memcpy(out, slots.data(), s.ids_bytes);
  std::memcpy(out + s.ids_bytes, r.dense.data(), s.dense * sizeof(float));
  std::memcpy(out + s.label_at, &r.label, sizeof r.label);
  std::memcpy(out + s.mask_at, mask.data(), s.mask_words * sizeof(uint32_t));
}

// Parses the file at `path` into the cache format, written to fd. The lists go to a second,
// unlinked file beside it (made at the first list) and are copied after the records.
class Converter {
 public:
  Converter(const std::string& path, bool skip, int fd, const std::string& tmp, const CtrCacheLayout& layout,
            CtrRows& rows)
      : path_(path), skip_(skip), fd_(fd), tmp_(tmp), layout_(layout), shape_(layout), in_(rows) {}
  ~Converter() {
    if (lists_fd_ >= 0) ::close(lists_fd_);
  }
  Converter(const Converter&) = delete;
  Converter& operator=(const Converter&) = delete;

  void run() {
    std::string placeholder(kFixedBytes, '\0');
    write_all(fd_, placeholder.data(), placeholder.size(), tmp_);
    CtrRecord record;
    std::vector<uint64_t> slots;
    std::vector<uint32_t> mask;
    for (;;) {
      record.dense.assign(shape_.dense, 0.0f);
      record.ids.assign(shape_.fields, 0);
      record.counts.assign(shape_.fields, 1);
      record.lists.clear();
      bool skip = false;
      std::string problem;
      if (!in_.next(record, problem, &skip)) break;
      if (problem.empty() && skip) {
        ++skipped_;
        continue;
      }
      if (problem.empty()) problem = label_consistency(record.label != kNoLabel);
      if (!problem.empty()) {
        bad(in_.where(in_.number()) + ": " + problem);
        continue;
      }
      if (!record.lists.empty()) add_lists(record.lists);
      out_.resize(out_.size() + shape_.record_bytes);
      encode(shape_, record, list_ids_, slots, mask, out_.data() + out_.size() - shape_.record_bytes);
      if (out_.size() >= shape_.chunk_records * shape_.record_bytes) flush();
      ++records_;
    }
    if (in_.number() == skipped_) {
      throw Error(in_.where(in_.number() + 1) + ": no records (the file is empty" +
                  (skipped_ > 0 ? " but for its header)" : ")"));
    }
    if (records_ == 0) {
      throw Error(path_ + ": no records: all " + std::to_string(in_.number() - skipped_) + " " + in_.unit() +
                  "s are bad (skipped by --skip-bad-lines; the first: " + first_bad_ + ")");
    }
    flush();
    copy_lists();
    write_header();
  }

 private:
  // A file is labelled throughout or not at all: the first record decides.
  std::string label_consistency(bool labelled) {
    if (records_ == 0 && !first_seen_) {
      first_seen_ = true;
      labelled_ = labelled;
      first_line_ = in_.number();
      return "";
    }
    if (labelled == labelled_) return "";
    return std::string(labelled ? "has" : "lacks") + " the label column, but " + std::string(in_.unit()) +
           " " + std::to_string(first_line_) + " (the first record) " + (labelled_ ? "has" : "lacks") +
           " it (a file has labels on every line or on none)";
  }

  void bad(const std::string& message) {
    if (!skip_) throw Error(message + skip_bad_lines_hint());
    if (bad_lines_++ == 0) first_bad_ = message;
  }

  void flush() {
    write_all(fd_, out_.data(), out_.size(), tmp_);
    out_.clear();
  }

  void add_lists(const std::vector<uint64_t>& ids) {
    if (list_ids_ + ids.size() >= kMaxListOffset) throw Error(path_ + ": more than 2^48 IDs in lists");
    if (lists_fd_ < 0) {  // each writer its own: workers racing on one cache file (file_io.h)
      lists_fd_ = open_scratch_file(std::filesystem::path(tmp_).parent_path().string(), tmp_ + ".lists");
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

  // The first bad line's message after the lists, then the header over its placeholder. A
  // skipped header line counts as neither a record nor a bad line: `lines` leaves it out.
  void write_header() {
    write_all(fd_, first_bad_.data(), first_bad_.size(), tmp_);
    std::string h(layout_.magic, 8);
    for (const uint64_t v : {uint64_t{kFixedBytes}, records_, in_.number() - skipped_, bad_lines_,
                             uint64_t{first_bad_.size()}, list_ids_})
      put_u64(h, v);
    if (::lseek(fd_, 0, SEEK_SET) != 0) throw Error(tmp_ + ": seek failed: " + errno_text(errno));
    write_all(fd_, h.data(), h.size(), tmp_);
  }

  std::string path_;
  bool skip_;
  int fd_;
  std::string tmp_;
  const CtrCacheLayout& layout_;
  RecordShape shape_;
  CtrRows& in_;
  uint64_t records_ = 0, bad_lines_ = 0, list_ids_ = 0, skipped_ = 0, first_line_ = 0;
  bool first_seen_ = false, labelled_ = true;
  std::string first_bad_;
  std::vector<uint8_t> out_;
  int lists_fd_ = -1;
  std::vector<uint8_t> lists_;  // lists not written yet
};

class CtrCacheDataset final : public Dataset {
 public:
  CtrCacheDataset(const std::string& path, const std::string& cache_dir, bool skip_bad_lines,
                  const LabelRange& range, const CtrCacheLayout& layout,
                  const std::function<std::unique_ptr<CtrRows>()>& make_rows)
      : path_(path), layout_(layout), shape_(layout) {
    PSTRAIN_CHECK(layout.fields <= 4096 && layout.max_ids < (1u << kCountBits));
    if (range.classes == 1)
      throw Error(path + ": CTR labels are 0 and 1, but " + range.origin + " allows 1 class");
    classes_ = range.classes > 0 ? range.classes : 2;
    const std::string cache = parsed_cache_path(path, cache_dir, layout.suffix);
    if (::access(cache.c_str(), R_OK) != 0 || !load(cache)) {
      PSLOG(INFO) << "parsing " << path << " (" << layout.format << ") into " << cache;
      create_file_atomically(cache, [&](int fd, const std::string& tmp) {
        const std::unique_ptr<CtrRows> rows = make_rows();
        Converter(path, skip_bad_lines, fd, tmp, layout_, *rows).run();
      });
      if (!load(cache)) throw Error(cache + ": the cache file just written is not valid");
    }
    if (bad_lines_ > 0 && !skip_bad_lines) throw Error(first_bad_ + skip_bad_lines_hint());
    if (bad_lines_ > 0) {
      PSLOG(INFO) << path << ": skipped " << bad_lines_ << " of " << lines_
                  << " lines (--skip-bad-lines); the first: " << first_bad_;
    }
  }

  size_t size() const override { return records_; }
  size_t feature_dim() const override { return shape_.dense; }
  int num_classes() const override { return classes_; }
  size_t id_fields() const override { return shape_.fields; }
  bool labelled() const override { return labelled_; }

  void read(const size_t* records, size_t count, float* features, int32_t* labels) const override {
    for_each(records, count, [&](size_t i, const uint8_t* r) { decode(records[i], r, features, labels, i); });
  }

  void read_ids(const size_t* records, size_t count, IdLists* out) const override {
    if (shape_.fields == 0) return Dataset::read_ids(records, count, out);  // throws: no fields
    out->ids.clear();
    out->counts.clear();
    std::vector<uint64_t> lists, slots;
    for_each(records, count,
             [&](size_t i, const uint8_t* r) { append_ids(records[i], r, lists, slots, *out); });
  }

  // One pass: each record's pread serves both (the trainer's prefetch thread spent half its
  // time in the second pread of every record, bench/ctr.py).
  void read_with_ids(const size_t* records, size_t count, float* features, int32_t* labels,
                     IdLists* out) const override {
    if (shape_.fields == 0) return Dataset::read_ids(records, count, out);  // throws: no fields
    out->ids.clear();
    out->counts.clear();
    std::vector<uint64_t> lists, slots;
    for_each(records, count, [&](size_t i, const uint8_t* r) {
      decode(records[i], r, features, labels, i);
      append_ids(records[i], r, lists, slots, *out);
    });
  }

 private:
  // Record `record` (encoded at r)'s features and label, as the batch's i-th.
  void decode(size_t record, const uint8_t* r, float* features, int32_t* labels, size_t i) const {
    const size_t dense_bytes = shape_.dense * sizeof(float);
    if (dense_bytes > 0) std::memcpy(features + i * shape_.dense, r + shape_.ids_bytes, dense_bytes);
    std::memcpy(&labels[i], r + shape_.label_at, sizeof(int32_t));
    if (labelled_ ? labels[i] != 0 && labels[i] != 1 : labels[i] != kNoLabel) {
      throw Error(path_ + ": record " + std::to_string(record) + " has label " + std::to_string(labels[i]) +
                  " in the cache file (it changed after it was opened?)");
    }
    if (!labelled_) labels[i] = 0;
  }

  bool has_list(const uint32_t* mask, size_t c) const { return (mask[c / 32] >> (c % 32) & 1) != 0; }

  // Record `record`'s fields (encoded at r) to out; `lists` and `slots` are scratch.
  void append_ids(size_t record, const uint8_t* r, std::vector<uint64_t>& lists, std::vector<uint64_t>& slots,
                  IdLists& out) const {
    const size_t fields = shape_.fields;
    uint32_t mask[128] = {};  // 4096 fields at most
    std::memcpy(mask, r + shape_.mask_at, shape_.mask_words * sizeof(uint32_t));
    bool any = false;
    for (size_t w = 0; w < shape_.mask_words; ++w) any = any || mask[w] != 0;
    const size_t at = out.ids.size();
    out.counts.resize(out.counts.size() + fields, 1);
    if (!any) {
      out.ids.resize(at + fields);
      std::memcpy(out.ids.data() + at, r, shape_.ids_bytes);
      return;
    }
    slots.resize(fields);
    std::memcpy(slots.data(), r, shape_.ids_bytes);
    // The record's lists are contiguous, in field order: [first, end) of the lists section.
    uint64_t first = 0, end = 0;
    const auto corrupt = [&](const std::string& why) {
      return Error(path_ + ": record " + std::to_string(record) + " in the cache file: " + why +
                   " (the cache changed after it was opened?)");
    };
    for (size_t c = 0; c < fields; ++c) {
      if (!has_list(mask, c)) continue;
      const uint64_t offset = slots[c] >> kCountBits, n = slots[c] & ((uint64_t{1} << kCountBits) - 1);
      if (n < 2 || n > layout_.max_ids || (end > 0 && offset != end) || offset > list_ids_ ||
          n > list_ids_ - offset)
        throw corrupt("a bad list slot");
      if (end == 0) first = offset;
      end = offset + n;
    }
    if (fields % 32 != 0 && mask[shape_.mask_words - 1] >> (fields % 32) != 0)
      throw corrupt("a bad list mask");
    lists.resize(end - first);
    file_->read_exact(lists_at_ + first * sizeof(uint64_t), lists.size() * sizeof(uint64_t), lists.data());
    uint32_t* counts = out.counts.data() + out.counts.size() - fields;
    for (size_t c = 0; c < fields; ++c) {
      if (!has_list(mask, c)) {
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
  // unshuffled epoch) are read chunk_records at a time, others one by one.
  template <typename F>
  void for_each(const size_t* records, size_t count, F f) const {
    const size_t bytes = shape_.record_bytes;
    std::vector<uint8_t> buf(std::min(count, shape_.chunk_records) * bytes);
    for (size_t i = 0; i < count;) {
      size_t run = 0;
      do {
        if (records[i + run] >= records_) {
          throw Error(path_ + ": record " + std::to_string(records[i + run]) + " out of range (" +
                      std::to_string(records_) + " records)");
        }
        ++run;
      } while (i + run < count && run < shape_.chunk_records && records[i + run] == records[i] + run);
      file_->read_exact(kFixedBytes + records[i] * bytes, run * bytes, buf.data());
      for (size_t j = 0; j < run; ++j) f(i + j, buf.data() + j * bytes);
      i += run;
    }
  }

  bool load(const std::string& cache_path) {
    auto file = std::make_unique<RandomAccessFile>(cache_path, path_ + " (cache " + cache_path + ")");
    uint8_t fixed[kFixedBytes];
    if (file->read_some(0, sizeof fixed, fixed) < sizeof fixed || std::memcmp(fixed, layout_.magic, 8) != 0)
      return false;
    const uint64_t header = get_u64(fixed + 8), records = get_u64(fixed + 16), lines = get_u64(fixed + 24);
    const uint64_t bad = get_u64(fixed + 32), message_bytes = get_u64(fixed + 40),
                   list_ids = get_u64(fixed + 48);
    const uint64_t bytes = shape_.record_bytes;
    if (header != kFixedBytes || records == 0 || records > file->size() / bytes ||
        list_ids > file->size() / sizeof(uint64_t) || message_bytes > 4 * layout_.max_line || bad > lines ||
        records + bad != lines ||
        kFixedBytes + records * bytes + list_ids * sizeof(uint64_t) + message_bytes != file->size() ||
        (bad > 0) != (message_bytes > 0)) {
      return false;
    }
    int32_t label = 0;  // the first record's says whether the file has labels (all agree)
    file->read_exact(kFixedBytes + shape_.label_at, sizeof label, &label);
    lists_at_ = kFixedBytes + records * bytes;
    list_ids_ = list_ids;
    first_bad_.resize(message_bytes);
    file->read_exact(lists_at_ + list_ids * sizeof(uint64_t), message_bytes, first_bad_.data());
    records_ = records;
    lines_ = lines;
    bad_lines_ = bad;
    labelled_ = label != kNoLabel;
    file_ = std::move(file);
    return true;
  }

  std::string path_;
  CtrCacheLayout layout_;
  RecordShape shape_;
  std::unique_ptr<RandomAccessFile> file_;
  uint64_t records_ = 0, lines_ = 0, bad_lines_ = 0;
  uint64_t lists_at_ = 0, list_ids_ = 0;  // the lists section: its offset and IDs
  std::string first_bad_;
  int classes_ = 2;
  bool labelled_ = true;
};

}  // namespace

std::string skip_bad_lines_hint() {
  return " (fix or remove the line, or give --skip-bad-lines to leave out the lines that do not parse)";
}

std::unique_ptr<Dataset> open_ctr_cache(const std::string& path, const std::string& cache_dir,
                                        bool skip_bad_lines, const LabelRange& labels_range,
                                        const CtrCacheLayout& layout,
                                        const std::function<std::unique_ptr<CtrLineParser>()>& make_parser) {
  return open_ctr_cache_rows(path, cache_dir, skip_bad_lines, labels_range, layout,
                             [&] { return text_rows(path, layout, make_parser()); });
}

std::unique_ptr<Dataset> open_ctr_cache_rows(const std::string& path, const std::string& cache_dir,
                                             bool skip_bad_lines, const LabelRange& labels_range,
                                             const CtrCacheLayout& layout,
                                             const std::function<std::unique_ptr<CtrRows>()>& make_rows) {
  return std::make_unique<CtrCacheDataset>(path, cache_dir, skip_bad_lines, labels_range, layout, make_rows);
}

}  // namespace pstrain
