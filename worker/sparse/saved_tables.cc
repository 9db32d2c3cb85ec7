#include "worker/sparse/saved_tables.h"

#include <algorithm>
#include <filesystem>
#include <unordered_map>
#include <vector>

#include "shared/checkpoint/table_file.h"
#include "shared/train/row_init.h"
#include "shared/train/sparse_ids.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "shared/util/log.h"

namespace pstrain {
namespace {

struct Table {
  std::unordered_map<uint64_t, size_t> index;  // key -> its row in weights
  std::vector<float> weights;                  // rows x dim
};

class SavedTables final : public RowSource {
 public:
  SavedTables(const EmbeddingSetup& setup, std::vector<Table> tables) : setup_(setup), tables_(std::move(tables)) {
    parse_row_init(setup.init, &init_.kind);
  }

  uint64_t request_rows(uint64_t, const std::vector<const std::vector<SparseSection>*>& requests) override {
    PSTRAIN_CHECK_EQ(requests.size(), size_t{1});
    answer_.assign(1, {});
    for (const SparseSection& request : *requests[0]) answer_[0].push_back(rows_of(request));
    return ++ticket_;
  }

  std::vector<std::vector<SparseSection>> receive_rows(uint64_t ticket) override {
    PSTRAIN_CHECK_EQ(ticket, ticket_);
    return std::move(answer_);
  }

  void push_rows(uint64_t, uint64_t, const std::vector<std::vector<SparseSection>>&) override {
    PSTRAIN_CHECK(!"saved tables are read-only: --evaluate and --predict push nothing");
  }

 private:
  SparseSection rows_of(const SparseSection& request) const {
    PSTRAIN_CHECK(request.table < tables_.size());
    const Table& table = tables_[request.table];
    const size_t dim = setup_.dim;
    SparseSection out;
    out.table = request.table;
    out.dim = setup_.dim;
    out.values.assign(request.ids.size() * dim, 0.0f);
    for (size_t i = 0; i < request.ids.size(); ++i) {
      float* row = &out.values[i * dim];
      const auto it = table.index.find(request.ids[i]);
      if (it != table.index.end()) {
        std::copy_n(&table.weights[it->second * dim], dim, row);
      } else if (setup_.min_count <= 1) {  // min_count > 1: not admitted, zeros
        init_row(init_, setup_.seed, request.table, request.ids[i], dim, row);
      }
    }
    return out;
  }

  const EmbeddingSetup setup_;
  const std::vector<Table> tables_;
  RowInit init_;
  std::vector<std::vector<SparseSection>> answer_;
  uint64_t ticket_ = 0;
};

// Shard s's file of table t into *table, checked against the setup.
void read_shard_file(const std::string& path, const EmbeddingSetup& setup, uint32_t t, int s, Table* table) {
  std::string bytes, error;
  if (!read_whole_file(path, &bytes, &error)) {
    throw Error(path + ": cannot read it: " + error + " (the model's tables were saved by " +
                std::to_string(setup.num_ps) + " PS shard(s), a file per table and shard)");
  }
  SavedTable saved;
  if (!read_saved_table(bytes, &saved, &error, SavedTableParts::kWeights)) throw Error(path + ": " + error);
  const SavedTableHeader& h = saved.header;
  const std::string& name = setup.tables[t];
  if (h.name != name || h.table != t) {
    throw Error(path + ": it holds table '" + h.name + "' (" + std::to_string(h.table) + "), not '" + name + "' (" +
                std::to_string(t) + ")");
  }
  if (h.dim != setup.dim) {
    throw Error(path + ": its rows have dim " + std::to_string(h.dim) + ", the model's " + std::to_string(setup.dim) +
                " (model.json)");
  }
  if (!setup.optimizer.empty() && h.optimizer != setup.optimizer) {
    throw Error(path + ": its optimizer is " + h.optimizer + ", the model's " + setup.optimizer + " (model.json)");
  }
  for (const SavedRow& row : saved.rows) {
    const uint64_t id = row.id;
    if (shard_of(id, setup.num_ps) != s) {
      throw Error(path + ": ID " + std::to_string(id) + " is not shard " + std::to_string(s) + "'s of " +
                  std::to_string(setup.num_ps));
    }
    table->index.emplace(id, table->index.size());
  }
  table->weights.insert(table->weights.end(), saved.values.begin(), saved.values.end());
}

}  // namespace

std::unique_ptr<RowSource> open_saved_tables(const std::string& dir, const EmbeddingSetup& setup) {
  PSTRAIN_CHECK(setup.dim > 0);
  const std::string from = dir + "/embeddings";
  std::error_code ec;
  if (!std::filesystem::is_directory(from, ec)) {
    throw Error(dir + "/model.json describes embedding tables, but there is no " + from +
                "/ (the PS shards write it at the end of a job with --save-params)");
  }
  std::vector<Table> tables(setup.tables.size());
  size_t rows = 0;
  for (uint32_t t = 0; t < tables.size(); ++t) {
    for (int s = 0; s < setup.num_ps; ++s) {
      read_shard_file(from + "/" + setup.tables[t] + ".shard" + std::to_string(s) + "-of-" +
                          std::to_string(setup.num_ps),
                      setup, t, s, &tables[t]);
    }
    rows += tables[t].index.size();
  }
  PSLOG(INFO) << "embedding tables from " << from << ": " << tables.size() << " table(s) of dim " << setup.dim
              << " in " << setup.num_ps << " shard file(s) each, " << rows << " rows; other IDs read as "
              << (setup.min_count > 1 ? std::string("zeros (not admitted)") : "their initial rows (" + setup.init + ")");
  return std::make_unique<SavedTables>(setup, std::move(tables));
}

}  // namespace pstrain
