#include "shared/checkpoint/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>
#include <sstream>

#include "shared/util/byte_reader.h"
#include "shared/util/error.h"

namespace pstrain {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'T', 'R', 'C', 'K', 'P', 'T'};
constexpr size_t kMaxName = 16;
constexpr size_t kMaxSlots = 4;
constexpr uint32_t kMaxTables = 4096;

// Little-endian fields and bytes to a sink, the CRC-32 (zlib's) of all of them computed as they go.
class Writer {
 public:
  explicit Writer(ByteSink* out) : out_(out), crc_(static_cast<uint32_t>(crc32(0L, Z_NULL, 0))) {}
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const Bytef*>(p);
    for (size_t done = 0; done < n;) {  // zlib takes uInt lengths
      const size_t piece = std::min<size_t>(n - done, 1u << 30);
      crc_ = static_cast<uint32_t>(crc32(crc_, b + done, static_cast<uInt>(piece)));
      done += piece;
    }
    bytes_ += n;
    if (n > 0) out_->append(p, n);
  }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void floats(const std::vector<float>& v) { bytes(v.data(), v.size() * sizeof(float)); }
  uint32_t crc() const { return crc_; }
  uint64_t written() const { return bytes_; }

 private:
  void le(uint64_t v, int n) {
    char b[8];
    for (int i = 0; i < n; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    bytes(b, static_cast<size_t>(n));
  }
  ByteSink* const out_;
  uint32_t crc_;
  uint64_t bytes_ = 0;
};

// A table's bytes through the file's Writer, counted against the size announced before them.
class TableSink final : public ByteSink {
 public:
  explicit TableSink(Writer* w) : w_(w) {}
  void append(const void* data, size_t n) override {
    w_->bytes(data, n);
    bytes_ += n;
  }
  uint64_t bytes() const { return bytes_; }

 private:
  Writer* const w_;
  uint64_t bytes_ = 0;
};

// Little-endian fields from a ByteReader (a string's bytes or a file's, read in pieces).
class Reader {
 public:
  explicit Reader(ByteReader& in) : in_(in) {}
  bool u32(uint32_t* v) { return le(v, 4); }
  bool u64(uint64_t* v) { return le(v, 8); }
  bool bytes(void* p, size_t n) { return n == 0 || in_.read(p, n); }
  uint64_t left() const { return in_.left(); }

 private:
  template <typename T>
  bool le(T* v, int n) {
    unsigned char b[8];
    if (!in_.read(b, static_cast<size_t>(n))) return false;
    uint64_t x = 0;
    for (int i = 0; i < n; ++i) x |= static_cast<uint64_t>(b[i]) << (8 * i);
    *v = static_cast<T>(x);
    return true;
  }
  ByteReader& in_;
};

// Header: magic, format, shard, num_shards, version, total, total_steps, offset, length,
// optimizer name (u32 length + bytes), number of slots. Then values, slots, CRC-32 of it all.
constexpr size_t kFixedBytes = 8 + 4 + 4 + 4 + 8 + 8 + 8 + 8 + 8 + 4;

}  // namespace

