#include "worker/export/export_formats.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shared/checkpoint/checkpoint.h"
#include "shared/checkpoint/table_file.h"
#include "shared/config/feature_schema.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "worker/data/npy_format.h"
#include "worker/model/param_files.h"

namespace pstrain {
namespace {

using Json = nlohmann::ordered_json;

void put16(std::string& s, uint32_t v) {
  s += static_cast<char>(v & 0xff), s += static_cast<char>((v >> 8) & 0xff);
}
void put32(std::string& s, uint32_t v) { put16(s, v & 0xffff), put16(s, v >> 16); }

uint32_t crc_of(uint32_t crc, const void* data, size_t n) {
  const auto* b = static_cast<const Bytef*>(data);
  uLong c = crc;
  for (size_t done = 0; done < n;) {
    const size_t piece = std::min<size_t>(n - done, 1u << 30);
    c = crc32(c, b + done, static_cast<uInt>(piece));
    done += piece;
  }
  return static_cast<uint32_t>(c);
}

// A version 1.0 .npy header of `a` (its data follows it).
std::string npy_header(const ExportArray& a) {
  std::string dict = std::string("{'descr': '") + (a.type == ExportArray::Type::kInt64 ? "<i8" : "<f4") +
                     "', 'fortran_order': False, 'shape': " + shape_text(a.shape) + ", }";
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += '\x01';
  bytes += '\x00';
  bytes += static_cast<char>(dict.size() & 0xff);
  bytes += static_cast<char>(dict.size() >> 8);
  return bytes + dict;
}

// A stored zip entry's local header and central directory entry around each member's bytes.
class ZipWriter {
 public:
  explicit ZipWriter(const std::string& path) : path_(path), out_(path, false) {}

  // One member whose bytes are the concatenation of `pieces`.
  void member(const std::string& name, const std::vector<std::pair<const void*, size_t>>& pieces) {
    uint64_t size = 0;
    uint32_t crc = crc_of(0, nullptr, 0);
    for (const auto& [data, n] : pieces) crc = crc_of(crc, data, n), size += n;
    const uint64_t at = out_.bytes();
    if (size >= 0xffffffffu || at + size + 30 + name.size() >= 0xffffffffu) {
      throw Error(path_ + ": " + name +
                  " would pass 4 GiB, more than a .npz without ZIP64 holds (use --format safetensors)");
    }
    std::string
        common;  // version needed, flags, method (stored), time, date (1980-01-01), CRC, sizes, name length
    put16(common, 20), put16(common, 0), put16(common, 0), put16(common, 0), put16(common, 0x21);
    put32(common, crc), put32(common, static_cast<uint32_t>(size)),
        put32(common, static_cast<uint32_t>(size));
    put16(common, static_cast<uint32_t>(name.size()));
    std::string local;
    put32(local, 0x04034b50);
    local += common;
    put16(local, 0);  // extra field length
    local += name;
    out_.append(local.data(), local.size());
    for (const auto& [data, n] : pieces) out_.append(data, n);
    put32(directory_, 0x02014b50);
    put16(directory_, 20);  // made by
    directory_ += common;
    put16(directory_, 0), put16(directory_, 0), put16(directory_, 0),
        put16(directory_, 0);  // extra, comment, disk, attributes
    put32(directory_, 0),
        put32(directory_, static_cast<uint32_t>(at));  // external attributes, local header offset
    directory_ += name;
    ++members_;
  }

  void finish() {
    const uint64_t at = out_.bytes();
    if (at + directory_.size() >= 0xffffffffu || members_ >= 0xffff) {
      throw Error(path_ + ": more than a .npz without ZIP64 holds (use --format safetensors)");
    }
    std::string end = directory_;
    put32(end, 0x06054b50);
    put16(end, 0), put16(end, 0);
    put16(end, static_cast<uint32_t>(members_)), put16(end, static_cast<uint32_t>(members_));
    put32(end, static_cast<uint32_t>(directory_.size())), put32(end, static_cast<uint32_t>(at));
    put16(end, 0);  // comment length
    out_.append(end.data(), end.size());
    out_.commit();
  }

