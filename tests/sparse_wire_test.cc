// The sparse messages' bodies (shared/wire/sparse_wire.h, docs/wire_protocol.md "Sparse tables"):
// every op round-trips, the bytes are the documented layout, and each malformed body fails with
// the exact error the PS will put in its ERROR reply (truncations, bit flips, each check, sizes
// that would overflow or exhaust memory). Also the ops' entries in protocol.h.
#include "shared/wire/sparse_wire.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "shared/util/error.h"

namespace pstrain {
namespace {

const std::vector<Op> kSparseOps = {Op::kSparsePull, Op::kSparseRows, Op::kSparsePush};

// Little-endian bytes written field by field, independently of the encoder.
class Body {
 public:
  Body& u32(uint32_t v) { return put(v, 4); }
  Body& u64(uint64_t v) { return put(v, 8); }
  Body& f32(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return put(bits, 4);
  }
  Body& head(uint32_t sections, uint32_t reserved = 0) { return u32(sections).u32(reserved); }
  Body& section(uint32_t table, uint32_t dim, uint64_t count) { return u32(table).u32(dim).u64(count); }
  Body& zeros(size_t n) {
    bytes_.append(n, '\0');
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  Body& put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::string bytes_;
};

SparseSection pull_section(uint32_t table, std::vector<uint64_t> ids) {
  SparseSection s;
  s.table = table;
  s.ids = std::move(ids);
  return s;
}

SparseSection rows_section(uint32_t table, uint32_t dim, size_t rows, float first) {
  SparseSection s;
  s.table = table;
  s.dim = dim;
  for (size_t i = 0; i < rows * dim; ++i) s.values.push_back(first + 0.25f * static_cast<float>(i));
  return s;
}

SparseSection push_section(uint32_t table, uint32_t dim, std::vector<uint64_t> ids, float first) {
  SparseSection s = rows_section(table, dim, ids.size(), first);
  s.ids = std::move(ids);
  return s;
}

// Several sections of `op` with counts 0, 1 and more, extreme table numbers and IDs.
std::vector<SparseSection> several(Op op) {
  const std::vector<uint64_t> ids = {0, 1, UINT64_MAX, uint64_t{1} << 63, 0x0123456789abcdef};
  switch (op) {
    case Op::kSparsePull:
      return {pull_section(7, ids), pull_section(0, {}), pull_section(UINT32_MAX, {42})};
    case Op::kSparseRows:
      return {rows_section(7, 4, 5, -1.5f), rows_section(0, 1, 0, 0),
              rows_section(UINT32_MAX, kMaxSparseDim, 1, 3)};
    default:
      return {push_section(7, 4, ids, -1.5f), push_section(0, 1, {}, 0),
              push_section(UINT32_MAX, 3, {42, 42}, 1e30f)};
  }
}

bool same(const std::vector<SparseSection>& a, const std::vector<SparseSection>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].table != b[i].table || a[i].dim != b[i].dim || a[i].ids != b[i].ids ||
        a[i].values.size() != b[i].values.size() || a[i].count() != b[i].count() ||
        (!a[i].values.empty() &&
         std::memcmp(a[i].values.data(), b[i].values.data(), a[i].values.size() * sizeof(float)) != 0)) {
      return false;
    }
  }
  return true;
}

std::vector<SparseSection> decoded(Op op, const std::string& bytes) {
  std::vector<SparseSection> out;
  std::string error;
  EXPECT_TRUE(decode_sparse_body(op, bytes.data(), bytes.size(), &out, &error))
      << op_name(op) << ": " << error;
  return out;
}

std::string decode_error(Op op, const std::string& bytes) {
  std::vector<SparseSection> out;
  std::string error;
  if (decode_sparse_body(op, bytes.data(), bytes.size(), &out, &error)) return "(decoded)";
  return error;
}

