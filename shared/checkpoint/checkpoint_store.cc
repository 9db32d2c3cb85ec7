#include "shared/checkpoint/checkpoint_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "shared/checkpoint/job_fingerprint.h"
#include "shared/checkpoint/table_file.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "shared/util/log.h"
#include "shared/util/save_progress.h"

namespace pstrain {

bool CheckpointStore::write(const ShardCheckpoint& c, const std::vector<TableSource>& given) const {
  std::vector<TableSource> tables = given;
  if (tables.empty()) {
    for (const std::string& t : c.tables) {
      tables.push_back(TableSource{t.size(), [&t](ByteSink* out) { out->append(t.data(), t.size()); }});
    }
  }
  const std::string dir = checkpoint_version_dir(o_.dir, c.version);
  const std::string path = dir + "/" + shard_file_name(c.shard, c.num_shards);
  const uint64_t total = shard_checkpoint_size(c, tables);
  SaveProgress progress(who_ + ": saving checkpoint of version " + std::to_string(c.version) + " to " + path,
                        total,
                        /*quiet_start=*/total < kAnnouncedSaveBytes);
  try {
    for (const std::string& d : {o_.dir, dir}) {
      if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
        throw Error("cannot create '" + d + "': " + std::strerror(errno));
      }
    }
    FileWriter file(path, /*durable=*/true);
    progress.to(&file);
    write_shard_checkpoint(c, tables, &progress);
    file.commit();
  } catch (const Error& e) {
    const std::string why = who_ + ": checkpoint of version " + std::to_string(c.version) +
                            " failed: " + e.what() + "; earlier checkpoints are intact";
    if (o_.errors == OnError::kWarn) {
      PSLOG(WARN) << why << " (--checkpoint-errors warn: training goes on)";
      return false;
    }
    throw Error(why + " (--checkpoint-errors stop)");
  }
  PSLOG(INFO) << who_ << ": checkpoint of version " << c.version << " written to " << path << ": "
              << progress.done_text();
  return true;
}

bool CheckpointStore::resuming() const {
  if (!o_.resume) return false;
  if (!o_.resume_auto) return true;
  for (uint64_t v : checkpoint_versions(o_.dir)) {
    struct stat st {};
    if (::stat((checkpoint_version_dir(o_.dir, v) + "/MANIFEST").c_str(), &st) == 0) return true;
  }
  PSLOG(INFO) << who_ << ": --resume=auto: no complete checkpoint in '" << o_.dir << "': starting fresh";
  return false;
}

bool CheckpointStore::load(uint64_t total, uint64_t total_steps, const Slice& slice, size_t num_slots,
                             ShardCheckpoint* out, std::string* error) const {
  const auto versions = checkpoint_versions(o_.dir);
  std::string reasons;
  for (uint64_t v : versions) {
    const std::string why = try_version(v, total, total_steps, slice, num_slots, out);
    if (why.empty()) return true;
    PSLOG(WARN) << who_ << ": --resume: skipping checkpoint " << checkpoint_version_dir(o_.dir, v)
                << ": " << why;
    reasons += "; v" + std::to_string(v) + ": " + why;
  }
  *error = "--resume: no usable checkpoint in '" + o_.dir + "'" +
           (versions.empty() ? std::string(" (it holds none; --resume auto starts fresh where there is none)") : reasons);
  return false;
}

CheckpointStore::CheckpointStore(CheckpointOptions options, std::string who)
    : o_(std::move(options)), who_(std::move(who)) {
  const auto& keys = fingerprint_keys();
  for (const std::string& key : o_.resume_allow) {
    if (key != "all" && std::find(keys.begin(), keys.end(), key) == keys.end()) {
      std::string known;
      for (const std::string& k : keys) known += k + ", ";
      throw UsageError("--resume-allow: '" + key + "' is not a key of a job's fingerprint (" + known + "or all)");
    }
  }
}

