// pstrain-export: a checkpoint (docs/checkpoints.md) as the files --save-params writes (every
// variable as OUT/<name>.npy, OUT/model.json, and a CTR job's tables as
// OUT/embeddings/<table>.shard<s>-of-<S>), or as one .npz archive of them; or as arrays in a .npz
// or a safetensors file (export_formats.h), from a checkpoint or a --save-params directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/checkpoint/checkpoint.h"
#include "shared/train/layout.h"
#include "worker/export/export_formats.h"

namespace pstrain {

struct ExportOptions {
  std::string checkpoint;        // a --checkpoint-dir (its newest complete checkpoint) or one v<step> directory
  std::string out;               // npy: a directory; npz: a file
  ExportFormat format = ExportFormat::kNpy;  // export_formats.h
  // For checkpoints written before pstrain recorded the model (no model.json in them): the
  // model (--model, or --hidden when hidden_given) and one sample's shape.
  std::string model;
  std::vector<int> hidden;
  bool hidden_given = false;
  std::vector<size_t> input_shape;
};

// One checkpoint's parameters, reassembled from its shards.
struct CheckpointParams {
  std::string dir;  // the version directory
  CheckpointManifest manifest;
  Layout layout;    // from the manifest
  std::vector<float> values;
  std::string optimizer;
  // The embedding tables of a CTR job's checkpoint: per shard, where each table's saved bytes
  // lie in its shard file (docs/sparse.md, "Checkpoint format"; empty for a job without tables),
  // copied from there in pieces: a checkpoint of gigabytes of tables is exported in bounded memory.
  std::vector<std::vector<TableInFile>> tables;
};

// Reads version directory `dir`: its MANIFEST, every shard file (size and CRC-32 as the manifest
// records, decoded and checked), and the flat vector they cover together. "" or what is wrong.
std::string read_checkpoint_params(const std::string& dir, CheckpointParams* out);

// Exports o.checkpoint to o.out; returns the version directory it read. Throws pstrain::Error
// naming the directory and what is wrong (no complete checkpoint, a damaged one, no model), or
// pstrain::UsageError for a model that is not the checkpoint's.
std::string export_checkpoint(const ExportOptions& o);

// A .npz archive (a zip, stored without compression) of `members` (name, bytes), written
// atomically. Throws pstrain::Error.
void write_npz(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members);
// The same with members whose bytes are a range of a file (a table in a shard file), copied in
// pieces after a first pass that computes their CRC-32.
struct NpzMember {
  std::string name;
  std::string bytes;       // the member's bytes, or
  const TableInFile* file = nullptr;  // where they lie
};
void write_npz(const std::string& path, const std::vector<NpzMember>& members);

}  // namespace pstrain
