#include "worker/export/export.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <zlib.h>

#include "shared/checkpoint/table_file.h"
#include "shared/util/byte_reader.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "shared/util/log.h"
#include "worker/data/npy_format.h"
#include "worker/export/export_formats.h"
#include "worker/model/model.h"
#include "worker/model/model_file.h"
#include "worker/model/param_files.h"

namespace pstrain {
namespace {

// "layer0.weight 0 784x256" lines, with offsets that follow one another.
bool parse_layout(const std::string& text, Layout* out, std::string* error) {
  std::istringstream in(text);
  std::string line;
  std::set<std::string> names;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, dims;
    size_t offset = 0;
    if (!(fields >> name >> offset >> dims)) return (*error = "bad variable line '" + line + "'", false);
    std::vector<size_t> shape;
    std::istringstream parts(dims);
    std::string part;
    while (std::getline(parts, part, 'x')) {
      if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || part.size() > 12) {
        return (*error = "bad shape in variable line '" + line + "'", false);
      }
      shape.push_back(std::stoull(part));
    }
    if (!names.insert(name).second) return (*error = "variable " + name + " appears twice", false);
    if (offset != out->total()) return (*error = "variable " + name + " is not where the one before it ends", false);
    out->add(name, shape);
  }
  return true;
}

bool is_version_dir(const std::string& path) {
  const std::string name = std::filesystem::path(path).lexically_normal().filename().string();
  const std::string base = name.empty() ? std::filesystem::path(path).lexically_normal().parent_path().filename().string() : name;
  return base.size() == 11 && base[0] == 'v' && base.find_first_not_of("0123456789", 1) == std::string::npos;
}

// The version directory to export: `dir` itself when it is one, else the newest complete one
// that reads back whole (the ones passed over are logged).
CheckpointParams choose_checkpoint(const std::string& dir) {
  CheckpointParams params;
  if (is_version_dir(dir)) {
    const std::string error = read_checkpoint_params(dir, &params);
    if (!error.empty()) throw Error("checkpoint " + dir + ": " + error);
    return params;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw Error("'" + dir + "' is not a directory (a --checkpoint-dir, or one of its v<step> directories)");
  std::string reasons;
  for (uint64_t v : checkpoint_versions(dir)) {
    const std::string version_dir = checkpoint_version_dir(dir, v);
    if (!std::filesystem::exists(version_dir + "/MANIFEST", ec)) {
      reasons += "; " + std::filesystem::path(version_dir).filename().string() + ": incomplete (no MANIFEST)";
      continue;
    }
    params = CheckpointParams();
    const std::string error = read_checkpoint_params(version_dir, &params);
    if (error.empty()) return params;
    PSLOG(WARN) << "pstrain-export: skipping checkpoint " << version_dir << ": " << error;
    reasons += "; " + std::filesystem::path(version_dir).filename().string() + ": " + error;
  }
  throw Error("no complete checkpoint in '" + dir + "'" +
              (reasons.empty() ? std::string(" (no v<step> directories: is it a --checkpoint-dir?)") : reasons));
}

// The model of a checkpoint: its model.json, or for an older one the options' model.
ModelDescription model_of(const CheckpointParams& c, const ExportOptions& o) {
  std::optional<ModelDescription> saved = read_model_json(c.dir);
  const bool model_given = !o.model.empty() || o.hidden_given;
  std::string where = c.dir + "/model.json";
  if (!saved) {
    if (!model_given || o.input_shape.empty()) {
      throw UsageError("checkpoint " + c.dir + " has no model.json (written before pstrain recorded the model in "
                       "checkpoints): give the model it was trained with (--model or --hidden) and --input-shape");
    }
    ModelDescription d;
    const TensorSpec& last = c.layout.tensors().back();
    if (last.shape.size() != 1) throw Error("checkpoint " + c.dir + ": its last variable " + last.name + " is not a bias");
    d.classes = static_cast<int>(last.shape[0]);
    d.spec = Network::spec_of(o.model, o.hidden, d.classes);
    d.given_as = o.model.empty() ? "--hidden" : "--model";
    d.input_shape = o.input_shape;
    d.training.optimizer = c.optimizer;
    saved = d;
    where = "the checkpoint's MANIFEST";
  } else if (model_given) {
    throw UsageError("checkpoint " + c.dir + " records its model (model.json): --model/--hidden are for older checkpoints only");
  }
  Layout ours;
  try {
    ours = layout_of(*saved);
  } catch (const Error& e) {
    throw UsageError("the model does not fit the checkpoint " + c.dir + ": " + e.what());
  }
  const std::string difference = layout_difference(c.layout, ours, where);
  if (!difference.empty()) throw UsageError("checkpoint " + c.dir + ": " + difference);
  saved->training.steps = c.manifest.version;
  saved->training.source = "pstrain-export of checkpoint " + c.dir;
  if (saved->training.optimizer.empty()) saved->training.optimizer = c.optimizer;
  return *saved;
}

void put16(std::string& s, uint32_t v) { s += static_cast<char>(v & 0xff), s += static_cast<char>((v >> 8) & 0xff); }
void put32(std::string& s, uint32_t v) { put16(s, v & 0xffff), put16(s, v >> 16); }

}  // namespace

