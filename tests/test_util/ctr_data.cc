#include "test_util/ctr_data.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "shared/util/splitmix.h"
#include "test_util/process.h"
#include "worker/data/criteo.h"
#include "worker/sparse/embedding_input.h"

namespace pstrain::test {
namespace {

constexpr uint64_t kVocabulary = 12;

uint64_t splitmix64_at(uint64_t seed, uint64_t i) { return splitmix64(seed * kGolden + i); }

bool field_empty(int r, int f) { return (r + f) % 9 == 0; }

// Record r's field f's raw IDs (none when empty).
std::vector<uint64_t> raw_ids(int r, int f, bool lists) {
  if (field_empty(r, f)) return {};
  std::vector<uint64_t> ids = {ctr_raw_id(r, f)};
  const auto at = static_cast<uint64_t>(r * 26 + f);
  const uint64_t count = lists && f >= kCtrFirstList ? 1 + splitmix64_at(13, at) % 3 : 1;
  for (uint64_t k = 1; k < count; ++k) {
    ids.push_back(0x1000 * static_cast<uint64_t>(f + 1) + splitmix64_at(17, at * 4 + k) % kVocabulary);
  }
  return ids;
}

}  // namespace

uint64_t ctr_raw_id(int r, int f) {
  return 0x1000 * static_cast<uint64_t>(f + 1) + splitmix64_at(7, static_cast<uint64_t>(r * 26 + f)) % kVocabulary;
}

uint64_t ctr_key(int r, int f, bool per_field_tables) {
  const uint64_t raw = field_empty(r, f) ? kCriteoMissingId : ctr_raw_id(r, f);
  return embedding_key(static_cast<size_t>(f), raw, per_field_tables);
}

std::vector<uint64_t> ctr_keys(int r, int f, bool per_field_tables, bool lists) {
  std::vector<uint64_t> keys;
  for (uint64_t raw : raw_ids(r, f, lists)) keys.push_back(embedding_key(static_cast<size_t>(f), raw, per_field_tables));
  if (keys.empty()) keys.push_back(ctr_key(r, f, per_field_tables));
  return keys;
}

void write_criteo(const std::string& path, int records, int offset, bool lists) {
  std::ofstream out(path);
  for (int r = offset; r < offset + records; ++r) {
    double logit = 0;
    std::string line;
    for (int f = 0; f < 26; ++f) {
      std::vector<uint64_t> ids = raw_ids(r, f, lists);
      if (ids.empty()) ids = {ctr_raw_id(r, f)};  // the hidden model ignores emptiness
      double effect = 0;
      for (uint64_t id : ids) effect += static_cast<double>(splitmix64_at(11, id) % 7) / 3.0 - 1.0;
      logit += ids.size() == 1 ? effect : effect / static_cast<double>(ids.size());
    }
    const int dense0 = static_cast<int>(splitmix64_at(3, static_cast<uint64_t>(r)) % 50);
    logit += (dense0 - 25) / 25.0;
    line += logit > 0 ? "1" : "0";
    for (int j = 0; j < 13; ++j) {
      line += "\t";
      if (j == 0) line += std::to_string(dense0);
      else if ((r + j) % 5 != 0) line += std::to_string(splitmix64_at(5, static_cast<uint64_t>(r * 13 + j)) % 1000);  // some empty
    }
    char hex[32];
    for (int f = 0; f < 26; ++f) {
      line += "\t";
      const std::vector<uint64_t> ids = raw_ids(r, f, lists);  // none: the missing ID
      for (size_t k = 0; k < ids.size(); ++k) {
        std::snprintf(hex, sizeof hex, "%s%08llx", k > 0 ? "," : "", static_cast<unsigned long long>(ids[k]));
        line += hex;
      }
    }
    out << line << "\n";
  }
}

std::map<std::string, std::unique_ptr<EmbeddingTable>> load_tables(const std::string& dir, const std::string& optimizer,
                                                                   const std::vector<std::string>& names, size_t dim) {
  std::map<std::string, std::unique_ptr<EmbeddingTable>> tables;
  for (size_t t = 0; t < names.size(); ++t) {
    TableOptions o;
    o.name = names[t];
    o.id = static_cast<uint32_t>(t);
    o.dim = dim;
    EXPECT_TRUE(table_optimizer_of(optimizer, &o.optimizer.kind)) << "no table optimizer " << optimizer;
    auto table = std::make_unique<EmbeddingTable>(o);
    for (const auto& entry : std::filesystem::directory_iterator(dir + "/embeddings")) {
      const std::string file = entry.path().filename().string();
      if (file.rfind(names[t] + ".shard", 0) != 0) continue;
      std::string error;
      EXPECT_TRUE(table->load(read_file(entry.path().string()), 0, 1, SIZE_MAX, &error)) << file << ": " << error;
    }
    tables[names[t]] = std::move(table);
  }
  return tables;
}

}  // namespace pstrain::test
