// libFuzzer target: the sparse messages' body decoder (shared/wire/sparse_wire.h) on arbitrary
// bytes; the first byte picks SPARSE_PULL, SPARSE_ROWS or SPARSE_PUSH (its value mod 3), the rest
// is the body. Invariants beyond "no crash": a refusal says why, and a body that decodes
// re-encodes to exactly its own bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
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
  return 0;
}