std::string read_checkpoint_params(const std::string& dir, CheckpointParams* out) {
  out->dir = dir;
  std::string text, error;
  if (!read_whole_file(dir + "/MANIFEST", &text, &error)) return "MANIFEST: " + error;
  if (!decode_manifest(text, &out->manifest, &error)) return error;
  const CheckpointManifest& m = out->manifest;
  if (!parse_layout(m.layout, &out->layout, &error)) return "manifest: " + error;
  if (out->layout.total() != m.total) {
    return "manifest: its variables hold " + std::to_string(out->layout.total()) + " values, its total is " + std::to_string(m.total);
  }
  uint64_t shard_bytes = 0;
  for (const CheckpointManifest::File& f : m.shards) shard_bytes += f.bytes;
  if (m.total > shard_bytes / sizeof(float)) {
    return "manifest: " + std::to_string(m.total) + " values cannot fit in shard files of " + std::to_string(shard_bytes) + " bytes";
  }
  out->values.assign(m.total, 0.0f);
  uint64_t covered = 0;
  for (size_t s = 0; s < m.shards.size(); ++s) {
    const CheckpointManifest::File& f = m.shards[s];
    // Read in pieces; its tables are copied from where they lie when they are written.
    uint64_t bytes = 0;
    uint32_t crc = 0;
    if (!file_crc_of(dir + "/" + f.name, &bytes, &crc, &error)) return f.name + ": " + error;
    if (bytes != f.bytes) {
      return f.name + ": " + std::to_string(bytes) + " bytes, the manifest records " + std::to_string(f.bytes);
    }
    if (crc != f.crc) return f.name + ": checksum mismatch (corrupted)";
    ShardCheckpoint c;
    if (!read_shard_checkpoint_file(dir + "/" + f.name, bytes, crc, &c, &error)) return f.name + ": " + error;
    if (c.total != m.total || c.version != m.version || c.shard != s || c.num_shards != m.shards.size() ||
        c.offset != covered || c.values.size() > m.total - covered) {
      return f.name + ": not the manifest's shard " + std::to_string(s) + " of version " + std::to_string(m.version);
    }
    std::copy(c.values.begin(), c.values.end(), out->values.begin() + static_cast<long>(covered));
    covered += c.values.size();
    out->optimizer = c.optimizer;
    out->tables.push_back(std::move(c.table_files));
  }
  if (covered != m.total) return "the shards hold " + std::to_string(covered) + " of " + std::to_string(m.total) + " values";
  // Hybrid mode: the last file, the chief's dense vector, holds no tables; the others are the PS's.
  if (out->tables.size() > 1 && out->tables.back().empty() && !out->tables.front().empty()) out->tables.pop_back();
  return "";
}

void write_npz(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members) {
  std::vector<NpzMember> each;
  for (const auto& [name, bytes] : members) each.push_back(NpzMember{name, bytes, nullptr});
  write_npz(path, each);
}