 private:
  const std::string path_;
  FileWriter out_;
  std::string directory_;
  size_t members_ = 0;
};

// model.json's canonical schema text (FeatureSchema::canonical) read back, and checked to give
// the same text.
FeatureSchema schema_of_canonical(const std::string& canonical, const std::string& where) {
  FeatureSchema s;
  const auto fail = [&]() {
    return Error(where + ": model.json's schema \"" + canonical +
                 "\" cannot be read back (a column name with \"; \"?)");
  };
  std::vector<std::string> parts;
  for (size_t from = 0;;) {
    const size_t cut = canonical.find("; ", from);
    parts.push_back(canonical.substr(from, cut == std::string::npos ? std::string::npos : cut - from));
    if (cut == std::string::npos) break;
    from = cut + 2;
  }
  int delimiter = 0, header = 0;
  std::string d, h;
  std::istringstream first(parts[0]);
  if (!(first >> d >> delimiter >> h >> header) || d != "delimiter" || h != "header") throw fail();
  s.delimiter = static_cast<char>(delimiter);
  s.header = header != 0;
  for (size_t p = 1; p < parts.size(); ++p) {
    std::vector<std::string> words;
    std::istringstream in(parts[p]);
    for (std::string w; in >> w;) words.push_back(w);
    SchemaColumn c;
    size_t k = 1;  // the first word of the kind (a name may hold spaces)
    for (; k < words.size(); ++k) {
      const std::string& w = words[k];
      if (w == "label" || w == "ignore" || w == "numeric" || w == "categorical") break;
    }
    if (k >= words.size()) throw fail();
    c.name = parts[p].substr(0, parts[p].find(" " + words[k], words[0].size() - 1));
    const std::string& kind = words[k];
    if (kind == "label") c.kind = ColumnKind::kLabel;
    if (kind == "ignore") c.kind = ColumnKind::kIgnore;
    if (kind == "numeric") {
      c.kind = ColumnKind::kNumeric;
      for (size_t i = k + 1; i < words.size(); ++i) {
        if (words[i] == "integer") c.integer = true;
        if (words[i] == "log1p") c.transform = NumericTransform::kLog1p;
      }
    }
    if (kind == "categorical") {
      c.kind = ColumnKind::kCategorical;
      const std::string ids = k + 1 < words.size() ? words[k + 1] : "";
      c.ids = ids == "hex" ? IdKind::kHex : ids == "int" ? IdKind::kInt : IdKind::kString;
      if (k + 3 < words.size() && words[k + 2] == "separator")
        c.separator = static_cast<char>(std::stoi(words[k + 3]));
    }
    s.columns.push_back(c);
  }
  if (s.canonical() != canonical) throw fail();
  return s;
}

Json column_json(const SchemaColumn& c) {
  Json col;
  col["name"] = c.name;
  switch (c.kind) {
    case ColumnKind::kLabel:
      col["type"] = "label";
      break;
    case ColumnKind::kIgnore:
      col["type"] = "ignore";
      break;
    case ColumnKind::kNumeric:
      col["type"] = "numeric";
      if (c.integer) col["integer"] = true;
      col["transform"] = c.transform == NumericTransform::kLog1p ? "log1p" : "none";
      break;
    case ColumnKind::kCategorical:
      col["type"] = "categorical";
      col["ids"] = c.ids == IdKind::kHex ? "hex" : c.ids == IdKind::kInt ? "int" : "string";
      if (c.separator != '\0') col["separator"] = std::string(1, c.separator);
      break;
  }
  return col;
}

// The --schema JSON object (docs/data.md, "Feature schema") of model.json's canonical schema
// text; the preset criteo's for "" (the Criteo reader's fields, which the preset reads to the same
// bits).
Json schema_json(const std::string& canonical, const std::string& where) {
  const FeatureSchema s = canonical.empty() ? criteo_feature_schema() : schema_of_canonical(canonical, where);
  Json j;
  j["delimiter"] = s.delimiter == ',' ? "comma" : "tab";
  j["header"] = s.header;
  Json columns = Json::array();
  for (const SchemaColumn& c : s.columns) columns.push_back(column_json(c));
  j["columns"] = columns;
  return j;
}

std::string ids_name(const std::string& table) { return "embedding." + table + ".ids"; }
std::string rows_name(const std::string& table) { return "embedding." + table + ".rows"; }

}  // namespace

const char* export_format_name(ExportFormat format) {
  switch (format) {
    case ExportFormat::kNpy: return "npy";
    case ExportFormat::kNpz: return "npz";
    case ExportFormat::kNpzArrays: return "npz-arrays";
    case ExportFormat::kSafetensors: return "safetensors";
  }
  return "?";
}

bool export_format_of(const std::string& name, ExportFormat* format) {
  for (const ExportFormat f : {ExportFormat::kNpy, ExportFormat::kNpz, ExportFormat::kNpzArrays, ExportFormat::kSafetensors}) {
    if (name == export_format_name(f)) return (*format = f, true);
  }
  return false;
}

bool is_array_format(ExportFormat format) {
  return format == ExportFormat::kNpzArrays || format == ExportFormat::kSafetensors;
}

void write_npz_arrays(const std::string& path, const std::vector<ExportArray>& arrays,
                      const std::vector<std::pair<std::string, std::string>>& files) {
  ZipWriter zip(path);
  for (const ExportArray& a : arrays) {
    const std::string header = npy_header(a);
    zip.member(a.name + ".npy", {{header.data(), header.size()}, {a.data, a.bytes}});
  }
  for (const auto& [name, bytes] : files) zip.member(name, {{bytes.data(), bytes.size()}});
  zip.finish();
}

void write_safetensors(const std::string& path, const std::vector<ExportArray>& arrays,
                       const std::map<std::string, std::string>& metadata) {
  Json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const ExportArray& a : arrays) {
    if (header.contains(a.name)) throw Error(path + ": two arrays named " + a.name);
    header[a.name] = {{"dtype", a.type == ExportArray::Type::kInt64 ? "I64" : "F32"},
                      {"shape", a.shape},
                      {"data_offsets", {at, at + a.bytes}}};
    at += a.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the arrays' bytes start 8-aligned
  std::string length;
  put32(length, static_cast<uint32_t>(text.size() & 0xffffffffu)),
      put32(length, static_cast<uint32_t>(uint64_t{text.size()} >> 32));
  FileWriter out(path, false);
  out.append(length.data(), length.size());
  out.append(text.data(), text.size());
  for (const ExportArray& a : arrays) out.append(a.data, a.bytes);
  out.commit();
}

std::vector<TableArrays> table_arrays(const EmbeddingSetup& e,
                                      const std::vector<std::pair<std::string, std::string>>& files,
                                      const std::string& where) {
  std::vector<TableArrays> tables(e.tables.size());
  std::vector<std::vector<std::pair<uint64_t, size_t>>> order(e.tables.size());  // (ID, its row)
  for (uint32_t t = 0; t < tables.size(); ++t)
    tables[t].name = e.tables[t], tables[t].table = t, tables[t].dim = e.dim;
  for (const auto& [name, bytes] : files) {
    SavedTable saved;
    std::string error;
    if (!read_saved_table(bytes, &saved, &error, SavedTableParts::kWeights))
      throw Error(where + ": " + name + ": " + error);
    const SavedTableHeader& h = saved.header;
    if (h.table >= tables.size() || e.tables[h.table] != h.name) {
      throw Error(where + ": " + name + ": it holds table '" + h.name + "' (" + std::to_string(h.table) +
                  "), which model.json's embeddings do not name");
    }
    if (h.dim != e.dim) {
      throw Error(where + ": " + name + ": its rows have dim " + std::to_string(h.dim) + ", the model's " +
                  std::to_string(e.dim) + " (model.json)");
    }
    TableArrays& table = tables[h.table];
    for (size_t r = 0; r < saved.rows.size(); ++r)
      order[h.table].emplace_back(saved.rows[r].id, table.rows.size() / e.dim + r);
    table.rows.insert(table.rows.end(), saved.values.begin(), saved.values.end());
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    std::vector<std::pair<uint64_t, size_t>>& o = order[t];
    std::sort(o.begin(), o.end());
    std::vector<float> rows(tables[t].rows.size());
    tables[t].ids.resize(o.size());
    for (size_t i = 0; i < o.size(); ++i) {
      if (i > 0 && o[i].first == o[i - 1].first) {
        throw Error(where + ": table " + tables[t].name + ": ID " + std::to_string(o[i].first) +
                    " has a row in two files");
      }
      tables[t].ids[i] = static_cast<int64_t>(o[i].first);
      std::copy_n(&tables[t].rows[o[i].second * e.dim], e.dim, &rows[i * e.dim]);
    }
    tables[t].rows = std::move(rows);
  }
  return tables;
}

std::string export_model_json(const ModelDescription& d, ExportFormat format,
                              const std::vector<TableArrays>& tables) {
  Json j = Json::parse(model_json_text(d));
  Json x;
  x["format"] = export_format_name(format);
  x["variables"] =
      d.script ? "each variable under the script's name for it (a torch module's state_dict name), in its shape"
               : "each variable under its name (model.json's \"variables\"; a dense weight is [inputs, outputs]: y "
                 "= x W + b)";
  const EmbeddingSetup& e = d.embeddings;
  if (e.dim > 0) {
    Json list = Json::array();
    for (const TableArrays& t : tables) {
      list.push_back({{"name", t.name},
                      {"table", t.table},
                      {"rows", t.ids.size()},
                      {"ids", ids_name(t.name)},
                      {"weights", rows_name(t.name)}});
    }
    x["tables"] = list;
    x["ids"] = "int64 arrays of the uint64 keys' bits (numpy: .view(np.uint64)), increasing as uint64";
    if (d.script) {  // the IDs are the script's: no feature schema or reader to describe
      x["key"] = e.per_field_tables ? "the script's ID (table f holds field f)"
                                    : "mix_id(id ^ mix_id(field + 1)) of the script's ID (one table)";
    } else {
      x["features"] = schema_json(e.schema, "the model");
      x["reader"] = e.schema.empty() ? "criteo" : "schema";
      x["input"] =
          "per record: the numeric columns in column order (transformed), then one row per categorical column "
          "in column order";
      x["missing_id"] = "an empty categorical value is the ID 0xffffffffffffffff";
      x["raw_ids"] = "hex: the number; string: FNV-1a 64 of the bytes; int: mix_id(x mod 2^64)";
      x["key"] =
          e.per_field_tables ? "raw (table f holds field f)" : "mix_id(raw ^ mix_id(field + 1)) (one table)";
    }
    x["pool"] = e.pool == EmbeddingPool::kMean ? "mean" : "sum";
    x["absent_rows"] = e.min_count > 1
                           ? std::string("zeros (min_count > 1: not admitted)")
                           : "init_row(" + e.init +
                                 ", seed, table, key) (docs/sparse.md, \"Rows and their initial values\")";
  }
  j["export"] = x;
  return j.dump(2) + "\n";
}

void write_array_export(const std::string& out, ExportFormat format, const ModelDescription& model,
                        const Layout& layout, const float* values, const Layout& state_layout,
                        const float* state,
                        const std::vector<std::pair<std::string, std::string>>& table_files,
                        const std::string& where) {
  if (!table_files.empty() && model.embeddings.dim == 0) {
    throw Error(where +
                ": model.json does not describe the embedding tables (written before pstrain recorded them): "
                "give --format npy or npz");
  }
  const std::vector<TableArrays> tables = table_arrays(model.embeddings, table_files, where);
  const std::string json = export_model_json(model, format, tables);
  std::vector<ExportArray> arrays;
  const auto add = [&](const std::string& name, ExportArray::Type type, std::vector<size_t> shape,
                       const void* data) {
    size_t count = 1;
    for (size_t s : shape) count *= s;
    arrays.push_back(
        {name, type, std::move(shape), data, count * (type == ExportArray::Type::kInt64 ? 8 : 4)});
  };
  for (const TensorSpec& t : layout.tensors())
    add(t.name, ExportArray::Type::kFloat32, t.shape, values + t.offset);
  for (const TensorSpec& t : state_layout.tensors())
    add(t.name, ExportArray::Type::kFloat32, t.shape, state + t.offset);
  for (const TableArrays& t : tables) {
    add(ids_name(t.name), ExportArray::Type::kInt64, {t.ids.size()}, t.ids.data());
    add(rows_name(t.name), ExportArray::Type::kFloat32, {t.ids.size(), t.dim}, t.rows.data());
  }
  if (format == ExportFormat::kSafetensors) {
    write_safetensors(out, arrays, {{"format", "pt"}, {"pstrain_model", json}});
  } else {
    write_npz_arrays(out, arrays, {{"model.json", json}});
  }
}

bool is_saved_params_dir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/model.json", ec) || std::filesystem::exists(dir + "/MANIFEST", ec))
    return false;
  return checkpoint_versions(dir).empty();
}