std::string encode_error(Op op, const std::vector<SparseSection>& sections) {
  try {
    encode_sparse_body(op, sections);
  } catch (const Error& e) {
    return e.what();
  }
  return "(encoded)";
}

TEST(SparseWireTest, SparseOps) {
  for (uint32_t op = 1; op <= 12; ++op) EXPECT_EQ(is_sparse_op(static_cast<Op>(op)), op >= 10) << op;
  EXPECT_FALSE(is_sparse_op(static_cast<Op>(13)));
}

TEST(SparseWireTest, OpNamesAndFrames) {
  EXPECT_STREQ(op_name(Op::kSparsePull), "SPARSE_PULL");
  EXPECT_STREQ(op_name(Op::kSparseRows), "SPARSE_ROWS");
  EXPECT_STREQ(op_name(Op::kSparsePush), "SPARSE_PUSH");
  for (Op op : kSparseOps) {
    EXPECT_TRUE(op_has_payload(op)) << op_name(op);
    const std::string body = encode_sparse_body(op, several(op));
    Header h;
    h.op = op;
    h.length = body.size() / 4;
    h.shm = 1;  // means nothing for a sparse op: the body is always frame 1
    std::string error;
    EXPECT_TRUE(check_frames(h, 2, body.size(), &error)) << op_name(op) << ": " << error;
    const std::string words = std::to_string(h.length);
    for (size_t frames : {0, 1, 3}) {
      EXPECT_FALSE(check_frames(h, frames, body.size(), &error));
      EXPECT_EQ(error, std::string(op_name(op)) + " needs 2 frame(s), got " + std::to_string(frames));
    }
    for (size_t bytes : {size_t{0}, body.size() - 4, body.size() - 1, body.size() + 4}) {
      EXPECT_FALSE(check_frames(h, 2, bytes, &error));
      EXPECT_EQ(error, std::string(op_name(op)) + " payload is " + std::to_string(bytes) +
                           " bytes, header says " + words + " float32 (" + std::to_string(body.size()) +
                           " bytes)");
    }
  }
}

TEST(SparseWireTest, EveryOpRoundTrips) {
  for (Op op : kSparseOps) {
    for (const auto& sections :
         {std::vector<SparseSection>{}, several(op), std::vector<SparseSection>{several(op)[1]}}) {
      const std::string bytes = encode_sparse_body(op, sections);
      const std::vector<SparseSection> back = decoded(op, bytes);
      EXPECT_TRUE(same(sections, back)) << op_name(op) << ", " << sections.size() << " sections";
      EXPECT_EQ(encode_sparse_body(op, back), bytes) << op_name(op);
    }
  }
}

TEST(SparseWireTest, RowsDecodeWithoutIds) {
  const std::vector<SparseSection> back =
      decoded(Op::kSparseRows, encode_sparse_body(Op::kSparseRows, several(Op::kSparseRows)));
  ASSERT_EQ(back.size(), 3u);
  for (const SparseSection& s : back) EXPECT_TRUE(s.ids.empty());
  EXPECT_EQ(back[0].count(), 5u);
  EXPECT_EQ(back[0].values.size(), 20u);
  EXPECT_EQ(back[1].count(), 0u);
  EXPECT_EQ(back[2].values.size(), size_t{kMaxSparseDim});
}

// The bytes are the layout of sparse_wire.h, written here field by field.
TEST(SparseWireTest, BytesAreTheDocumentedLayout) {
  EXPECT_EQ(encode_sparse_body(Op::kSparsePull, {}), Body().head(0).bytes());
  EXPECT_EQ(
      encode_sparse_body(Op::kSparsePull, {pull_section(7, {5, 0x0102030405060708}), pull_section(2, {})}),
      Body().head(2).section(7, 0, 2).u64(5).u64(0x0102030405060708).section(2, 0, 0).bytes());
  EXPECT_EQ(encode_sparse_body(Op::kSparseRows, {rows_section(9, 2, 2, 1)}),
            Body().head(1).section(9, 2, 2).f32(1).f32(1.25f).f32(1.5f).f32(1.75f).bytes());
  EXPECT_EQ(
      encode_sparse_body(Op::kSparsePush, {push_section(3, 2, {11, 12}, -1)}),
      Body().head(1).section(3, 2, 2).u64(11).u64(12).f32(-1).f32(-0.75f).f32(-0.5f).f32(-0.25f).bytes());
}

