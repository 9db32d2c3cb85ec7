// libFuzzer target: the checkpoint decoders (shared/checkpoint/) on arbitrary bytes: a shard file
// (input starting with 'S'), a saved embedding table ('T', shared/checkpoint/table_file.h) or a
// manifest (anything else). A file that decodes re-encodes to the same bytes; a table is read
// alike whatever parts of it are kept.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shared/checkpoint/checkpoint.h"
#include "shared/checkpoint/table_file.h"

namespace {

void table(const std::string& bytes) {
  using pstrain::SavedTableParts;
  pstrain::SavedTable all, weights, header;
  std::string error, weights_error, header_error;
  const bool ok = pstrain::read_saved_table(bytes, &all, &error);
  if (pstrain::read_saved_table(bytes, &weights, &weights_error, SavedTableParts::kWeights) != ok ||
      pstrain::read_saved_table(bytes, &header, &header_error, SavedTableParts::kHeader) != ok ||
      weights_error != error || header_error != error) {
    std::abort();
  }
  if (!ok) {
    if (error.empty() || !all.rows.empty() || !all.values.empty() || !all.sightings.empty()) std::abort();
    return;
  }
  if (pstrain::encode_saved_table(all) != bytes) std::abort();
  const size_t dim = static_cast<size_t>(all.header.dim), row_floats = dim * (1 + all.header.slots);
  if (weights.rows.size() != all.rows.size() || weights.values.size() != all.rows.size() * dim ||
      !weights.sightings.empty() || !header.rows.empty() || !header.values.empty()) {
    std::abort();
  }
  for (size_t i = 0; i < all.rows.size(); ++i) {
    if (weights.rows[i].id != all.rows[i].id ||
        std::memcmp(&weights.values[i * dim], &all.values[i * row_floats], dim * sizeof(float)) != 0) {
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string error;
  if (data[0] == 'S') {
    pstrain::ShardCheckpoint c;
    if (!pstrain::decode_shard_checkpoint(bytes, &c, &error)) {
      if (error.empty()) std::abort();
      return 0;
    }
    if (pstrain::encode_shard_checkpoint(c) != bytes) std::abort();
  } else if (data[0] == 'T') {
    table(bytes);
  } else {
    pstrain::CheckpointManifest m;
    if (!pstrain::decode_manifest(bytes, &m, &error)) {
      if (error.empty()) std::abort();
      return 0;
    }
    pstrain::CheckpointManifest again;
    if (!pstrain::decode_manifest(pstrain::encode_manifest(m), &again, &error)) std::abort();
  }
  return 0;
}
