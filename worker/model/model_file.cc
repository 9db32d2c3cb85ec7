#include "worker/model/model_file.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <exception>
#include <filesystem>
#include <sstream>

#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "worker/model/layers.h"
#include "worker/model/model.h"
#include "worker/model/param_files.h"

namespace pstrain {
namespace {

using Json = nlohmann::ordered_json;

std::string join_shape(const std::vector<size_t>& shape, const char* separator) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? separator : "") + std::to_string(shape[i]);
  return s;
}

// A layer as written; a block's (residual, bottom) with its inner layers (without variables of
// their own).
Json layer_json(const LayerSpec& l) {
  Json j;
  j["text"] = l.text;
  j["kind"] = layer_kind_name(l.kind);
  Json args = Json::array();
  for (double a : l.args) {
    if (a == std::floor(a) && std::fabs(a) < 1e15) {
      args.push_back(static_cast<int64_t>(a));
    } else {
      args.push_back(a);
    }
  }
  j["args"] = args;
  Json options = Json::object();
  for (const auto& [key, value] : l.options) options[key] = value;
  j["options"] = options;
  if (l.kind == LayerKind::kResidual || l.kind == LayerKind::kBottom || l.kind == LayerKind::kParallel ||
      l.kind == LayerKind::kBranch) {
    Json inner = Json::array();
    for (const LayerSpec& i : l.layers) inner.push_back(layer_json(i));
    j["layers"] = inner;
  }
  return j;
}

// The list as written, each layer with the variables the network gives it (a residual block:
// its inner layers', then its projection's).
Json layers_json(const std::string& spec, const Network& net) {
  Json layers = Json::array();
  int p = 0;
  const std::vector<LayerSpec> specs = parse_model(spec);
  for (size_t i = 0; i < specs.size(); ++i) {
    Json j = layer_json(specs[i]);
    Json variables = Json::array();
    for (int k = 0; k < net.layers()[i]->param_layers(); ++k, ++p) {  // the same count (and order) of layers
      for (const char* what : {".weight", ".bias"}) variables.push_back("layer" + std::to_string(p) + what);
    }
    j["variables"] = variables;
    layers.push_back(j);
  }
  return layers;
}

Json training_json(const TrainingRecord& t) {
  Json j;
  j["source"] = t.source;
  j["optimizer"] = t.optimizer;
  j["lr"] = t.lr;
  j["steps"] = t.steps;
  if (t.evaluated) {
    j["test_loss"] = t.test_loss;
    j["test_accuracy"] = t.test_accuracy;
  }
  return j;
}

Loss loss_of(const std::string& name, const std::string& path) {
  for (const Loss l : {Loss::kSoftmax, Loss::kBce, Loss::kMse, Loss::kHuber}) {
    if (name == loss_name(l)) return l;
  }
  throw Error(path + ": \"loss\" '" + name + "' is not one of softmax, bce, mse, huber");
}

// The "embeddings" object: what --evaluate and --predict need to read the saved tables.
Json embeddings_json(const EmbeddingSetup& e) {
  Json j;
  j["dim"] = e.dim;
  j["tables"] = e.per_field_tables ? "per-field" : "shared";
  j["table_names"] = e.tables;
  j["key"] = e.per_field_tables ? "raw" : "mix_id(raw ^ mix_id(field + 1))";
  j["dense_features"] = e.dense;
  j["fields"] = e.fields;
  j["pool"] = embedding_pool_name(e.pool);
  j["init"] = e.init;
  j["seed"] = e.seed;
  j["min_count"] = e.min_count;
  j["optimizer"] = e.optimizer;
  j["num_ps"] = e.num_ps;
  j["files"] = "embeddings/<table>.shard<s>-of-<num_ps>";
  if (!e.schema.empty()) j["schema"] = e.schema;
  return j;
}