namespace {

// A member's size and CRC-32: of its bytes, or of its file's range read in pieces.
void size_and_crc(const NpzMember& m, uint64_t* size, uint32_t* crc) {
  if (m.file == nullptr) {
    *size = m.bytes.size();
    *crc = crc32_of(m.bytes);
    return;
  }
  ByteReader in(m.file->path, m.file->offset, m.file->bytes);
  std::vector<char> piece(ByteReader::kBufferBytes);
  uLong c = crc32(0L, Z_NULL, 0);
  while (in.left() > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(in.left(), piece.size()));
    if (!in.read(piece.data(), n)) throw Error(in.error());
    c = crc32(c, reinterpret_cast<const Bytef*>(piece.data()), static_cast<uInt>(n));
  }
  *size = m.file->bytes;
  *crc = static_cast<uint32_t>(c);
}

// A member's bytes to `out`, a file's range in pieces.
void copy_member(const NpzMember& m, ByteSink* out) {
  if (m.file == nullptr) {
    out->append(m.bytes.data(), m.bytes.size());
    return;
  }
  ByteReader in(m.file->path, m.file->offset, m.file->bytes);
  std::vector<char> piece(ByteReader::kBufferBytes);
  while (in.left() > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(in.left(), piece.size()));
    if (!in.read(piece.data(), n)) throw Error(in.error());
    out->append(piece.data(), n);
  }
}

}  // namespace

void write_npz(const std::string& path, const std::vector<NpzMember>& members) {
  FileWriter zip(path, false);
  std::string directory;
  for (const NpzMember& m : members) {
    uint64_t size = 0;
    uint32_t crc = 0;
    size_and_crc(m, &size, &crc);
    if (size >= 0xffffffffu || zip.bytes() >= 0xffffffffu) {
      throw Error(path + ": " + m.name + " is too large for a .npz without ZIP64 (use --format npy)");
    }
    const uint32_t at = static_cast<uint32_t>(zip.bytes());
    std::string common;  // version needed, flags, method (stored), time, date (1980-01-01), CRC, sizes, name length
    put16(common, 20), put16(common, 0), put16(common, 0), put16(common, 0), put16(common, 0x21);
    put32(common, crc), put32(common, static_cast<uint32_t>(size)), put32(common, static_cast<uint32_t>(size));
    put16(common, static_cast<uint32_t>(m.name.size()));
    std::string local;
    put32(local, 0x04034b50);
    local += common;
    put16(local, 0);  // extra field length
    local += m.name;
    zip.append(local.data(), local.size());
    copy_member(m, &zip);
    put32(directory, 0x02014b50);
    put16(directory, 20);  // made by
    directory += common;
    put16(directory, 0), put16(directory, 0), put16(directory, 0), put16(directory, 0);  // extra, comment, disk, internal attributes
    put32(directory, 0), put32(directory, at);  // external attributes, local header offset
    directory += m.name;
  }
  if (zip.bytes() >= 0xffffffffu) throw Error(path + ": too large for a .npz without ZIP64 (use --format npy)");
  const uint32_t directory_at = static_cast<uint32_t>(zip.bytes());
  std::string end = directory;
  put32(end, 0x06054b50);
  put16(end, 0), put16(end, 0);
  put16(end, static_cast<uint32_t>(members.size())), put16(end, static_cast<uint32_t>(members.size()));
  put32(end, static_cast<uint32_t>(directory.size())), put32(end, directory_at);
  put16(end, 0);  // comment length
  zip.append(end.data(), end.size());
  zip.commit();
}

namespace {

// A CTR checkpoint's tables as --save-params writes them: (embeddings/<table>.shard<s>-of-<S>,
// where the bytes lie), each named by its own header (checked, CRC included, read in pieces).
std::vector<std::pair<std::string, const TableInFile*>> table_files(const CheckpointParams& c) {
  std::vector<std::pair<std::string, const TableInFile*>> files;
  const size_t shards = c.tables.size();
  for (size_t s = 0; s < shards; ++s) {
    for (const TableInFile& file : c.tables[s]) {
      SavedTableHeader header;
      SavedTableVisitor visit;
      visit.header = [&](const SavedTableHeader& h) { header = h; };
      ByteReader in(file.path, file.offset, file.bytes);
      std::string error;
      if (!read_saved_table(in, visit, &error)) {
        throw Error("checkpoint " + c.dir + ": " + c.manifest.shards[s].name + ": an embedding table: " + error);
      }
      files.emplace_back("embeddings/" + header.name + ".shard" + std::to_string(s) + "-of-" + std::to_string(shards),
                         &file);
    }
  }
  return files;
}

// Whether checkpoint `dir`'s model (its model.json) can be exported in `format`: a script's model
// only as arrays (UsageError); tables its model.json does not describe are exported, with a warning.
void check_model_fits(const std::string& dir, const ModelDescription& model, bool has_tables, ExportFormat format) {
  if (model.script && !is_array_format(format)) {
    throw UsageError("checkpoint " + dir + " is of a script's model (" + dir + "/model.json: a Python job's, " +
                     "no layer list): --format " + export_format_name(format) + " writes --save-params files for " +
                     "--init-params, --evaluate and --predict, which need one; --format safetensors or npz-arrays " +
                     "export its variables (by the script's names) and tables");
  }
  if (has_tables && model.embeddings.dim == 0) {
    PSLOG(WARN) << "pstrain-export: " << dir << "/model.json does not describe the checkpoint's embedding tables "
                << "(written before pstrain recorded them): they are exported, but --evaluate and --predict "
                << "cannot use them";
  }
}

}  // namespace

