// libFuzzer target: the checkpoint decoders (shared/checkpoint/checkpoint.h) on arbitrary bytes: a shard
// file (input starting with 'S') or a manifest (anything else). A file that decodes re-encodes
// to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "shared/checkpoint/checkpoint.h"

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