EmbeddingSetup embeddings_from(const Json& j, const std::vector<size_t>& input_shape, const std::string& path) {
  const auto fail = [&](const std::string& why) { return Error(path + ": \"embeddings\": " + why); };
  if (!j.is_object()) throw fail("not an object");
  EmbeddingSetup e;
  std::string tables, key, pool;
  try {
    e.dim = j.at("dim").get<uint32_t>();
    tables = j.at("tables").get<std::string>();
    e.tables = j.at("table_names").get<std::vector<std::string>>();
    key = j.at("key").get<std::string>();
    e.dense = j.at("dense_features").get<size_t>();
    e.fields = j.at("fields").get<size_t>();
    e.init = j.at("init").get<std::string>();
    e.seed = j.at("seed").get<uint64_t>();
    e.min_count = j.at("min_count").get<int64_t>();
    e.optimizer = j.value("optimizer", "");
    e.num_ps = j.at("num_ps").get<int>();
    pool = j.value("pool", "sum");  // absent: written before pooling, by a pstrain that summed
    e.schema = j.value("schema", "");  // absent: the Criteo reader's fields
  } catch (const Json::exception& ex) {
    throw fail(std::string("a field is missing or of the wrong type: ") + ex.what());
  }
  if (e.dim < 1 || e.dim > 4096) throw fail("dim " + std::to_string(e.dim) + " is not in [1, 4096]");
  if (tables != "shared" && tables != "per-field") throw fail("tables '" + tables + "' is not one of shared, per-field");
  e.per_field_tables = tables == "per-field";
  const std::string expected_key = e.per_field_tables ? "raw" : "mix_id(raw ^ mix_id(field + 1))";
  if (key != expected_key) throw fail("key '" + key + "' is not this pstrain's key of " + tables + " tables ('" + expected_key + "')");
  if (e.fields < 1 || e.fields > 4096 || e.dense > (size_t{1} << 24)) throw fail("bad dense_features or fields");
  if (e.tables.size() != (e.per_field_tables ? e.fields : 1)) {
    throw fail(std::to_string(e.tables.size()) + " table_names for " + tables + " tables of " + std::to_string(e.fields) + " fields");
  }
  for (const std::string& name : e.tables) {
    if (name.empty() || name.find_first_of("/\\") != std::string::npos || name[0] == '.') throw fail("bad table name '" + name + "'");
  }
  if (!parse_embedding_pool(pool, &e.pool)) throw fail("pool '" + pool + "' is not one of sum, mean");
  if (e.init != "uniform" && e.init != "zeros") throw fail("init '" + e.init + "' is not one of uniform, zeros");
  if (e.min_count < 1 || e.num_ps < 1 || e.num_ps > 4096) throw fail("min_count and num_ps must be at least 1");
  if (input_shape != std::vector<size_t>{e.dense + e.fields * e.dim}) {
    throw fail("input_shape " + bracket_shape(input_shape) + " is not dense_features + fields x dim = [" +
               std::to_string(e.dense + e.fields * e.dim) + "]");
  }
  return e;
}

// The "variables" array: each variable's name (and its .npy file, where the model's directory
// holds one per variable), shape, offset and size in the flat vector.
Json variables_json(const Layout& layout, bool with_files) {
  Json variables = Json::array();
  for (const TensorSpec& t : layout.tensors()) {
    Json v;
    v["name"] = t.name;
    if (with_files) v["file"] = t.name + ".npy";
    v["shape"] = t.shape;
    v["offset"] = t.offset;
    v["size"] = t.size;
    v["dtype"] = "float32";
    variables.push_back(v);
  }
  return variables;
}

// The "training" object's fields both kinds of model.json have (what training_json writes).
TrainingRecord training_from(const Json& t) {
  TrainingRecord r;
  r.source = t.value("source", "");
  r.optimizer = t.value("optimizer", "");
  r.lr = t.value("lr", 0.0);
  r.steps = t.value("steps", uint64_t{0});
  return r;
}

// A script's variables as listed ("name", "shape", "offset" following one another).
Layout listed_variables(const Json& j, const std::string& path) {
  Layout listed;
  try {
    for (const Json& v : j.at("variables")) {
      const std::string name = v.at("name").get<std::string>();
      if (name.empty() || name.find_first_of(" \t\n/\\") != std::string::npos) {
        throw Error(path + ": bad variable name " + v.at("name").dump());
      }
      listed.add(name, v.at("shape").get<std::vector<size_t>>());
      if (v.at("offset").get<size_t>() != listed.tensors().back().offset) {
        throw Error(path + ": variable " + v.at("name").dump() + " has an offset that does not follow the ones before it");
      }
    }
  } catch (const Json::exception& e) {
    throw Error(path + ": bad \"variables\": " + e.what());
  }
  return listed;
}