std::string export_checkpoint(const ExportOptions& o) {
  if (is_saved_params_dir(o.checkpoint)) {  // the arrays of a --save-params directory (export_formats.h)
    if (!is_array_format(o.format)) {
      throw UsageError("'" + o.checkpoint + "' is a --save-params directory, already in --format " + export_format_name(o.format) +
                       "'s files: --format npz-arrays or safetensors export it as arrays");
    }
    export_saved_params(o.checkpoint, o.out, o.format);
    return o.checkpoint;
  }
  const CheckpointParams c = choose_checkpoint(o.checkpoint);
  ModelDescription model = model_of(c, o);
  const std::vector<std::pair<std::string, const TableInFile*>> tables = table_files(c);
  check_model_fits(c.dir, model, !tables.empty(), o.format);
  model.embeddings.num_ps = static_cast<int>(c.tables.size());  // the files' shard count
  // The state (batchnorm's running statistics) is beside the shard files, as --save-params writes it.
  const Layout state_layout = state_layout_of(model);
  std::vector<float> state(state_layout.total());
  if (!state_layout.tensors().empty()) load_params(c.dir, state_layout, state.data());
  if (o.format == ExportFormat::kNpz) {
    std::vector<NpzMember> members;
    for (const TensorSpec& t : c.layout.tensors()) members.push_back({t.name + ".npy", npy_bytes(t.shape, c.values.data() + t.offset)});
    for (const TensorSpec& t : state_layout.tensors()) members.push_back({t.name + ".npy", npy_bytes(t.shape, state.data() + t.offset)});
    for (const auto& [name, file] : tables) members.push_back({name, "", file});
    members.push_back({"model.json", model_json_text(model)});
    write_npz(o.out, members);
  } else if (is_array_format(o.format)) {
    // The arrays are built in memory (export_formats.h), so the tables' bytes are read in whole.
    std::vector<std::pair<std::string, std::string>> table_bytes;
    for (const auto& [name, file] : tables) {
      std::string bytes;
      StringSink sink(&bytes);
      copy_member(NpzMember{name, "", file}, &sink);
      table_bytes.emplace_back(name, std::move(bytes));
    }
    write_array_export(o.out, o.format, model, c.layout, c.values.data(), state_layout, state.data(), table_bytes,
                       "checkpoint " + c.dir);
  } else {
    save_params(o.out, c.layout, c.values.data());
    if (!state_layout.tensors().empty()) save_params(o.out, state_layout, state.data());
    std::error_code ec;
    if (!tables.empty() && !std::filesystem::create_directories(o.out + "/embeddings", ec) && ec) {
      throw Error("cannot create " + o.out + "/embeddings: " + ec.message());
    }
    for (const auto& [name, file] : tables) {
      FileWriter out(o.out + "/" + name, false);
      copy_member(NpzMember{name, "", file}, &out);
      out.commit();
    }
    write_model_json(o.out, model);
  }
  std::cout << "pstrain-export: step " << c.manifest.version << " (" << c.dir << ", " << c.manifest.shards.size()
            << " shard(s), " << c.layout.tensors().size() << " variables, " << c.manifest.total << " parameters"
            << (tables.empty() ? "" : ", " + std::to_string(tables.size()) + " embedding table file(s)") << ") to "
            << o.out << std::endl;
  return c.dir;
}

}  // namespace pstrain
