// Reading one embedding table's saved bytes (docs/sparse.md, "Checkpoint format": what a PS shard
// writes to DIR/embeddings/<table>.shard<s>-of-<S> and into its checkpoint file) without the PS's
// table: its header, and each row's ID and weights. For the worker (--evaluate and --predict of a
// CTR model read the saved rows) and pstrain-export (which names a checkpoint's tables by their
// header). A pure function of bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain {

struct SavedTableHeader {
  uint32_t format = 0;
  uint32_t table = 0;       // the table's id
  uint64_t dim = 0;         // weights per row
  uint32_t slots = 0;       // the optimizer's slots per row, each dim floats
  std::string name;         // "ids", "C1", ...
  std::string optimizer;    // sgd | adagrad | adam | ftrl
  uint64_t rows = 0, sightings = 0;
};

struct SavedTableRows {
  SavedTableHeader header;
  std::vector<uint64_t> ids;   // increasing
  std::vector<float> weights;  // ids.size() x dim: each row's weights (its slots are not kept)
};

// Decodes a table's bytes, checking the CRC-32C, the magic and format, that the sizes add up
// exactly, strictly increasing IDs and finite weights. False, with *error saying what is wrong
// ("checksum mismatch (corrupted)", ...), otherwise. With header_only, out->ids and weights stay
// empty (everything is checked all the same).
bool read_saved_table(const std::string& bytes, SavedTableRows* out, std::string* error, bool header_only = false);

}  // namespace pstrain