TEST(SparseWireTest, UnalignedBodiesDecode) {
  for (Op op : kSparseOps) {
    const std::string bytes = encode_sparse_body(op, several(op));
    for (size_t shift = 1; shift < 8; ++shift) {
      const std::string buffer = std::string(shift, 'x') + bytes;
      std::vector<SparseSection> out;
      std::string error;
      ASSERT_TRUE(decode_sparse_body(op, buffer.data() + shift, bytes.size(), &out, &error)) << error;
      EXPECT_TRUE(same(out, several(op))) << op_name(op) << " at offset " << shift;
    }
  }
}

// What the IDs and values mean is the receiver's to check (ps/sparse/shard_tables.h).
TEST(SparseWireTest, RepeatedIdsAndNonFiniteValuesAreTheReceiversToCheck) {
  SparseSection s = push_section(1, 2, {4, 4, 4}, 0);
  s.values[0] = std::nanf("");
  s.values[3] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(same(decoded(Op::kSparsePush, encode_sparse_body(Op::kSparsePush, {s})), {s}));
  EXPECT_TRUE(same(decoded(Op::kSparsePull, encode_sparse_body(Op::kSparsePull, {pull_section(1, {4, 4})})),
                   {pull_section(1, {4, 4})}));
}

TEST(SparseWireCorruptionTest, EveryTruncationFails) {
  for (Op op : kSparseOps) {
    const std::string bytes = encode_sparse_body(op, several(op));
    for (size_t n = 0; n < bytes.size(); ++n) {
      const std::string error = decode_error(op, bytes.substr(0, n));
      EXPECT_EQ(error.rfind(std::string(op_name(op)) + " ", 0), 0u)
          << op_name(op) << " cut to " << n << ": " << error;
    }
  }
  // A cut at a word boundary inside the sections: what is missing, and where.
  const std::string push = encode_sparse_body(Op::kSparsePush, several(Op::kSparsePush));
  EXPECT_EQ(decode_error(Op::kSparsePush, push.substr(0, 8 + 16 + 16)),
            "SPARSE_PUSH section 0 (table 7): 5 ids need 40 bytes, 16 left");
  EXPECT_EQ(decode_error(Op::kSparsePush, push.substr(0, 8 + 16 + 40 + 76)),
            "SPARSE_PUSH section 0 (table 7): 5 gradients of 4 floats need 80 bytes, 76 left");
  EXPECT_EQ(decode_error(Op::kSparsePush, push.substr(0, 8 + 16 + 40 + 80 + 12)),
            "SPARSE_PUSH section 1: its head needs 16 bytes, 12 left");
  const std::string rows = encode_sparse_body(Op::kSparseRows, several(Op::kSparseRows));
  EXPECT_EQ(decode_error(Op::kSparseRows, rows.substr(0, rows.size() - 4)),
            "SPARSE_ROWS section 2 (table 4294967295): 1 rows of 4096 floats need 16384 bytes, 16380 left");
}

// Every single bit flipped: the decoder never crashes, and what it accepts is a body it would
// write itself.
TEST(SparseWireCorruptionTest, EveryBitFlipDecodesOrFails) {
  for (Op op : kSparseOps) {
    const std::string bytes = encode_sparse_body(op, several(op));
    int refused = 0;
    for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
      std::string flipped = bytes;
      flipped[bit / 8] = static_cast<char>(flipped[bit / 8] ^ (1 << (bit % 8)));
      std::vector<SparseSection> out;
      std::string error;
      if (decode_sparse_body(op, flipped.data(), flipped.size(), &out, &error)) {
        EXPECT_EQ(encode_sparse_body(op, out), flipped) << op_name(op) << ", bit " << bit;
      } else {
        EXPECT_FALSE(error.empty());
        ++refused;
      }
    }
    EXPECT_GT(refused, 0) << op_name(op);
  }
}