std::string CheckpointStore::try_version(uint64_t v, uint64_t total, uint64_t total_steps, const Slice& slice,
                                           size_t num_slots, ShardCheckpoint* out) const {
  const std::string dir = checkpoint_version_dir(o_.dir, v);
  std::string text, error;
  if (!read_whole_file(dir + "/MANIFEST", &text, &error)) return "incomplete: MANIFEST " + error;
  CheckpointManifest m;
  if (!decode_manifest(text, &m, &error)) return error;
  if (m.version != v) return "the manifest is of version " + std::to_string(m.version);
  if (m.total != total) {
    return "of another model: " + std::to_string(m.total) + " parameters, this job has " + std::to_string(total);
  }
  if (v > total_steps) {
    return "at step " + std::to_string(v) + ", past this job's " + std::to_string(total_steps) + " steps";
  }
  std::string accepted;
  if (m.job.empty()) {
    PSLOG(WARN) << who_ << ": --resume: " << dir << " records no job fingerprint (written before pstrain recorded "
                << "one): only its model size and steps are checked";
  } else {
    const std::string differs =
        fingerprint_differences(m.job, job_fingerprint(o_.job), o_.resume_allow, &accepted);
    if (!differs.empty()) return "of another job: " + differs + " (--resume-allow KEY,... accepts a difference)";
  }
  // The saved shards are read in order; each contributes the part of `slice` it holds.
  ShardCheckpoint result;
  result.values.resize(slice.length);
  result.slots.assign(num_slots, std::vector<float>(slice.length));
  uint64_t next = 0;  // the saved shards must tile [0, total)
  for (const auto& f : m.shards) {
    // Read in pieces, its tables left where they lie (a shard file may hold gigabytes of them).
    ShardCheckpoint c;
    uint64_t bytes = 0;
    uint32_t crc = 0;
    if (!file_crc_of(dir + "/" + f.name, &bytes, &crc, &error)) return f.name + ": " + error;
    if (bytes != f.bytes) {
      return f.name + ": " + std::to_string(bytes) + " bytes, the manifest says " + std::to_string(f.bytes);
    }
    if (!read_shard_checkpoint_file(dir + "/" + f.name, bytes, crc, &c, &error)) return f.name + ": " + error;
    if (crc != f.crc) return f.name + ": not the file the manifest records (checksum differs)";
    if (c.version != v || c.total != total || c.offset != next) return f.name + ": does not belong to this checkpoint";
    const std::string optimizer = optimizer_kind_name(o_.job.optimizer.kind);
    if (c.optimizer != optimizer || c.slots.size() != num_slots) {
      return f.name + ": optimizer " + c.optimizer + ", this job uses " + optimizer;
    }
    // Each table's own checks (its CRC-32C, sorted IDs, finite values) too, here and not first
    // when the PS loads it: a damaged table passes this checkpoint over on every process alike,
    // where a refusal at the load would stop the job with the previous checkpoint unused.
    for (size_t t = 0; t < c.table_files.size(); ++t) {
      const TableInFile& table = c.table_files[t];
      ByteReader in(table.path, table.offset, table.bytes);
      if (!read_saved_table(in, SavedTableVisitor{}, &error)) {
        return f.name + ": embedding table " + std::to_string(t + 1) + " of " + std::to_string(c.table_files.size()) +
               " in it: " + error;
      }
    }
    next = c.offset + c.values.size();
    if (o_.keep_tables) {  // every shard's, loaded from its file by the PS (re-sliced there)
      for (TableInFile& t : c.table_files) result.table_files.push_back(std::move(t));
    }
    const uint64_t lo = std::max<uint64_t>(c.offset, slice.offset), hi = std::min<uint64_t>(next, slice.end());
    for (uint64_t i = lo; i < hi; ++i) {
      result.values[i - slice.offset] = c.values[i - c.offset];
      for (size_t k = 0; k < num_slots; ++k) result.slots[k][i - slice.offset] = c.slots[k][i - c.offset];
    }
  }
  if (next != total) return "its shards cover " + std::to_string(next) + " of " + std::to_string(total) + " parameters";
  result.shard = 0;
  result.num_shards = static_cast<uint32_t>(m.shards.size());
  result.version = v;
  result.total = total;
  result.total_steps = total_steps;
  result.offset = slice.offset;
  result.optimizer = optimizer_kind_name(o_.job.optimizer.kind);
  *out = std::move(result);
  if (!accepted.empty()) PSLOG(WARN) << who_ << ": --resume: accepted (--resume-allow): " << accepted;
  if (m.total_steps != total_steps) {
    PSLOG(WARN) << who_ << ": --resume: the job's length changes from " << m.total_steps << " to " << total_steps
                << " steps; the learning-rate schedule is recomputed over " << total_steps;
  }
  PSLOG(INFO) << who_ << ": --resume: from checkpoint " << dir << " (version " << v << ", " << m.shards.size()
              << " shard(s) saved)";
  return "";
}

}  // namespace pstrain