uint32_t crc32_of(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t done = 0;
  while (done < bytes.size()) {  // zlib takes uInt lengths
    const size_t n = std::min<size_t>(bytes.size() - done, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

uint32_t file_crc(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const size_t end = bytes.size() < 4 ? bytes.size() : bytes.size() - 4;
  for (size_t done = 0; done < end;) {  // zlib takes uInt lengths
    const size_t n = std::min<size_t>(end - done, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

bool file_crc_of(const std::string& path, uint64_t* bytes, uint32_t* crc, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return (*error = std::string("cannot open: ") + std::strerror(errno), false);
  // The CRC covers all but the last 4 bytes (the file's own CRC): the last 4 read are held back.
  std::vector<unsigned char> buffer((size_t{1} << 20) + 4);
  size_t held = 0;  // bytes at the buffer's start not yet in the CRC (at most 4 between reads)
  uLong c = crc32(0L, Z_NULL, 0);
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data() + held, buffer.size() - held);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = std::string("cannot read: ") + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
    held += static_cast<size_t>(n);
    if (held > 4) {
      c = crc32(c, buffer.data(), static_cast<uInt>(held - 4));
      std::memmove(buffer.data(), buffer.data() + held - 4, 4);
      held = 4;
    }
  }
  ::close(fd);
  if (total < 4) c = crc32(c, buffer.data(), static_cast<uInt>(held));  // as file_crc: a short file whole
  *bytes = total;
  *crc = static_cast<uint32_t>(c);
  return true;
}

uint32_t write_shard_checkpoint(const ShardCheckpoint& c, const std::vector<TableSource>& tables,
                                ByteSink* out) {
  PSTRAIN_CHECK(tables.size() <= kMaxTables);
  Writer w(out);
  w.bytes(kMagic, sizeof kMagic);
  w.u32(tables.empty() ? kCheckpointFormat : kCheckpointFormatWithTables);
  w.u32(c.shard);
  w.u32(c.num_shards);
  w.u64(c.version);
  w.u64(c.total);
  w.u64(c.total_steps);
  w.u64(c.offset);
  w.u64(c.values.size());
  w.u32(static_cast<uint32_t>(c.optimizer.size()));
  w.bytes(c.optimizer.data(), c.optimizer.size());
  w.u32(static_cast<uint32_t>(c.slots.size()));
  w.floats(c.values);
  for (const auto& slot : c.slots) w.floats(slot);
  if (!tables.empty()) {  // format 2: the embedding tables, each a length and its bytes
    w.u32(static_cast<uint32_t>(tables.size()));
    for (const TableSource& t : tables) {
      w.u64(t.bytes);
      TableSink sink(&w);
      t.write(&sink);
      PSTRAIN_CHECK_EQ(sink.bytes(), t.bytes);  // the length written before them
    }
  }
  const uint32_t crc = w.crc();
  w.u32(crc);
  return crc;
}

uint64_t shard_checkpoint_size(const ShardCheckpoint& c, const std::vector<TableSource>& tables) {
  // the slots' count and the CRC after the fixed fields
  uint64_t bytes =
      kFixedBytes + c.optimizer.size() + 4 + (1 + c.slots.size()) * c.values.size() * sizeof(float) + 4;
  if (!tables.empty()) bytes += 4;
  for (const TableSource& t : tables) bytes += 8 + t.bytes;
  return bytes;
}

std::string encode_shard_checkpoint(const ShardCheckpoint& c) {
  std::vector<TableSource> tables;
  for (const std::string& t : c.tables) {
    tables.push_back(TableSource{t.size(), [&t](ByteSink* out) { out->append(t.data(), t.size()); }});
  }
  std::string out;
  StringSink sink(&out);
  write_shard_checkpoint(c, tables, &sink);
  return out;
}

namespace {

// decode_shard_checkpoint's checks on the bytes of `in` (its whole range: `size` bytes, whose
// CRC-32 but the last 4 is `crc`): the header, values and slots into *out, and where each
// embedding table lies (its offset and length in the range) into *tables, unread.
bool decode_shard(ByteReader& in, uint64_t size, uint32_t crc, ShardCheckpoint* out,
                  std::vector<std::pair<uint64_t, uint64_t>>* tables, std::string* error) {
  const auto fail = [&](const std::string& why) { return (*error = in.error().empty() ? why : in.error(), false); };
  if (size < kFixedBytes + 4 + 4) return fail("truncated: " + std::to_string(size) + " bytes, shorter than any checkpoint");
  Reader r(in);
  char magic[8];
  r.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) return fail("not a pstrain checkpoint (bad magic)");
  uint32_t format = 0, name_len = 0, num_slots = 0;
  uint64_t length = 0;
  ShardCheckpoint c;
  r.u32(&format);
  if (format != kCheckpointFormat && format != kCheckpointFormatWithTables) {
    return fail("checkpoint format " + std::to_string(format) + " is not supported (expected " +
                std::to_string(kCheckpointFormat) + " or " + std::to_string(kCheckpointFormatWithTables) + ")");
  }
  r.u32(&c.shard);
  r.u32(&c.num_shards);
  r.u64(&c.version);
  r.u64(&c.total);
  r.u64(&c.total_steps);
  r.u64(&c.offset);
  r.u64(&length);
  r.u32(&name_len);
  if (name_len > kMaxName || r.left() < name_len) return fail("optimizer name of " + std::to_string(name_len) + " bytes");
  c.optimizer.resize(name_len);
  r.bytes(c.optimizer.data(), name_len);
  if (!r.u32(&num_slots) || num_slots > kMaxSlots) return fail("bad number of optimizer slots");
  if (c.num_shards == 0 || c.shard >= c.num_shards) return fail("shard index out of range");
  if (length > c.total || c.offset > c.total - length) return fail("slice outside the model");
  // Sizes are checked against the bytes present before anything is allocated.
  const uint64_t header = size - r.left();  // where the floats start
  const uint64_t floats = (1 + static_cast<uint64_t>(num_slots)) * length * sizeof(float);
  uint64_t want = floats + 4;
  tables->clear();
  if (format == kCheckpointFormatWithTables && length <= (uint64_t{1} << 40) && r.left() >= want + 4) {
    // The tables' section after the floats: a count, then each table's length and bytes.
    ByteReader section(in, header + floats);
    Reader t(section);
    uint32_t count = 0;
    t.u32(&count);
    if (count == 0 || count > kMaxTables) return fail("bad number of embedding tables " + std::to_string(count));
    uint64_t pos = header + floats + 4;
    for (uint32_t k = 0; k < count; ++k) {
      uint64_t len = 0;
      if (pos > size - 4 || size - 4 - pos < 8) return fail("truncated embedding tables");
      if (!t.u64(&len)) return fail(section.error().empty() ? "truncated embedding tables" : section.error());
      pos += 8;
      if (len > size - 4 - pos) return fail("truncated embedding table " + std::to_string(k));
      tables->emplace_back(pos, len);
      section.skip(len);
      pos += len;
    }
    want = pos + 4 - header;
  } else if (format == kCheckpointFormatWithTables) {
    return fail("truncated: no embedding tables");
  }
  if (length > (uint64_t{1} << 40) || r.left() != want) {
    return fail(std::string(r.left() < want ? "truncated" : "extended") + ": " + std::to_string(size) +
                " bytes, the header promises " + std::to_string(header + want));
  }
  ByteReader tail(in, size - 4);
  unsigned char stored[4];
  if (!tail.read(stored, 4)) return fail(tail.error());
  const uint32_t stored_crc = static_cast<uint32_t>(stored[0]) | static_cast<uint32_t>(stored[1]) << 8 |
                              static_cast<uint32_t>(stored[2]) << 16 | static_cast<uint32_t>(stored[3]) << 24;
  if (crc != stored_crc) return fail("checksum mismatch (corrupted)");
  c.values.resize(length);
  c.slots.assign(num_slots, std::vector<float>(length));
  bool read = r.bytes(c.values.data(), length * sizeof(float));  // little-endian hosts only (as the wire)
  for (auto& slot : c.slots) read = read && r.bytes(slot.data(), length * sizeof(float));
  if (!read) return fail("truncated floats");
  *out = std::move(c);
  return true;
}

}  // namespace

bool decode_shard_checkpoint(const std::string& bytes, ShardCheckpoint* out, std::string* error) {
  ByteReader in(bytes);
  std::vector<std::pair<uint64_t, uint64_t>> tables;
  if (!decode_shard(in, bytes.size(), file_crc(bytes), out, &tables, error)) return false;
  for (const auto& [at, len] : tables) out->tables.emplace_back(bytes.data() + at, len);
  return true;
}

bool read_shard_checkpoint_file(const std::string& path, uint64_t bytes, uint32_t crc, ShardCheckpoint* out,
                                std::string* error) {
  ByteReader in(path, 0, bytes);
  std::vector<std::pair<uint64_t, uint64_t>> tables;
  if (!decode_shard(in, bytes, crc, out, &tables, error)) return false;
  for (const auto& [at, len] : tables) out->table_files.push_back(TableInFile{path, at, len});
  return true;
}

std::string encode_manifest(const CheckpointManifest& m) {
  std::ostringstream os;
  os << "pstrain-checkpoint " << kCheckpointFormat << "\n"
     << "version " << m.version << "\n"
     << "total " << m.total << "\n"
     << "total_steps " << m.total_steps << "\n"
     << "shards " << m.shards.size() << "\n";
  for (const auto& f : m.shards) os << "shard " << f.name << " " << f.bytes << " " << f.crc << "\n";
  for (const auto& [key, value] : m.job) {
    std::string one_line = value;
    std::replace(one_line.begin(), one_line.end(), '\n', ' ');
    os << "job " << key << " " << one_line << "\n";
  }
  std::istringstream layout(m.layout);
  std::string line;
  while (std::getline(layout, line)) {
    if (!line.empty()) os << "var " << line << "\n";
  }
  os << "end\n";
  return os.str();
}

bool decode_manifest(const std::string& text, CheckpointManifest* out, std::string* error) {
  const auto fail = [error](const std::string& why) { return (*error = "manifest: " + why, false); };
  if (text.size() > (1u << 20)) return fail("larger than 1 MiB");
  std::istringstream in(text);
  std::string word, line;
  unsigned format = 0;
  size_t shards = 0;
  CheckpointManifest m;
  if (!(in >> word >> format) || word != "pstrain-checkpoint") return fail("not a pstrain manifest");
  if (format != kCheckpointFormat) return fail("format " + std::to_string(format) + " is not supported");
  if (!(in >> word >> m.version) || word != "version") return fail("no version line");
  if (!(in >> word >> m.total) || word != "total") return fail("no total line");
  if (!(in >> word >> m.total_steps) || word != "total_steps") return fail("no total_steps line");
  if (!(in >> word >> shards) || word != "shards" || shards == 0 || shards > 4096) return fail("bad shards line");
  for (size_t i = 0; i < shards; ++i) {
    CheckpointManifest::File f;
    if (!(in >> word >> f.name >> f.bytes >> f.crc) || word != "shard") return fail("bad shard line " + std::to_string(i));
    if (f.name != shard_file_name(static_cast<uint32_t>(i), static_cast<uint32_t>(shards))) {
      return fail("shard line " + std::to_string(i) + " names " + f.name);
    }
    m.shards.push_back(f);
  }
  std::getline(in, line);  // rest of the last shard line
  bool ended = false;
  while (std::getline(in, line)) {
    if (line == "end") {
      ended = true;
      break;
    }
    if (line.rfind("job ", 0) == 0) {
      const size_t space = line.find(' ', 4);
      if (space == std::string::npos || space == 4) return fail("bad job line '" + line.substr(0, 40) + "'");
      m.job.emplace_back(line.substr(4, space - 4), line.substr(space + 1));
      continue;
    }
    if (line.rfind("var ", 0) != 0) return fail("unexpected line '" + line.substr(0, 40) + "'");
    m.layout += line.substr(4) + "\n";
  }
  if (!ended) return fail("truncated (no end line)");
  *out = std::move(m);
  return true;
}

std::string checkpoint_version_dir(const std::string& dir, uint64_t version) {
  char name[32];
  std::snprintf(name, sizeof name, "v%010llu", static_cast<unsigned long long>(version));
  return dir + "/" + name;
}

std::string shard_file_name(uint32_t shard, uint32_t num_shards) {
  return "shard" + std::to_string(shard) + "of" + std::to_string(num_shards) + ".ckpt";
}

std::vector<uint64_t> checkpoint_versions(const std::string& dir) {
  std::vector<uint64_t> versions;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return versions;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() == 11 && name[0] == 'v' && name.find_first_not_of("0123456789", 1) == std::string::npos) {
      versions.push_back(std::stoull(name.substr(1)));
    }
  }
  closedir(d);
  std::sort(versions.rbegin(), versions.rend());
  return versions;
}

namespace {

// The files pstrain writes into a version directory, and their temporaries (.tmp).
bool written_by_pstrain(const std::string& name) {
  static const std::regex kNames(
      R"((shard[0-9]+of[0-9]+\.ckpt|MANIFEST|model\.json|layer[0-9]+\.running_(mean|var)\.npy)(\.tmp)?)");
  return std::regex_match(name, kNames);
}

bool is_temporary(const std::string& name) { return name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0; }

// Removes `dir`'s files that pstrain wrote (only their temporaries: `temporaries_only`), then
// `dir` itself unless `temporaries_only`; what could not be removed is added to *left.
void remove_written(const std::string& dir, bool temporaries_only, std::string* left) {
  const auto note = [left](const std::string& what) { *left += (left->empty() ? "" : "; ") + what; };
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return note("cannot read '" + dir + "': " + std::strerror(errno));
  std::vector<std::string> names;
  bool foreign = false;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (!written_by_pstrain(name)) {
      foreign = true;
    } else if (!temporaries_only || is_temporary(name)) {
      names.push_back(name);
    }
  }
  closedir(d);
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    if (::unlink(path.c_str()) != 0) note("cannot remove '" + path + "': " + std::strerror(errno));
  }
  if (temporaries_only) return;
  if (foreign) return note("'" + dir + "' holds files pstrain did not write; they are left");
  if (::rmdir(dir.c_str()) != 0) note("cannot remove '" + dir + "': " + std::strerror(errno));
}

}  // namespace

std::string prune_checkpoints(const std::string& dir, int keep) {
  std::string left;
  int complete = 0;
  for (uint64_t v : checkpoint_versions(dir)) {
    const std::string vdir = checkpoint_version_dir(dir, v);
    struct stat st {};
    const bool has_manifest = ::stat((vdir + "/MANIFEST").c_str(), &st) == 0;
    if (complete == 0 && !has_manifest) continue;  // newer than every complete one: a write may be under way
    if (has_manifest && complete < keep) {
      ++complete;
      remove_written(vdir, /*temporaries_only=*/true, &left);  // a write cut short before a restart
      continue;
    }
    remove_written(vdir, /*temporaries_only=*/false, &left);
  }
  return left;
}

}  // namespace pstrain