TEST(SparseWireCorruptionTest, BodySizes) {
  EXPECT_EQ(decode_error(Op::kSparsePull, ""), "SPARSE_PULL body of 0 bytes is shorter than its 8-byte head");
  EXPECT_EQ(decode_error(Op::kSparseRows, std::string(4, '\0')),
            "SPARSE_ROWS body of 4 bytes is shorter than its 8-byte head");
  EXPECT_EQ(decode_error(Op::kSparsePush, std::string(10, '\0')),
            "SPARSE_PUSH body of 10 bytes is not a whole number of 4-byte words");
  EXPECT_EQ(decode_error(Op::kSparsePull, Body().head(0).zeros(1).bytes()),
            "SPARSE_PULL body of 9 bytes is not a whole number of 4-byte words");
}

// The limit is checked before any byte is read: 1 GiB of untouched zero pages as the body.
TEST(SparseWireCorruptionTest, BodyOverTheLimit) {
  const size_t mapped = kMaxSparseBodyBytes + 4;
  void* p = mmap(nullptr, mapped, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::vector<SparseSection> out;
  std::string error;
  EXPECT_FALSE(decode_sparse_body(Op::kSparsePush, p, mapped, &out, &error));
  EXPECT_EQ(error, "SPARSE_PUSH body of 1073741828 bytes exceeds 1073741824");
  EXPECT_FALSE(decode_sparse_body(Op::kSparsePush, p, kMaxSparseBodyBytes, &out, &error));
  EXPECT_EQ(error, "SPARSE_PUSH body has 1073741816 bytes after its 0 sections");
  munmap(p, mapped);
}

TEST(SparseWireCorruptionTest, ReservedWord) {
  EXPECT_EQ(decode_error(Op::kSparsePull, Body().head(0, 1).bytes()),
            "SPARSE_PULL reserved word is 1, not 0");
  EXPECT_EQ(decode_error(Op::kSparsePush, Body().head(0, 0x80000000).bytes()),
            "SPARSE_PUSH reserved word is 2147483648, not 0");
}

TEST(SparseWireCorruptionTest, TooManySections) {
  EXPECT_EQ(decode_error(Op::kSparseRows, Body().head(kMaxSparseSections + 1).bytes()),
            "SPARSE_ROWS has 4097 sections, at most 4096");
  EXPECT_EQ(decode_error(Op::kSparseRows, Body().head(UINT32_MAX).bytes()),
            "SPARSE_ROWS has 4294967295 sections, at most 4096");
  // The most sections there may be, each empty, decode.
  Body most;
  most.head(kMaxSparseSections);
  for (uint32_t t = 0; t < kMaxSparseSections; ++t) most.section(t, 0, 0);
  EXPECT_EQ(decoded(Op::kSparsePull, most.bytes()).size(), size_t{kMaxSparseSections});
}

TEST(SparseWireCorruptionTest, MissingSectionHead) {
  EXPECT_EQ(decode_error(Op::kSparsePull, Body().head(1).bytes()),
            "SPARSE_PULL section 0: its head needs 16 bytes, 0 left");
  EXPECT_EQ(decode_error(Op::kSparsePull, Body().head(2).section(5, 0, 0).u64(0).bytes()),
            "SPARSE_PULL section 1: its head needs 16 bytes, 8 left");
}

TEST(SparseWireCorruptionTest, Dim) {
  EXPECT_EQ(decode_error(Op::kSparsePull, Body().head(1).section(3, 1, 0).bytes()),
            "SPARSE_PULL section 0 (table 3): dim is 1, not 0");
  for (Op op : {Op::kSparseRows, Op::kSparsePush}) {
    const std::string name = std::string(op_name(op)) + " section 1 (table 8): dim is ";
    const Body first = Body().head(2).section(2, 1, 0);
    EXPECT_EQ(decode_error(op, Body(first).section(8, 0, 0).bytes()), name + "0, not 1..4096");
    EXPECT_EQ(decode_error(op, Body(first).section(8, kMaxSparseDim + 1, 0).bytes()),
              name + "4097, not 1..4096");
    EXPECT_EQ(decode_error(op, Body(first).section(8, UINT32_MAX, 0).bytes()),
              name + "4294967295, not 1..4096");
    EXPECT_EQ(decoded(op, Body(first).section(8, kMaxSparseDim, 0).bytes()).size(), 2u);
  }
}

// The example of docs/wire_protocol.md.
TEST(SparseWireCorruptionTest, CountsThatDoNotFit) {
  const Body two = Body().head(3).section(1, 2, 1).u64(10).f32(1).f32(2).section(4, 2, 0);
  EXPECT_EQ(decode_error(Op::kSparsePush, Body(two).section(7, 2, 12).zeros(40).bytes()),
            "SPARSE_PUSH section 2 (table 7): 12 ids need 96 bytes, 40 left");
  EXPECT_EQ(decode_error(Op::kSparsePush, Body(two).section(7, 2, 12).zeros(96 + 92).bytes()),
            "SPARSE_PUSH section 2 (table 7): 12 gradients of 2 floats need 96 bytes, 92 left");
  EXPECT_EQ(decode_error(Op::kSparsePull, Body().head(1).section(7, 0, 2).u64(1).bytes()),
            "SPARSE_PULL section 0 (table 7): 2 ids need 16 bytes, 8 left");
  EXPECT_EQ(decode_error(Op::kSparseRows, Body().head(1).section(7, 3, 2).zeros(20).bytes()),
            "SPARSE_ROWS section 0 (table 7): 2 rows of 3 floats need 24 bytes, 20 left");
}

// Counts whose byte sizes overflow 64 bits, or would need terabytes: refused by their size.
std::vector<std::pair<Op, std::string>> huge_counts() {
  return {
      {Op::kSparsePull, Body().head(1).section(7, 0, uint64_t{1} << 62).bytes()},
      {Op::kSparsePull, Body().head(1).section(7, 0, UINT64_MAX).zeros(8).bytes()},
      {Op::kSparsePull, Body().head(1).section(7, 0, uint64_t{1} << 40).zeros(64).bytes()},
      {Op::kSparseRows, Body().head(1).section(7, kMaxSparseDim, uint64_t{1} << 62).bytes()},
      {Op::kSparseRows, Body().head(1).section(7, 1, UINT64_MAX / 4 + 1).zeros(4).bytes()},
      {Op::kSparsePush, Body().head(1).section(7, kMaxSparseDim, uint64_t{1} << 62).bytes()},
      {Op::kSparsePush, Body().head(1).section(7, kMaxSparseDim, 3).zeros(24).bytes()},
  };
}

const std::vector<std::string>& huge_count_errors() {
  static const std::vector<std::string> errors = {
      "SPARSE_PULL section 0 (table 7): 4611686018427387904 ids need more than 2^64 bytes, 0 left",
      "SPARSE_PULL section 0 (table 7): 18446744073709551615 ids need more than 2^64 bytes, 8 left",
      "SPARSE_PULL section 0 (table 7): 1099511627776 ids need 8796093022208 bytes, 64 left",
      "SPARSE_ROWS section 0 (table 7): 4611686018427387904 rows of 4096 floats need more than 2^64 bytes, 0 "
      "left",
      "SPARSE_ROWS section 0 (table 7): 4611686018427387904 rows of 1 floats need more than 2^64 bytes, 4 "
      "left",
      "SPARSE_PUSH section 0 (table 7): 4611686018427387904 ids need more than 2^64 bytes, 0 left",
      "SPARSE_PUSH section 0 (table 7): 3 gradients of 4096 floats need 49152 bytes, 0 left",
  };
  return errors;
}

TEST(SparseWireCorruptionTest, OverflowingCountsFail) {
  const auto inputs = huge_counts();
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_EQ(decode_error(inputs[i].first, inputs[i].second), huge_count_errors()[i]);
}

size_t virtual_memory_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  statm >> pages;
  return pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Exits 0 if every huge count fails with its error while the address space may grow by 256 MiB
// at most; a decoder that sized a vector by the declared count would not.
[[noreturn]] void decode_huge_counts_with_capped_memory() {
  const rlimit cap{virtual_memory_bytes() + (size_t{256} << 20), RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &cap) != 0) _exit(2);
  const auto inputs = huge_counts();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (decode_error(inputs[i].first, inputs[i].second) != huge_count_errors()[i]) _exit(1);
  }
  _exit(0);
}