// A script's model.json (kind "script"): its variables, tables and training record.
ModelDescription script_description_from(const Json& j, const std::string& path) {
  ModelDescription d;
  d.script = true;
  d.given_as = j.value("given_as", "");
  d.variables = listed_variables(j, path);
  if (d.variables.tensors().empty()) throw Error(path + ": a script's model without variables");
  try {
    if (j.contains("embeddings")) {
      const Json& e = j["embeddings"];
      const size_t width = e.value("dense_features", size_t{0}) + e.value("fields", size_t{0}) * e.value("dim", size_t{0});
      d.embeddings = embeddings_from(e, {width}, path);
    }
    if (j.contains("training") && j["training"].is_object()) d.training = training_from(j["training"]);
  } catch (const Json::exception& e) {
    throw Error(path + ": a field is missing or of the wrong type: " + e.what());
  }
  return d;
}

// The model.json text of a script's model.
std::string script_model_json_text(const ModelDescription& d) {
  Json j;
  j["format"] = "pstrain-model";
  j["version"] = kScriptModelFileFormat;
  j["kind"] = "script";
  j["given_as"] = d.given_as;
  if (d.embeddings.dim > 0) j["embeddings"] = embeddings_json(d.embeddings);
  j["dtype"] = "float32";
  j["total_parameters"] = d.variables.total();
  j["variables"] = variables_json(d.variables, false);
  j["training"] = training_json(d.training);
  return j.dump(2) + "\n";
}

// Reads the fields that matter; `path` names the file in errors.
ModelDescription description_from(const Json& j, const std::string& path) {
  const auto fail = [&](const std::string& why) { return Error(path + ": " + why); };
  if (!j.is_object()) throw fail("not a JSON object");
  if (!j.contains("format") || j["format"] != "pstrain-model") throw fail("not a pstrain model file (no \"format\": \"pstrain-model\")");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int>() < 1 ||
      j["version"].get<int>() > kScriptModelFileFormat) {
    throw fail("version " + (j.contains("version") ? j["version"].dump() : std::string("(none)")) +
               " is not supported (this pstrain reads versions 1 to " + std::to_string(kScriptModelFileFormat) + ")");
  }
  if (j.value("kind", "") == "script") return script_description_from(j, path);
  if (j["version"].get<int>() > kModelFileFormat) {
    throw fail("version " + j["version"].dump() + " is a script's model's, but there is no \"kind\": \"script\"");
  }
  ModelDescription d;
  try {
    d.spec = j.at("model").get<std::string>();
    d.input_shape = j.at("input_shape").get<std::vector<size_t>>();
    d.classes = j.at("classes").get<int>();
    if (j.contains("given_as")) d.given_as = j["given_as"].get<std::string>();
    if (j.contains("training") && j["training"].is_object()) {
      const Json& t = j["training"];
      d.training = training_from(t);
      d.training.evaluated = t.contains("test_accuracy");
      d.training.test_loss = t.value("test_loss", 0.0);
      d.training.test_accuracy = t.value("test_accuracy", 0.0);
    }
    if (j.contains("loss")) d.loss = loss_of(j["loss"].get<std::string>(), path);
    d.huber_delta = j.value("huber_delta", 1.0);
    if (j.contains("embeddings")) d.embeddings = embeddings_from(j["embeddings"], d.input_shape, path);
  } catch (const Json::exception& e) {
    throw fail(std::string("a field is missing or of the wrong type: ") + e.what());
  }
  if (d.input_shape.empty() || d.input_shape.size() > 3) throw fail("input_shape must have 1 to 3 dimensions");
  Layout layout;
  try {
    layout = layout_of(d);
  } catch (const Error& e) {
    throw fail(std::string("its model does not fit its input shape and classes: ") + e.what());
  }
  // The variables it lists must be its layer list's, where they are in the flat vector.
  Layout listed;
  try {
    for (const Json& v : j.at("variables")) listed.add(v.at("name").get<std::string>(), v.at("shape").get<std::vector<size_t>>());
    size_t i = 0;
    for (const Json& v : j.at("variables")) {
      if (v.at("offset").get<size_t>() != listed.tensors()[i++].offset) throw fail("variable " + v.at("name").dump() + " has an offset that does not follow the ones before it");
    }
  } catch (const Json::exception& e) {
    throw fail(std::string("bad \"variables\": ") + e.what());
  }
  const std::string difference = layout_difference(listed, layout, path + "'s variables");
  if (!difference.empty()) throw fail("its variables are not its layer list's: " + difference);
  return d;
}

}  // namespace

