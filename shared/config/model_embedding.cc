#include "shared/config/model_embedding.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/text.h"

namespace pstrain {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The list's items, split at the commas outside parentheses (a residual block is one item).
std::vector<std::string> top_level_items(const std::string& spec) {
  std::vector<std::string> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= spec.size(); ++i) {
    if (i == spec.size() || (spec[i] == ',' && depth == 0)) {
      items.push_back(trim(spec.substr(start, i - start)));
      start = i + 1;
    } else if (spec[i] == '(') {
      ++depth;
    } else if (spec[i] == ')' && depth > 0) {
      --depth;
    }
  }
  return items;
}

std::vector<std::string> words(const std::string& item) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < item.size()) {
    while (i < item.size() && std::isspace(static_cast<unsigned char>(item[i]))) ++i;
    const size_t start = i;
    while (i < item.size() && !std::isspace(static_cast<unsigned char>(item[i]))) ++i;
    if (i > start) out.push_back(item.substr(start, i - start));
  }
  return out;
}

bool is_embedding(const std::string& item) {
  const std::vector<std::string> w = words(item);
  return !w.empty() && lower(w[0]) == "embedding";
}

struct Entry {
  int dim = 0;
  std::string tables;  // "" when the entry does not say
  std::string pool;    // "" when the entry does not say
};

Entry parse_entry(const std::string& item) {
  const std::string where = "--model: layer 1 '" + item + "': ";
  const std::vector<std::string> w = words(item);
  if (w.size() < 2 || w[1].find('=') != std::string::npos) {
    throw UsageError(where + "needs the rows' floats, e.g. 'embedding 8' (docs/models.md, \"Embedding tables\")");
  }
  Entry e;
  const std::string& d = w[1];
  const bool digits = !d.empty() && d.size() <= 5 && std::all_of(d.begin(), d.end(), [](unsigned char c) { return std::isdigit(c); });
  if (!digits || std::stoi(d) < 1 || std::stoi(d) > 4096) {
    throw UsageError(where + "the rows' floats must be a whole number in [1, 4096], not '" + d + "'");
  }
  e.dim = std::stoi(d);
  for (size_t i = 2; i < w.size(); ++i) {
    const size_t eq = w[i].find('=');
    const std::string key = eq == std::string::npos ? lower(w[i]) : lower(w[i].substr(0, eq));
    const std::string value = eq == std::string::npos ? "" : w[i].substr(eq + 1);
    if (key == "tables" && eq != std::string::npos) {
      if (value != "shared" && value != "per-field") {
        throw UsageError(where + "tables='" + value + "' is not one of shared, per-field");
      }
      e.tables = value;
    } else if (key == "pool" && eq != std::string::npos) {
      if (value != "sum" && value != "mean") throw UsageError(where + "pool='" + value + "' is not one of sum, mean");
      e.pool = value;
    } else {
      throw UsageError(where + "'" + w[i] + "' is not an option of embedding (tables=shared|per-field, pool=sum|mean)");
    }
  }
  return e;
}

// Where an option came from: 2 the command line, 1 the config file, 0 neither (its default).
int place(const GivenOptions& given, const std::string& name) {
  return given.command_line.count(name) ? 2 : given.config.count(name) ? 1 : 0;
}

// Settles one option that the entry and a flag may both give: the command line wins over the
// config file; given in one place with two values, they contradict each other.
template <typename T>
void settle(T* option, const T& from_entry, const std::string& flag, const std::string& entry_text,
            int entry_place, const GivenOptions& given, const std::string& shown) {
  const int flag_place = place(given, flag.substr(2));
  if (flag_place == 0 || flag_place < entry_place) {
    *option = from_entry;
  } else if (flag_place == entry_place && *option != from_entry) {
    throw UsageError("--model's '" + entry_text + "' and " + flag + " " + shown + " contradict each other (both " +
                     (entry_place == 2 ? "on the command line" : "in the config file") +
                     "): give the tables' setup once");
  }  // else the flag, given on the command line, wins over the config file's model
}

}  // namespace

void take_model_embedding(JobOptions* o, const GivenOptions& given) {
  if (o->model.empty()) return;
  std::vector<std::string> items = top_level_items(o->model);
  for (size_t i = 1; i < items.size(); ++i) {
    if (is_embedding(items[i])) {
      throw UsageError("--model: layer " + std::to_string(i + 1) + " '" + items[i] +
                       "': an embedding entry must come first (it makes the model's input: the dense features, "
                       "then one row per categorical field)");
    }
  }
  if (items.empty() || !is_embedding(items[0])) return;
  const std::string entry_text = items[0];
  const Entry e = parse_entry(entry_text);
  if (items.size() == 1 || items[1].empty()) {
    throw UsageError("--model: layer 1 '" + entry_text + "' needs the layers that read its rows after it, e.g. '" +
                     entry_text + ", dense 256, relu, dense 1'");
  }
  const int entry_place = place(given, "model");
  settle(&o->embedding_dim, e.dim, "--embedding-dim", entry_text, entry_place, given,
         std::to_string(o->embedding_dim));
  if (!e.tables.empty()) {
    settle(&o->embedding_tables, e.tables, "--embedding-tables", entry_text, entry_place, given, o->embedding_tables);
  }
  if (!e.pool.empty()) {
    settle(&o->embedding_pool, e.pool, "--embedding-pool", entry_text, entry_place, given, o->embedding_pool);
  }
  std::string rest;
  for (size_t i = 1; i < items.size(); ++i) rest += (i > 1 ? ", " : "") + items[i];
  o->model = rest;
}

}  // namespace pstrain