TEST(SparseWireCorruptionTest, OverflowingCountsFailWithoutAllocating) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an address-space limit does not work under AddressSanitizer";
#endif
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the test binary may hold ZeroMQ threads
  EXPECT_EXIT(decode_huge_counts_with_capped_memory(), ::testing::ExitedWithCode(0), "");
  GTEST_FLAG_SET(death_test_style, style);
}

TEST(SparseWireCorruptionTest, TableTwiceInOneBody) {
  EXPECT_EQ(decode_error(Op::kSparsePull,
                         Body().head(3).section(7, 0, 0).section(8, 0, 0).section(7, 0, 1).u64(1).bytes()),
            "SPARSE_PULL section 2 (table 7): table 7 is also section 0");
  // One table in several messages, or several tables in one, is fine.
  EXPECT_EQ(decoded(Op::kSparsePull, Body().head(2).section(7, 0, 0).section(8, 0, 0).bytes()).size(), 2u);
}

TEST(SparseWireCorruptionTest, TrailingBytes) {
  for (Op op : kSparseOps) {
    const std::string bytes = encode_sparse_body(op, several(op));
    EXPECT_EQ(decode_error(op, bytes + std::string(4, '\0')),
              std::string(op_name(op)) + " body has 4 bytes after its 3 sections");
    EXPECT_EQ(decode_error(op, bytes + encode_sparse_body(op, {})),
              std::string(op_name(op)) + " body has 8 bytes after its 3 sections");
  }
  EXPECT_EQ(decode_error(Op::kSparsePull, Body().head(0).u32(0).bytes()),
            "SPARSE_PULL body has 4 bytes after its 0 sections");
}

