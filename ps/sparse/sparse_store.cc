#include "ps/sparse/sparse_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "shared/train/optimizer.h"
#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "shared/util/log.h"
#include "shared/util/save_progress.h"

namespace pstrain {
namespace {

SparseShardOptions shard_options(const SparseStoreOptions& o, size_t dense_bytes) {
  SparseShardOptions s;
  s.index = o.index;
  s.num_ps = o.num_ps;
  const size_t limit = o.max_shard_mib > 0 ? static_cast<size_t>(o.max_shard_mib) << 20 : 0;
  // 0 is "no bound": a slice that leaves nothing leaves one byte (the first row is refused).
  if (limit > 0) s.max_bytes = limit > dense_bytes ? limit - dense_bytes : 1;
  return s;
}

// What a push's parts held until its last one hold of these sections: the IDs and gradients, and
// the duplicate check's index (IdIndex: 16-byte slots at most half full, doubling: up to 64 bytes
// an ID).
size_t held_bytes(const std::vector<SparseSection>& sections) {
  constexpr size_t kIndexBytesPerId = 64;
  size_t bytes = 0;
  for (const SparseSection& s : sections) {
    bytes += s.ids.size() * (sizeof(uint64_t) + kIndexBytesPerId) + s.values.size() * sizeof(float);
  }
  return bytes;
}

std::vector<TablePush> pushes_of(const std::vector<SparseSection>& sections) {
  std::vector<TablePush> out;
  out.reserve(sections.size());
  for (const SparseSection& s : sections) {
    out.push_back(TablePush{s.table, s.ids.data(), s.ids.size(), s.values.data(), s.values.size()});
  }
  return out;
}

// " part 2 of 5" for a push in parts (else "").
std::string part_text(const Header& h) {
  return h.parts > 1 ? " part " + std::to_string(h.part) + " of " + std::to_string(h.parts) : "";
}

}  // namespace

SparseStore::SparseStore(SparseStoreOptions options, Mode mode, uint64_t start, size_t dense_bytes)
    : options_(std::move(options)),
      mode_(mode),
      tables_(shard_options(options_, dense_bytes), options_.tables),
      version_(start),
      pending_(static_cast<size_t>(options_.num_workers)),
      pushed_(static_cast<size_t>(options_.num_workers), false),
      partial_(static_cast<size_t>(options_.num_workers)),
      samples_(static_cast<size_t>(options_.num_workers), 0),
      backup_(mode == Mode::kSync && options_.backup_workers > 0) {}

bool SparseStore::push(int worker, bool rejoined, const Header& h, std::vector<SparseSection> sections,
                       bool* applied, std::string* error) {
  *applied = false;
  if (h.samples == 0) return (*error = "SPARSE_PUSH with zero samples", false);
  const uint64_t parts = std::max<uint64_t>(h.parts, 1);  // checked for every push, a late one's too
  if (parts > kMaxSparseParts) {
    return (*error = "SPARSE_PUSH of step " + std::to_string(h.step) + part_text(h) + ": more than " +
                     std::to_string(kMaxSparseParts) + " parts", false);
  }
  if (h.part >= parts) return (*error = "SPARSE_PUSH of step " + std::to_string(h.step) + part_text(h) + ": no such part", false);
  for (const SparseSection& s : sections) {
    if (s.ids.size() * s.dim != s.values.size()) return (*error = "SPARSE_PUSH: gradients do not match the IDs", false);
  }
  std::string why;
  if (!tables_.check_pushes(pushes_of(sections), &why)) {
    *error = "SPARSE_PUSH of step " + std::to_string(h.step) + part_text(h) + ": " + why;
    return false;
  }
  std::vector<SparseSection> whole;
  if (mode_ != Mode::kSync) {  // applied at once, as one update weighted by its samples
    if (!take_part(worker, false, h, std::move(sections), &whole, error)) return false;
    if (partial_[static_cast<size_t>(worker)].open) return true;
    *applied = apply(version_, {whole}, 0, error);
    return *applied;
  }
  const size_t w = static_cast<size_t>(worker);
  if (rejoined && h.step + 1 == version_) return true;  // a step its predecessor pushed, applied: a repeat
  if (backup_ && h.step < version_) {  // its step was applied without it, as its dense pushes were
    if (h.part == 0) ++dropped_;       // a push is counted once (a part of one under way: at apply_step)
    return true;
  }
  if (h.step != version_) {
    *error = "SPARSE_PUSH of step " + std::to_string(h.step) + part_text(h) + ", but the tables are collecting step " +
             std::to_string(version_);
    return false;
  }
  if (pushed_[w] && !rejoined) {
    return (*error = "SPARSE_PUSH of step " + std::to_string(h.step) + part_text(h) + " twice", false);
  }
  // A replacement starts its push over: its predecessor's parts are dropped at its first.
  if (!take_part(worker, rejoined, h, std::move(sections), &whole, error)) return false;
  if (partial_[w].open) return true;
  if (pushed_[w]) {  // the predecessor's push of this step, again (rejoined)
    pending_[w] = std::move(whole);
    return true;
  }
  if (pushes_ == 0) since_ = Clock::now();
  pending_[w] = std::move(whole);
  pushed_[w] = true;
  pending_samples_ += h.samples;
  samples_[w] = h.samples;
  if (++pushes_ < options_.num_workers || backup_) return true;
  if (!apply(version_, pending_, static_cast<double>(pending_samples_), error)) throw Error(*error);
  clear_step();
  *applied = true;
  return true;
}

bool SparseStore::check_part(const Partial& p, const Header& h, const std::vector<SparseSection>& sections,
                             std::string* error) const {
  const uint64_t parts = std::max<uint64_t>(h.parts, 1);
  const std::string what = "SPARSE_PUSH of step " + std::to_string(h.step) + part_text(h) + ": ";
  if (!p.open && h.part != 0) return (*error = what + "its part 0 has not come", false);
  if (p.open) {
    const std::string have = std::to_string(p.next) + " of " + std::to_string(p.parts) + " parts";
    if (h.step != p.step) {
      return (*error = what + "the push of step " + std::to_string(p.step) + " is not complete (" + have + " came)", false);
    }
    if (parts != p.parts) return (*error = what + "its earlier parts said " + std::to_string(p.parts), false);
    if (h.part < p.next) return (*error = what + "that part came already", false);
    if (h.part > p.next) return (*error = what + "part " + std::to_string(p.next) + " has not come", false);
    if (h.samples != p.samples) {
      return (*error = what + "its earlier parts said " + std::to_string(p.samples) + " samples", false);
    }
  }
  if (p.bytes + held_bytes(sections) > kMaxSparseBodyBytes) {
    return (*error = what + "its parts' IDs and gradients pass " + std::to_string(kMaxSparseBodyBytes) +
                     " bytes, a whole push's bound", false);
  }
  for (const SparseSection& s : sections) {
    const auto seen = p.ids.find(s.table);
    if (seen == p.ids.end()) continue;
    for (uint64_t id : s.ids) {
      if (!seen->second.contains(id)) continue;
      *error = what + "ID " + std::to_string(id) + " of table " + std::to_string(s.table) +
               " came in an earlier part (IDs must be unique)";
      return false;
    }
  }
  return true;
}

bool SparseStore::take_part(int worker, bool restart, const Header& h, std::vector<SparseSection> sections,
                            std::vector<SparseSection>* whole, std::string* error) {
  Partial& p = partial_[static_cast<size_t>(worker)];
  const uint64_t parts = std::max<uint64_t>(h.parts, 1);
  if (parts == 1 && h.part == 0 && (!p.open || restart)) {  // a whole push (the common case): no copy
    p = Partial{};
    *whole = std::move(sections);
    return true;
  }
  if (!check_part(restart && h.part == 0 ? Partial{} : p, h, sections, error)) return false;
  if (restart && h.part == 0) p = Partial{};
  if (!p.open) p = Partial{true, h.step, parts, 0, h.samples, 0, {}, {}};
  p.bytes += held_bytes(sections);
  for (const SparseSection& s : sections) {
    IdIndex& seen = p.ids[s.table];
    seen.reserve(seen.size() + s.ids.size());
    for (uint64_t id : s.ids) seen.find_or_insert(id, 0);
  }
  // The sections passed check_pushes: each table's dim is the table's, as in the earlier parts.
  std::string why;
  PSTRAIN_CHECK(append_sparse_part(&p.sections, std::move(sections), &why));
  if (++p.next < p.parts) return true;
  ++parted_pushes_;
  parts_ += p.parts;
  *whole = std::move(p.sections);
  p = Partial{};
  return true;
}

void SparseStore::apply_step(const std::vector<bool>& workers, uint64_t samples) {
  PSTRAIN_CHECK(backup_);
  uint64_t pushed_samples = 0;
  for (size_t w = 0; w < pending_.size(); ++w) {
    if (workers[w]) {
      PSTRAIN_CHECK(pushed_[w]);
      pushed_samples += samples_[w];
      continue;
    }
    // A push whose parts had begun to come is dropped too; its later parts are late ones.
    if (pushed_[w] || (partial_[w].open && partial_[w].step == version_)) ++dropped_;
    if (partial_[w].open && partial_[w].step <= version_) partial_[w] = Partial{};
    pending_[w].clear();
  }
  if (samples == 0) samples = pushed_samples;
  std::string error;
  if (!apply(version_, pending_, static_cast<double>(samples), &error)) throw Error(error);
  clear_step();
}

void SparseStore::clear_step() {
  for (auto& p : pending_) p.clear();
  pushed_.assign(pushed_.size(), false);
  samples_.assign(samples_.size(), 0);
  pending_samples_ = 0;
  pushes_ = 0;
}

// One update: sync's step over `samples` samples (a mean gradient), or async's push (samples 0:
// weighted as the dense store weighs it, by the mean share G / N).
bool SparseStore::apply(uint64_t step, const std::vector<std::vector<SparseSection>>& by_worker, double samples,
                        std::string* error) {
  const uint64_t n = static_cast<uint64_t>(options_.num_workers);
  const bool async = mode_ != Mode::kSync;
  SparseStep s;
  s.step = step;
  s.grad_scale = async ? static_cast<float>(n) / static_cast<float>(options_.global_batch)
                       : 1.0f / static_cast<float>(samples);
  OptimizerOptions o = options_.optimizer;  // the tables' rate on the dense optimizer's schedule
  o.lr = options_.table_lr;
  s.lr = scheduled_lr(o, step, async ? options_.total_steps * n : options_.total_steps);
  std::vector<std::vector<TablePush>> pushes;
  for (const auto& sections : by_worker) pushes.push_back(pushes_of(sections));
  std::map<std::pair<uint32_t, uint64_t>, std::vector<float>> before;
  if (options_.allow_rejoin && !async) {  // what a replacement redoing this step must read
    for (const auto& sections : by_worker) {
      for (const SparseSection& section : sections) {
        for (uint64_t id : section.ids) {
          auto [it, added] = before.try_emplace({section.table, id});
          if (!added) continue;
          it->second.resize(section.dim);
          tables_.lookup_checked(section.table, &id, 1, it->second.data());  // the push was checked
        }
      }
    }
  }
  // Each push passed check_pushes when it arrived (push()).
  if (!tables_.apply_checked_step(s, pushes, error)) return false;
  previous_ = std::move(before);
  ++version_;
  return true;
}

std::string SparseStore::check_pull(uint64_t want) const {
  if (mode_ == Mode::kSync && want > version_ + 1) {
    return "SPARSE_PULL of version " + std::to_string(want) + ", but the tables are at " + std::to_string(version_);
  }
  return "";
}

uint64_t SparseStore::next_step_of(int worker, bool rejoined) const {
  if (mode_ != Mode::kSync || !rejoined) return version_;
  return pushed_[static_cast<size_t>(worker)] ? version_ + 1 : version_;
}

bool SparseStore::rows(const std::vector<SparseSection>& request, uint64_t want, std::vector<SparseSection>* out,
                       std::string* error) const {
  if (!check_rows(request, error)) return false;
  checked_rows(request, want, out);
  return true;
}

size_t SparseStore::max_part_bytes() const {
  return std::min<size_t>(static_cast<size_t>(options_.chunk_kib) * 1024, kMaxSparseBodyBytes);
}

std::string SparseStore::check_pull_body(const Header& h, size_t bytes) const {
  // A worker's part holds at most a chunk's bytes of IDs (8 bytes each, or their rows' 4 x dim
  // where that is more), and a part of one ID 32 bytes: under any chunk.
  if (bytes <= max_part_bytes()) return "";
  return "SPARSE_PULL" + part_text(h) + ": a body of " + std::to_string(bytes) +
         " bytes, more than a part's " + std::to_string(max_part_bytes()) + " (the job's chunk, --chunk-kib)";
}

bool SparseStore::check_rows(const std::vector<SparseSection>& request, std::string* error) const {
  // The answer's size from the counts and the tables' dims, before anything is looked up or
  // allocated: a body's head, and each section's head and rows (an unknown table is refused below).
  uint64_t bytes = 8, rows = 0;
  for (const SparseSection& r : request) {
    const EmbeddingTable* table = tables_.table(r.table);
    bytes += 16 + (table != nullptr ? r.ids.size() * table->dim() * sizeof(float) : 0);
    rows += r.ids.size();
  }
  if (bytes > max_part_bytes() && rows > 1) {
    *error = "SPARSE_PULL: an answer of " + std::to_string(rows) + " rows would take " +
             std::to_string(bytes) + " bytes, more than a part's " + std::to_string(max_part_bytes()) +
             " (the job's chunk, --chunk-kib): cut the pull into parts";
    return false;
  }
  for (const SparseSection& r : request) {
    if (!tables_.check_pull(r.table, r.ids.data(), r.ids.size(), error)) {
      *error = "SPARSE_PULL: " + *error;
      return false;
    }
  }
  return true;
}

void SparseStore::checked_rows(const std::vector<SparseSection>& request, uint64_t want,
                               std::vector<SparseSection>* out) const {
  const bool before = options_.allow_rejoin && mode_ == Mode::kSync && want + 1 == version_;
  out->clear();
  out->reserve(request.size());
  for (const SparseSection& r : request) {
    SparseSection rows;
    rows.table = r.table;
    rows.dim = static_cast<uint32_t>(tables_.table(r.table)->dim());
    rows.values.resize(r.ids.size() * rows.dim);
    tables_.lookup_checked(r.table, r.ids.data(), r.ids.size(), rows.values.data());
    for (size_t i = 0; before && i < r.ids.size(); ++i) {  // the rows the last step changed, before it
      const auto it = previous_.find({r.table, r.ids[i]});
      if (it != previous_.end()) std::copy(it->second.begin(), it->second.end(), rows.values.begin() + i * rows.dim);
    }
    out->push_back(std::move(rows));
  }
}

bool SparseStore::barrier(uint64_t* step, Clock::time_point* since, std::vector<bool>* pushed) const {
  if (mode_ != Mode::kSync || pushes_ == 0) return false;
  *step = version_;
  *since = since_;
  *pushed = pushed_;
  return true;
}

std::string SparseStore::counters_text() const {
  return "; tables at version " + std::to_string(version_) + ": " + tables_.counters_text() +
         (backup_ ? "; late sparse pushes dropped: " + std::to_string(dropped_) : "") +
         (parted_pushes_ > 0 ? "; sparse pushes in parts: " + std::to_string(parted_pushes_) + " (" +
                                   std::to_string(parts_) + " parts)"
                             : "");
}

}  // namespace pstrain