std::string targets_of(Loss loss, const std::string& where) {
  return loss == Loss::kSoftmax ? "" : "the --loss " + std::string(loss_name(loss)) + " model of " + where;
}

std::string bracket_shape(const std::vector<size_t>& shape) { return "[" + join_shape(shape, ", ") + "]"; }

Layout layout_of(const ModelDescription& d) {
  if (d.script) return d.variables;
  return Network(d.spec, d.input_shape, d.classes, targets_of(d.loss, "model.json")).layout();
}

Layout state_layout_of(const ModelDescription& d) {
  if (d.script) return Layout();
  return Network(d.spec, d.input_shape, d.classes, targets_of(d.loss, "model.json")).state_layout();
}

std::string model_json_text(const ModelDescription& d) {
  if (d.script) return script_model_json_text(d);
  const Network net(d.spec, d.input_shape, d.classes, targets_of(d.loss, "model.json"));
  const Layout& layout = net.layout();
  Json j;
  j["format"] = "pstrain-model";
  j["version"] = d.embeddings.dim > 0 ? kModelFileFormat : 1;
  j["model"] = d.spec;
  j["given_as"] = d.given_as;
  j["layers"] = layers_json(d.spec, net);
  j["input_shape"] = d.input_shape;
  j["classes"] = d.classes;
  j["loss"] = loss_name(d.loss);
  if (d.loss == Loss::kHuber) j["huber_delta"] = d.huber_delta;
  if (d.embeddings.dim > 0) j["embeddings"] = embeddings_json(d.embeddings);
  j["dtype"] = "float32";
  j["total_parameters"] = layout.total();
  j["variables"] = variables_json(layout, true);
  if (!net.state_layout().tensors().empty()) {  // batchnorm's running statistics: not in the flat vector
    Json state = Json::array();
    for (const TensorSpec& t : net.state_layout().tensors()) {
      Json v;
      v["name"] = t.name;
      v["file"] = t.name + ".npy";
      v["shape"] = t.shape;
      v["dtype"] = "float32";
      state.push_back(v);
    }
    j["state"] = state;
  }
  j["training"] = training_json(d.training);
  return j.dump(2) + "\n";
}

void write_model_json(const std::string& dir, const ModelDescription& d) {
  write_file_atomically(dir + "/model.json", model_json_text(d));
}

std::optional<ModelDescription> read_model_json(const std::string& dir) {
  const std::string path = dir + "/model.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::string text, error;
  if (!read_whole_file(path, &text, &error)) throw Error("cannot read '" + path + "': " + error);
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
  return description_from(j, path);
}

std::string layout_difference(const Layout& saved, const Layout& ours, const std::string& where) {
  const auto& a = saved.tensors();
  const auto& b = ours.tensors();
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size()) return b[i].name + " is not in " + where + " (it has " + std::to_string(a.size()) + " variables, the model " + std::to_string(b.size()) + ")";
    if (i >= b.size()) return where + " has " + a[i].name + ", which the model does not (it has " + std::to_string(b.size()) + " variables, " + where + " " + std::to_string(a.size()) + ")";
    if (a[i].name != b[i].name) return where + " has " + a[i].name + " where the model has " + b[i].name;
    if (a[i].shape != b[i].shape) {
      return a[i].name + " has shape " + bracket_shape(a[i].shape) + " in " + where + ", but the model needs " + bracket_shape(b[i].shape);
    }
    if (a[i].offset != b[i].offset) {
      return a[i].name + " is at offset " + std::to_string(a[i].offset) + " in " + where + ", but at " + std::to_string(b[i].offset) + " in the model";
    }
  }
  return "";
}

}  // namespace pstrain