TEST(SparseWireCorruptionTest, NotASparseOp) {
  const std::string bytes = encode_sparse_body(Op::kSparsePush, several(Op::kSparsePush));
  EXPECT_EQ(decode_error(Op::kPush, bytes), "PUSH (op 4) is not a sparse op");
  EXPECT_EQ(decode_error(static_cast<Op>(99), bytes), "? (op 99) is not a sparse op");
}

// Arbitrary bytes after a plausible head, and valid bodies with a few bytes overwritten.
TEST(SparseWireCorruptionTest, RandomInputNeverCrashes) {
  std::mt19937_64 rng(20261126);
  for (Op op : kSparseOps) {
    const std::string valid = encode_sparse_body(op, several(op));
    for (int i = 0; i < 5000; ++i) {
      std::string input;
      if (i % 2 == 0) {
        input = Body().head(static_cast<uint32_t>(rng() % 4)).bytes();
        for (size_t k = 0, n = rng() % 64; k < n; ++k)
          input.push_back(static_cast<char>(rng() % 3 == 0 ? rng() : 0));
      } else {
        input = valid;
        for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k)
          input[rng() % input.size()] = static_cast<char>(rng());
      }
      std::vector<SparseSection> out;
      std::string error;
      if (decode_sparse_body(op, input.data(), input.size(), &out, &error)) {
        EXPECT_EQ(encode_sparse_body(op, out), input);
      } else {
        EXPECT_FALSE(error.empty());
      }
    }
  }
}

