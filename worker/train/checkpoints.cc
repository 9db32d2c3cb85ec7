#include "worker/train/checkpoints.h"

#include <sstream>
#include <utility>

#include "shared/checkpoint/checkpoint.h"
#include "shared/checkpoint/job_fingerprint.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "shared/util/log.h"
#include "worker/data/npy_format.h"

namespace pstrain {

ChiefCheckpoints::ChiefCheckpoints(const CheckpointOptions& options, bool chief, int shards,
                                   const Layout& layout, ModelDescription model, uint64_t total_steps,
                                   const std::atomic<bool>* stop_requested)
    : o_(options),
      shards_(shards),
      layout_(layout),
      model_(std::move(model)),
      total_steps_(total_steps),
      stop_requested_(stop_requested),
      enabled_(chief && !options.dir.empty()),
      last_(std::chrono::steady_clock::now()) {}

void ChiefCheckpoints::plan(uint64_t step, uint64_t* checkpoint, bool* stop) {
  *checkpoint = 0;
  *stop = false;
  if (!enabled_ || stopping_) return;
  const uint64_t v = step + 1;
  const bool by_steps = o_.every > 0 && v % static_cast<uint64_t>(o_.every) == 0;
  const bool by_time = o_.secs > 0 &&
                       std::chrono::steady_clock::now() - last_ >= std::chrono::duration<double>(o_.secs);
  const bool asked = stop_requested_ != nullptr && stop_requested_->load() && v < total_steps_;
  const bool last = v == total_steps_;  // a job that completes leaves its final state (issue 47)
  if (!by_steps && !by_time && !asked && !last) return;
  *checkpoint = v;
  *stop = asked;
  stopping_ = asked;
  if (asked) PSLOG(WARN) << "w0: stop requested: a final checkpoint of step " << v << ", then the job stops";
}

double ChiefCheckpoints::step_done(uint64_t marked, uint64_t durable) {
  if (marked != 0) pending_.push_back(marked);
  double secs = 0;
  while (!pending_.empty() && pending_.front() <= durable) {
    const uint64_t version = pending_.front();
    pending_.erase(pending_.begin());
    secs += completed(version);
  }
  return secs;
}

std::string ChiefCheckpoints::layout_text() const {
  std::ostringstream os;
  for (const TensorSpec& t : layout_.tensors()) {
    os << t.name << " " << t.offset << " ";
    for (size_t i = 0; i < t.shape.size(); ++i) os << (i ? "x" : "") << t.shape[i];
    os << "\n";
  }
  return os.str();
}

double ChiefCheckpoints::completed(uint64_t version) {
  const auto start = std::chrono::steady_clock::now();
  last_ = start;
  const std::string dir = checkpoint_version_dir(o_.dir, version);
  CheckpointManifest m;
  m.version = version;
  m.total = layout_.total();
  m.total_steps = total_steps_;
  m.layout = layout_text();
  m.job = job_fingerprint(o_.job);
  try {
    for (int s = 0; s < shards_; ++s) {
      CheckpointManifest::File f;
      f.name = shard_file_name(static_cast<uint32_t>(s), static_cast<uint32_t>(shards_));
      std::string error;  // read in pieces: a shard file may be larger than the chief's memory
      if (!file_crc_of(dir + "/" + f.name, &f.bytes, &f.crc, &error))
        throw Error(f.name + " is missing (" + error + ")");
      m.shards.push_back(f);
    }
    if (state_layout_ != nullptr) {  // the state as it is now: after the forward passes of steps < version
      for (const TensorSpec& t : state_layout_->tensors()) {
        write_file_durably(dir + "/" + t.name + ".npy", npy_bytes(t.shape, state_->data() + t.offset));
      }
    }
    if (!model_.spec.empty() || model_.script) {
      model_.training.steps = version;
      model_.training.source = "checkpoint " + dir;
      write_file_durably(dir + "/model.json", model_json_text(model_));  // before the manifest completes it
    }
    write_file_durably(dir + "/MANIFEST", encode_manifest(m));
  } catch (const Error& e) {
    const std::string why = "w0: checkpoint of step " + std::to_string(version) + " is incomplete: " + e.what();
    if (o_.errors == OnError::kWarn) {
      PSLOG(WARN) << why;
      return 0;
    }
    throw Error(why);
  }
  prune();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PSLOG(INFO) << "checkpoint of step " << version << " complete: " << dir << " (" << shards_ << " shard(s); "
              << "manifest in " << static_cast<int>(secs * 1e3) << " ms)";
  return secs;
}

// Keeps the newest --keep-checkpoints complete versions; removes older ones and those a write cut
// short left behind (prune_checkpoints).
void ChiefCheckpoints::prune() const {
  const std::string left = prune_checkpoints(o_.dir, o_.keep);
  if (!left.empty()) PSLOG(WARN) << "w0: cannot remove every old checkpoint: " << left;
}

void ChiefCheckpoints::check_resumed(uint64_t version) const {
  const std::string path = checkpoint_version_dir(o_.dir, version) + "/MANIFEST";
  std::string text, error;
  CheckpointManifest m;
  if (!read_whole_file(path, &text, &error) || !decode_manifest(text, &m, &error)) {
    throw Error("--resume: the shards resumed from version " + std::to_string(version) + " but " + path + ": " + error);
  }
  if (m.layout != layout_text()) {
    throw Error("--resume: checkpoint " + path + " is of another model (its variables differ from this job's)");
  }
  PSLOG(INFO) << "w0: resumed from checkpoint " << path;
}

}  // namespace pstrain