void export_saved_params(const std::string& dir, const std::string& out, ExportFormat format) {
  const std::optional<ModelDescription> model = read_model_json(dir);
  if (!model) throw Error(dir + ": no model.json");
  const Layout layout = layout_of(*model), state_layout = state_layout_of(*model);
  std::vector<float> values(layout.total()), state(state_layout.total());
  load_params(dir, layout, values.data());
  if (!state_layout.tensors().empty()) load_params(dir, state_layout, state.data());
  std::vector<std::pair<std::string, std::string>> files;
  const EmbeddingSetup& e = model->embeddings;
  for (size_t t = 0; t < (e.dim > 0 ? e.tables.size() : 0); ++t) {
    for (int s = 0; s < e.num_ps; ++s) {
      const std::string name =
          "embeddings/" + e.tables[t] + ".shard" + std::to_string(s) + "-of-" + std::to_string(e.num_ps);
      std::string bytes, error;
      if (!read_whole_file(dir + "/" + name, &bytes, &error))
        throw Error(dir + "/" + name + ": cannot read it: " + error);
      files.emplace_back(name, std::move(bytes));
    }
  }
  write_array_export(out, format, *model, layout, values.data(), state_layout, state.data(), files, dir);
  std::cout << "pstrain-export: " << dir << " (--save-params, " << layout.tensors().size() << " variables, "
            << layout.total() << " parameters"
            << (files.empty() ? "" : ", " + std::to_string(files.size()) + " embedding table file(s)")
            << ") to " << out << std::endl;
}

}  // namespace pstrain
