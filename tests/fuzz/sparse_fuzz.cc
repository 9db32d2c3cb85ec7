// libFuzzer target: the sparse messages' body decoder (shared/wire/sparse_wire.h) on arbitrary
// bytes; the first byte picks SPARSE_PULL, SPARSE_ROWS or SPARSE_PUSH (its value mod 3) and the
// size of the parts below (its value / 3), the rest is the body. Invariants beyond "no crash": a
// refusal says why, a body that decodes re-encodes to exactly its own bytes, and its sections cut
// into parts (encode_sparse_parts) decode part by part and append (append_sparse_part) to
// exactly its own bytes again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "shared/wire/sparse_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  constexpr pstrain::Op kOps[] = {pstrain::Op::kSparsePull, pstrain::Op::kSparseRows,
                                  pstrain::Op::kSparsePush};
  const pstrain::Op op = kOps[data[0] % 3];
  std::vector<pstrain::SparseSection> sections;
  std::string error;
  if (!pstrain::decode_sparse_body(op, data + 1, size - 1, &sections, &error)) {
    if (error.empty()) std::abort();
    return 0;
  }
  const std::string again = pstrain::encode_sparse_body(op, sections);
  if (again.size() != size - 1 || std::memcmp(again.data(), data + 1, size - 1) != 0) std::abort();
  const size_t part_bytes = 8 + size_t{data[0] / 3u} * 8;  // 8 .. 688: many parts of small bodies
  std::vector<pstrain::SparseSection> whole;
  for (const std::string& part : pstrain::encode_sparse_parts(op, sections, part_bytes)) {
    std::vector<pstrain::SparseSection> decoded;
    if (!pstrain::decode_sparse_body(op, part.data(), part.size(), &decoded, &error)) std::abort();
    if (!pstrain::append_sparse_part(&whole, std::move(decoded), &error)) std::abort();
  }
  if (pstrain::encode_sparse_body(op, whole) != again) std::abort();
  return 0;
}
