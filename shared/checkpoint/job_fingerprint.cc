#include "shared/checkpoint/job_fingerprint.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace pstrain {
namespace {

std::string number(double v) { return fingerprint_number(v); }

// The embeddings line's lr ("... optimizer adagrad lr 0.05 min-count ..."), and the line without it.
bool split_lr(const std::string& line, std::string* lr, std::string* rest) {
  const size_t at = line.find(" lr ");
  if (at == std::string::npos) return false;
  const size_t from = at + 4, to = std::min(line.find(' ', from), line.size());
  *lr = line.substr(from, to - from);
  *rest = line.substr(0, from) + line.substr(to);
  return true;
}

// A manifest of before the exact lr recorded the embeddings line's lr as std::to_string wrote it
// (6 decimals). It matches `ours` where everything else is equal and our lr is exactly the number
// it wrote: 0 ("0.000000", --lr's), 0.05; not 5e-7, which it wrote as "0.000000" too. *legacy:
// `saved` is of that form and differs from `ours` in the lr alone (the difference's text says so).
bool legacy_embeddings_match(const std::string& saved, const std::string& ours, bool* legacy) {
  std::string was, was_rest, mine, mine_rest;
  *legacy = false;
  if (!split_lr(saved, &was, &was_rest) || !split_lr(ours, &mine, &mine_rest)) return false;
  const size_t dot = was.find('.');
  *legacy = was_rest == mine_rest && dot != std::string::npos && was.size() == dot + 7 &&
            was.find_first_not_of("-0123456789.") == std::string::npos;
  if (!*legacy) return false;
  const double lr = std::strtod(mine.c_str(), nullptr);
  return std::to_string(lr) == was && std::strtod(was.c_str(), nullptr) == lr;
}

std::string joined(const std::vector<int>& values) {
  std::string text;
  for (int v : values) text += (text.empty() ? "" : ",") + std::to_string(v);
  return text;
}

void add_sep(std::string* to, const std::string& text) {
  if (!to->empty()) *to += "; ";
  *to += text;
}

}  // namespace

std::string fingerprint_number(double v) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

const std::vector<std::string>& fingerprint_keys() {
  static const std::vector<std::string> keys = {"mode", "model", "optimizer", "lr", "lr-schedule", "warmup-steps",
                                                "lr-decay-steps", "lr-decay-rate", "lr-cycle-mult", "label-smoothing", "clip-norm", "loss",
                                                "embeddings", "augment", "momentum",
                                                "beta1", "beta2", "epsilon", "weight-decay", "seed", "shuffle",
                                                "data", "num-workers", "worker-batches"};
  return keys;
}

Fingerprint job_fingerprint(const JobIdentity& o) {
  const OptimizerOptions& opt = o.optimizer;
  std::string mode = mode_name(o.mode);
  if (o.mode == Mode::kSsp) mode += " staleness " + std::to_string(o.staleness);
  if (o.backup_workers > 0) mode += " backup-workers " + std::to_string(o.backup_workers);
  Fingerprint f = {
      {"mode", mode},
      {"model", o.model.empty() ? "mlp hidden " + joined(o.hidden) : o.model},
      {"optimizer", optimizer_kind_name(opt.kind)},
      {"lr", number(opt.lr)},
      {"lr-schedule", lr_schedule_name(opt.schedule)},
  };
  // Written only where they matter, so that checkpoints of earlier versions (without them) match.
  if (opt.warmup_steps > 0) f.emplace_back("warmup-steps", std::to_string(opt.warmup_steps));
  if (opt.schedule == LrSchedule::kStep || opt.schedule == LrSchedule::kCosineRestarts) {
    f.emplace_back("lr-decay-steps", std::to_string(opt.decay_steps));
  }
  if (opt.schedule == LrSchedule::kStep) f.emplace_back("lr-decay-rate", number(opt.decay_rate));
  if (opt.schedule == LrSchedule::kCosineRestarts) f.emplace_back("lr-cycle-mult", number(opt.cycle_mult));
  if (o.label_smoothing > 0) f.emplace_back("label-smoothing", number(o.label_smoothing));
  if (opt.clip_norm > 0) f.emplace_back("clip-norm", number(opt.clip_norm));
  if (!o.loss.empty()) f.emplace_back("loss", o.loss);
  if (!o.embeddings.empty()) f.emplace_back("embeddings", o.embeddings);
  if (!o.augment.empty()) f.emplace_back("augment", o.augment);
  if (opt.kind == OptimizerKind::kMomentum) f.emplace_back("momentum", number(opt.momentum));
  if (opt.kind == OptimizerKind::kAdam || opt.kind == OptimizerKind::kAdamW) {
    f.emplace_back("beta1", number(opt.beta1));
    f.emplace_back("beta2", number(opt.beta2));
    f.emplace_back("epsilon", number(opt.epsilon));
  }
  f.emplace_back("weight-decay", number(opt.weight_decay));
  f.emplace_back("seed", std::to_string(o.seed));
  f.emplace_back("shuffle", o.shuffle ? "true" : "false");
  f.emplace_back("data", !o.train_data.empty() ? o.train_data : o.data_dir.empty() ? "(default)" : o.data_dir);
  f.emplace_back("num-workers", std::to_string(o.num_workers));
  f.emplace_back("worker-batches", joined(o.worker_batches));
  return f;
}

std::string fingerprint_differences(const Fingerprint& saved, const Fingerprint& ours,
                                    const std::vector<std::string>& allowed, std::string* accepted) {
  const std::map<std::string, std::string> theirs(saved.begin(), saved.end());
  const bool all = std::find(allowed.begin(), allowed.end(), "all") != allowed.end();
  std::string refused;
  for (const auto& [key, value] : ours) {
    const auto it = theirs.find(key);
    const std::string was = it == theirs.end() ? "(not recorded)" : it->second;
    if (was == value) continue;
    bool legacy = false;
    if (key == "embeddings" && legacy_embeddings_match(was, value, &legacy)) continue;
    const std::string text = key + " " + was + " (this job: " + value +
                             (legacy ? "; that checkpoint recorded the lr to 6 decimals only" : "") + ")";
    const bool ok = all || std::find(allowed.begin(), allowed.end(), key) != allowed.end();
    add_sep(ok ? accepted : &refused, text);
  }
  // A key the checkpoint has and this job does not (a warm-up this job lacks, say).
  const std::map<std::string, std::string> mine(ours.begin(), ours.end());
  for (const auto& [key, was] : saved) {
    if (mine.count(key) != 0) continue;
    const std::string text = key + " " + was + " (this job: none)";
    const bool ok = all || std::find(allowed.begin(), allowed.end(), key) != allowed.end();
    add_sep(ok ? accepted : &refused, text);
  }
  return refused;
}

}  // namespace pstrain