// A section of `op` for table 3 with n entries of dim `dim` (0 in a pull): IDs 1000 + i.
SparseSection long_section(Op op, size_t n, uint32_t dim) {
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(1000 + i);
  if (op == Op::kSparsePull) return pull_section(3, ids);
  if (op == Op::kSparseRows) return rows_section(3, dim, n, 0.5f);
  return push_section(3, dim, ids, 0.5f);
}

// A message in parts (the header's `part` of `parts`): every part is a body of its own, at most
// max_bytes where a section's head and one entry fit in that, and the parts appended in order are
// the sections again; a body that fits is one part, the whole body's bytes.
TEST(SparseWirePartsTest, PartsAppendedInOrderAreTheWhole) {
  for (Op op : kSparseOps) {
    std::vector<SparseSection> with_long = several(op);
    with_long.insert(with_long.begin() + 1, long_section(op, 300, 4));
    for (const auto& sections : {std::vector<SparseSection>{}, several(op), with_long}) {
      const size_t whole_bytes = encode_sparse_body(op, sections).size();
      for (size_t max : {size_t{0}, size_t{24}, size_t{40}, size_t{100}, size_t{1000}, whole_bytes - 1, whole_bytes}) {
        const std::vector<std::string> parts = encode_sparse_parts(op, sections, max);
        ASSERT_FALSE(parts.empty());
        std::vector<SparseSection> whole;
        for (const std::string& bytes : parts) {
          std::vector<SparseSection> part = decoded(op, bytes);
          if (bytes.size() > max) {  // only a section's head and at most one entry (or an empty body)
            ASSERT_LE(part.size(), 1u) << op_name(op) << ", max " << max;
            if (!part.empty()) {
              EXPECT_LE(part[0].count(), 1u) << op_name(op) << ", max " << max;
            }
          }
          std::string error;
          EXPECT_TRUE(append_sparse_part(&whole, std::move(part), &error)) << error;
        }
        EXPECT_TRUE(same(sections, whole)) << op_name(op) << ", max " << max << ", " << parts.size() << " parts";
        if (max >= whole_bytes) {
          ASSERT_EQ(parts.size(), 1u);
          EXPECT_EQ(parts[0], encode_sparse_body(op, sections));
        }
        if (sections.size() == with_long.size() && max == 100) {
          EXPECT_GT(parts.size(), 10u) << op_name(op);
        }
      }
    }
  }
}

// A pull may be sized by its answer: with rows of 16 floats, a part of 1000 bytes asks for at most
// 15 IDs (8 + 16 + 15 * 64 bytes of rows), and each part's SPARSE_ROWS fits in 1000 bytes too.
TEST(SparseWirePartsTest, APullIsSizedByItsAnswer) {
  const std::vector<SparseSection> pull = {long_section(Op::kSparsePull, 100, 0), pull_section(9, {5, 6})};
  const std::vector<std::string> parts = encode_sparse_parts(Op::kSparsePull, pull, 1000, {16, 16});
  EXPECT_EQ(parts.size(), 7u);  // 15 IDs a part; the last holds table 3's 10 and table 9's 2
  size_t ids = 0;
  for (const std::string& bytes : parts) {
    std::vector<SparseSection> rows;
    for (const SparseSection& s : decoded(Op::kSparsePull, bytes)) {
      rows.push_back(rows_section(s.table, 16, s.ids.size(), 0));
      ids += s.ids.size();
    }
    EXPECT_LE(encode_sparse_body(Op::kSparseRows, rows).size(), 1000u);
  }
  EXPECT_EQ(ids, 102u);
  EXPECT_EQ(encode_sparse_parts(Op::kSparsePull, pull, 1000).size(), 1u);  // its IDs alone fit
}

