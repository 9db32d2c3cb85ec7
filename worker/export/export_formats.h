// pstrain-export's standard formats (docs/models.md, "Standard exports"): a model's variables
// and its embedding tables as plain arrays, each table as its IDs (int64, increasing) and its
// rows (float32, [rows, dim]), in one .npz (--format npz-arrays) or one safetensors file
// (--format safetensors), with model.json (the layers, the feature transform, the keys, what an
// ID without a row reads as) beside them. tools/ctr_score.py scores data from either, as
// --predict does. Kept apart from export.cc (which reads checkpoints) so the two change alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shared/train/layout.h"
#include "worker/model/model_file.h"

namespace pstrain {

// pstrain-export's --format: --save-params' files (npy), them in one .npz (npz), or the standard
// array exports written here (npz-arrays, safetensors).
enum class ExportFormat { kNpy, kNpz, kNpzArrays, kSafetensors };
const char* export_format_name(ExportFormat format);             // "npy" | "npz" | "npz-arrays" | "safetensors"
bool export_format_of(const std::string& name, ExportFormat* format);  // false for any other word
bool is_array_format(ExportFormat format);                        // npz-arrays | safetensors

// One array of an export: its bytes are borrowed (little-endian, C order).
struct ExportArray {
  std::string name;
  enum class Type { kFloat32, kInt64 } type = Type::kFloat32;
  std::vector<size_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;  // product of shape x the type's size
};

// A .npz (a zip, stored) of each array as <name>.npy and each of `files` (name, bytes) as is,
// streamed to PATH.tmp and renamed (a failed write leaves nothing). Throws pstrain::Error naming
// the file (an array or the archive past 4 GiB, which a zip without ZIP64 cannot hold, names
// --format safetensors).
void write_npz_arrays(const std::string& path, const std::vector<ExportArray>& arrays,
                      const std::vector<std::pair<std::string, std::string>>& files);

// A safetensors file: an 8-byte little-endian header length, the JSON header (each array's
// dtype F32 or I64, shape and data_offsets; "__metadata__" the string pairs given), padded with
// spaces to a multiple of 8, then the arrays' bytes in the given order. Written as
// write_npz_arrays writes. Throws pstrain::Error naming the file.
void write_safetensors(const std::string& path, const std::vector<ExportArray>& arrays,
                       const std::map<std::string, std::string>& metadata);

// One embedding table as arrays: every shard's rows, IDs increasing.
struct TableArrays {
  std::string name;  // model.json's table_names[table]
  uint32_t table = 0;
  uint64_t dim = 0;
  std::vector<int64_t> ids;  // the uint64 keys' bits
  std::vector<float> rows;   // ids.size() x dim
};

// The tables of `e` from saved table files (name, bytes: each a table of one shard in the
// format of docs/sparse.md, "Checkpoint format"), checked (the file's own checks; a table
// model.json does not name, another dim, an ID in two files). `where` names the source in errors.
std::vector<TableArrays> table_arrays(const EmbeddingSetup& e,
                                      const std::vector<std::pair<std::string, std::string>>& files,
                                      const std::string& where);

// The model.json of an array export: model_json_text(d) with an "export" object (the arrays'
// names, the tables' sizes, the feature transform as a --schema JSON object, the ID keying and
// what an ID without a row reads as).
std::string export_model_json(const ModelDescription& d, ExportFormat format,
                              const std::vector<TableArrays>& tables);

// Writes the export of `format` (is_array_format) to the file `out`: the variables (layout,
// values), the state (batchnorm's running statistics), the tables and model.json.
void write_array_export(const std::string& out, ExportFormat format, const ModelDescription& model,
                        const Layout& layout, const float* values, const Layout& state_layout,
                        const float* state,
                        const std::vector<std::pair<std::string, std::string>>& table_files,
                        const std::string& where);

// True for a --save-params directory: a model.json and no MANIFEST or v<step> directories.
bool is_saved_params_dir(const std::string& dir);
// Exports a --save-params directory (its variables, state, model.json and embeddings/) in
// `format` (is_array_format) to `out`. Throws pstrain::Error naming the file that is missing or
// damaged.
void export_saved_params(const std::string& dir, const std::string& out, ExportFormat format);

}  // namespace pstrain
