// The bodies of the sparse messages (docs/wire_protocol.md, "Sparse tables"): SPARSE_PULL asks a
// shard for embedding rows by ID, SPARSE_ROWS answers it, SPARSE_PUSH carries one worker's summed
// gradient per unique ID for a step. A body is frame 1 of the message; the header's `length` is
// its size in 4-byte words (check_frames checks it like a float payload's).
//
// Body, little-endian:
//   u32 sections, u32 0 (reserved)
//   sections x { u32 table, u32 dim, u64 count,
//                SPARSE_PULL: count x u64 id                       (dim 0)
//                SPARSE_ROWS: count x dim x f32 row                (the pull's IDs, in its order)
//                SPARSE_PUSH: count x u64 id, count x dim x f32 gradient }
// A message may travel in parts (docs/wire_protocol.md, "Sparse tables": the header's `part` of
// `parts`): encode_sparse_parts cuts the sections between sections and inside a section's IDs,
// every part a body of its own, and append_sparse_part puts them together again.
// decode_sparse_body checks the structure only: the sizes add up exactly, limits, each table at
// most once in a body, dim 0 in a pull and 1..kMaxSparseDim otherwise. What the IDs and values
// mean (unknown tables, repeated IDs, NaN) is the receiver's to check (ps/sparse/shard_tables.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/wire/protocol.h"

namespace pstrain {

constexpr uint32_t kMaxSparseSections = 4096;
constexpr uint32_t kMaxSparseDim = 4096;
constexpr uint64_t kMaxSparseBodyBytes = uint64_t{1} << 30;
// Parts of one message at most: a whole body's bytes in parts of 1 KiB (the least --chunk-kib).
constexpr uint64_t kMaxSparseParts = uint64_t{1} << 20;

struct SparseSection {
  uint32_t table = 0;
  uint32_t dim = 0;            // SPARSE_PULL: 0
  std::vector<uint64_t> ids;   // SPARSE_PULL, SPARSE_PUSH; SPARSE_ROWS: empty (count = values / dim)
  std::vector<float> values;   // SPARSE_ROWS: rows, SPARSE_PUSH: gradients (ids.size() * dim); SPARSE_PULL: empty

  size_t count() const { return dim == 0 || !ids.empty() ? ids.size() : values.size() / dim; }
};

// Whether `op` is one of SPARSE_PULL, SPARSE_ROWS, SPARSE_PUSH.
bool is_sparse_op(Op op);

// The body of `op` for these sections. Throws pstrain::Error for sections that do not fit op's
// layout (a programming error: the values' size is not count * dim, a pull with values, ...).
std::string encode_sparse_body(Op op, const std::vector<SparseSection>& sections);

// The body of `op` for these sections in parts of at most `max_bytes` each (at least one ID or
// row per part, so a part of one section's head and one entry may pass it), in order: their
// sections appended with append_sparse_part, in order, are `sections`. No sections: one empty
// part. A pull may be sized by its answer: answer_dims[i] (if given) is the dim of section i's
// rows in the SPARSE_ROWS, and a part is cut where the pull or its answer would pass max_bytes.
// Throws pstrain::Error where encode_sparse_body would.
std::vector<std::string> encode_sparse_parts(Op op, const std::vector<SparseSection>& sections, size_t max_bytes,
                                             const std::vector<uint32_t>& answer_dims = {});

// Appends a part's sections to `whole`: a section whose table `whole` has already (the part
// goes on with it) gets the part's IDs and values after its own, any other is added at the end.
// False, with *error naming the table, for a section whose dim is not that of the table's
// section in `whole` (nothing is appended then).
bool append_sparse_part(std::vector<SparseSection>* whole, std::vector<SparseSection>&& part, std::string* error);

// Decodes and checks a body of `op` (frame 1). False, with *error naming what is wrong, for a
// malformed one; *out is then unspecified.
bool decode_sparse_body(Op op, const void* data, size_t size, std::vector<SparseSection>* out,
                        std::string* error);

}  // namespace pstrain