TEST(SparseWirePartsTest, AppendRefusesAnotherDim) {
  std::vector<SparseSection> whole = {rows_section(3, 4, 2, 0)};
  std::string error;
  EXPECT_FALSE(append_sparse_part(&whole, {rows_section(5, 1, 1, 0), rows_section(3, 2, 1, 0)}, &error));
  EXPECT_EQ(error, "table 3 has rows of 4 floats in one part and 2 in another");
  ASSERT_EQ(whole.size(), 1u);  // nothing appended
  EXPECT_EQ(whole[0].count(), 2u);
  EXPECT_TRUE(append_sparse_part(&whole, {rows_section(5, 1, 1, 0), rows_section(3, 4, 1, 0)}, &error));
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0].count(), 3u);
  EXPECT_EQ(whole[1].table, 5u);
}

TEST(SparseWireEncodeTest, InconsistentSectionsThrow) {
  const std::string head = "encode_sparse_body: ";
  EXPECT_EQ(encode_error(Op::kPull, {}), head + "PULL is not a sparse op");
  SparseSection pull = pull_section(7, {1});
  pull.dim = 2;
  EXPECT_EQ(encode_error(Op::kSparsePull, {pull}), head + "SPARSE_PULL section 0 (table 7): dim is 2, not 0");
  pull.dim = 0;
  pull.values = {1};
  EXPECT_EQ(encode_error(Op::kSparsePull, {pull_section(1, {}), pull}),
            head + "SPARSE_PULL section 1 (table 7): a pull carries no values");
  EXPECT_EQ(encode_error(Op::kSparseRows, {rows_section(7, 0, 0, 0)}),
            head + "SPARSE_ROWS section 0 (table 7): dim is 0, not 1..4096");
  EXPECT_EQ(encode_error(Op::kSparsePush, {push_section(7, kMaxSparseDim + 1, {}, 0)}),
            head + "SPARSE_PUSH section 0 (table 7): dim is 4097, not 1..4096");
  SparseSection rows = rows_section(7, 3, 2, 0);
  rows.ids = {1, 2};
  EXPECT_EQ(encode_error(Op::kSparseRows, {rows}),
            head + "SPARSE_ROWS section 0 (table 7): rows carry no ids");
  rows.ids.clear();
  rows.values.pop_back();
  EXPECT_EQ(encode_error(Op::kSparseRows, {rows}),
            head + "SPARSE_ROWS section 0 (table 7): 5 values are not whole rows of 3 floats");
  SparseSection push = push_section(7, 3, {1, 2}, 0);
  push.values.resize(9);
  EXPECT_EQ(encode_error(Op::kSparsePush, {push}),
            head + "SPARSE_PUSH section 0 (table 7): 3 gradient rows for 2 ids");
  push.values.resize(7);
  EXPECT_EQ(encode_error(Op::kSparsePush, {push}),
            head + "SPARSE_PUSH section 0 (table 7): 7 values are not whole rows of 3 floats");
  EXPECT_EQ(encode_error(Op::kSparsePush,
                         {push_section(4, 1, {}, 0), push_section(7, 1, {}, 0), push_section(4, 1, {}, 0)}),
            head + "SPARSE_PUSH section 2 (table 4): table 4 is also section 0");
  std::vector<SparseSection> too_many;
  for (uint32_t t = 0; t <= kMaxSparseSections; ++t) too_many.push_back(pull_section(t, {}));
  EXPECT_EQ(encode_error(Op::kSparsePull, too_many), head + "SPARSE_PULL of 4097 sections, at most 4096");
  too_many.pop_back();
  EXPECT_EQ(encode_sparse_body(Op::kSparsePull, too_many).size(), 8 + 16 * size_t{kMaxSparseSections});
}

}  // namespace
}  // namespace pstrain
