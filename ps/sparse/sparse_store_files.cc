// SparseStore's tables on disk: into a checkpoint shard file (save, table_sources) and back
// (resume), --init-params' <name>.shard<s>-of-<S> files (start_from) and --save-params' (save,
// save_result) (docs/sparse.md, "Checkpoint format"; docs/checkpoints.md). Apart from the store's
// pushes, pulls and steps (sparse_store.cc): files and their errors, each naming the path.
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "ps/sparse/sparse_store.h"
#include "shared/util/byte_reader.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "shared/util/log.h"
#include "shared/util/save_progress.h"

namespace pstrain {

void SparseStore::save(std::vector<std::string>* tables) const {
  tables->clear();
  for (const TableOptions& t : options_.tables) {
    tables->emplace_back();
    tables_.table(t.id)->save(&tables->back());
  }
}

std::vector<TableSource> SparseStore::table_sources() const {
  std::vector<TableSource> sources;
  for (const TableOptions& t : options_.tables) {
    const EmbeddingTable* table = tables_.table(t.id);
    sources.push_back(TableSource{table->saved_size(), [table](ByteSink* out) { table->save(out); }});
  }
  return sources;
}

std::vector<TableSource> SparseStore::snapshot_sources() {
  std::vector<TableSource> sources;
  for (const TableOptions& t : options_.tables) sources.push_back(tables_.table(t.id)->snapshot_source());
  return sources;
}

bool SparseStore::resume(const std::vector<TableInFile>& tables, std::string* error) {
  if (tables.empty()) return (*error = "--resume: the checkpoint holds no embedding tables (a job without them)", false);
  for (const TableInFile& file : tables) {
    const std::string where = file.path + ", bytes " + std::to_string(file.offset) + " on";
    uint32_t id = 0;  // the table's id: after the magic and the format (docs/sparse.md, "Checkpoint format")
    ByteReader head(file.path, file.offset, file.bytes);
    if (file.bytes < 16 || !head.skip(12) || !head.read(&id, 4)) {
      *error = "--resume: " + where + ": an embedding table of " + std::to_string(file.bytes) + " bytes" +
               (head.error().empty() ? "" : ": " + head.error());
      return false;
    }
    ByteReader in(head, 0);
    if (!tables_.load(id, in, error)) {
      *error = "--resume: " + where + ": " + *error;
      return false;
    }
  }
  return true;
}

bool SparseStore::start_from(const std::string& dir, std::string* error) {
  const std::string from = dir + "/embeddings";
  for (const TableOptions& t : options_.tables) {
    // The table's files, <name>.shard<s>-of-<S>: one S, every s < S.
    const std::string prefix = t.name + ".shard";
    int of = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(from, ec)) {
      const std::string name = entry.path().filename().string();
      const size_t dash = name.find("-of-");
      if (name.rfind(prefix, 0) != 0 || dash == std::string::npos) continue;
      const std::string count = name.substr(dash + 4);
      if (count.empty() || count.size() > 6 || count.find_first_not_of("0123456789") != std::string::npos) continue;
      const int s = std::stoi(count);
      if (of != 0 && s != of) {
        return (*error = "--init-params: " + from + " holds table '" + t.name + "' in files of " + std::to_string(of) +
                         " and of " + std::to_string(s) + " shards; keep one save's",
                false);
      }
      of = s;
    }
    if (ec) return (*error = "--init-params: cannot read " + from + ": " + ec.message(), false);
    if (of < 1) {
      return (*error = "--init-params: " + from + " has no file of table '" + t.name + "' (" + prefix +
                       "<s>-of-<S>, as --save-params writes them): this job's tables are not that model's",
              false);
    }
    for (int s = 0; s < of; ++s) {
      const std::string path = from + "/" + prefix + std::to_string(s) + "-of-" + std::to_string(of);
      std::string why;
      std::error_code size_error;
      const uint64_t size = std::filesystem::file_size(path, size_error);
      if (size_error) return (*error = "--init-params: " + path + ": cannot open: " + size_error.message(), false);
      ByteReader in(path, 0, size);  // read in pieces: a table of gigabytes is not held beside its rows
      if (!in.error().empty() || !tables_.load(t.id, in, &why, /*new_job=*/true)) {
        return (*error = "--init-params: " + path + ": " + (in.error().empty() ? why : in.error()), false);
      }
    }
  }
  return true;
}

void SparseStore::save(const std::string& dir) const {
  const std::string to = dir + "/embeddings";
  std::error_code ec;
  std::filesystem::create_directories(to, ec);
  if (ec) throw Error("--save-params: cannot create " + to + ": " + ec.message());
  uint64_t total = 0;
  for (const TableOptions& t : options_.tables) total += tables_.table(t.id)->saved_size();
  SaveProgress progress("ps" + std::to_string(options_.index) + ": saving embedding tables to " + to, total);
  for (const TableOptions& t : options_.tables) {
    // Streamed from the tables to the file (no second copy of them: docs/sparse.md, "Memory").
    try {
      FileWriter file(to + "/" + t.name + ".shard" + std::to_string(options_.index) + "-of-" +
                          std::to_string(options_.num_ps),
                      false);
      progress.to(&file);
      tables_.table(t.id)->save(&progress);
      file.commit();
    } catch (const Error& e) {
      throw Error("--save-params: " + std::string(e.what()));
    }
  }
  PSLOG(INFO) << "ps" << options_.index << ": embedding tables saved to " << to << ": "
              << progress.done_text();
}

void SparseStore::save_result(bool stopped) const {
  if (options_.save_params.empty()) return;
  const std::string who = "ps" + std::to_string(options_.index);
  if (stopped) {
    PSLOG(INFO) << who << ": the job stopped before its end: its tables are not written to " << options_.save_params
                << " (its final checkpoint holds them)";
    return;
  }
  save(options_.save_params);
}

}  // namespace pstrain
