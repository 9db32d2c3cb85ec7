#include "worker/train/batch_fit.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/report/progress.h"    // fixed
#include "worker/train/evaluation.h"  // kEvalBatch

namespace pstrain {
namespace {

constexpr double kMiB = 1048576.0;

// A MiB figure as given: 2 decimals, more for a limit below 1 MiB (0.015, not 0.01).
std::string mib_text(double mib) {
  std::ostringstream os;
  os << std::setprecision(mib < 1 ? 3 : 2) << (mib < 1 ? std::defaultfloat : std::fixed) << mib;
  return os.str();
}

std::string batchnorm_text(const Network& network) {
  for (const auto& l : network.layers()) {
    if (l->has_state()) return "layer " + std::to_string(l->index() + 1) + " '" + l->text() + "'";
  }
  return "";
}

// Global batch-norm statistics need every worker's whole batch of a step in one pass.
void check_batchnorm(const BatchFitRequest& r, const Network& network, const BatchChoice& batch) {
  if (!r.batchnorm_global || network.state_layout().tensors().empty()) return;
  const std::string layer = batchnorm_text(network);
  if (batch.micro_batches > 1) {
    throw UsageError("--batchnorm-stats global: gradient accumulation (" +
                     std::to_string(batch.micro_batches) +
                     " micro-batches a step) would normalise each micro-batch alone in " + layer +
                     ": drop --accum-steps (or --batch-size auto's split), or give --batchnorm-stats local");
  }
  if (r.backup_workers > 0) {
    throw UsageError("--batchnorm-stats global: " + layer +
                     " combines every worker's statistics each step, "
                     "which --backup-workers would wait for: give --batchnorm-stats local");
  }
}

}  // namespace

MemoryPlan plan_memory(const Backend& backend, bool recompute, const Network& network, int rows) {
  const size_t total = network.layout().total();
  const size_t input_dim = network.input().size();
  MemoryPlan plan;
  plan.params = plan.grads = total * sizeof(float) / kMiB;
  plan.activations = network.activation_floats(rows, recompute, backend) * sizeof(float) / kMiB;
  plan.input = backend.host_accessible() ? 0 : static_cast<double>(rows) * input_dim * sizeof(float) / kMiB;
  plan.workspace = (backend.bytes_allocated() + backend.batch_scratch_bytes(rows)) / kMiB;
  return plan;
}

BatchChoice fit_batch(const BatchFitRequest& r, const Backend& backend, const Network& network) {
  BatchChoice batch;
  if (r.automatic) {
    double limit = r.memory_limit_mib;
    if (limit == 0 && !backend.host_accessible()) limit = backend.free_device_bytes() / kMiB;
    const auto plan_for = [&](int rows) { return plan_memory(backend, r.recompute, network, rows); };
    batch = choose_batch(r.share, kEvalBatch, r.evaluates, limit, plan_for);
    PSLOG(INFO) << r.tag << "--batch-size auto: micro-batch " << batch.micro << " x " << batch.micro_batches
                << " = this worker's " << r.share << " samples a step (global batch " << r.global_batch
                << "), "
                << (limit > 0 ? "the largest whose plan fits " + mib_text(limit) + " MiB" : "no memory limit")
                << (r.evaluates ? "; evaluation in batches of " + std::to_string(batch.eval_batch) : "");
  } else {
    batch.micro = std::min(r.micro_batch, r.share);
    batch.micro_batches = (r.share + batch.micro - 1) / batch.micro;
    batch.eval_batch = kEvalBatch;
  }
  check_batchnorm(r, network, batch);
  if (batch.micro_batches > 1 && !r.automatic) {
    PSLOG(INFO) << r.tag << "gradient accumulation: " << batch.micro_batches << " micro-batches of up to "
                << batch.micro << " = " << r.share << " samples a step";
  }
  return batch;
}

void check_memory_limit(const MemoryPlan& plan, const Backend& backend, double limit_mib) {
  if (limit_mib > 0 && !backend.host_accessible() && plan.total() > limit_mib) {
    throw Error("the memory plan of " + fixed(plan.total(), 2) + " MiB exceeds --gpu-memory-limit " +
                fixed(limit_mib, 2) + " MiB (" + plan.text() +
                "); --batch-size auto picks a micro-batch that fits");
  }
}

}  // namespace pstrain
