// When a sync step is whole across a shard's dense chunks and its embedding tables (docs/sparse.md,
// "Serving"): rules only, like ps/policy.h; the services keep the pushes and versions, and only
// the loop (ps/server.cc) asks the gate and then tells the services what to do.
//
//   sync with tables      a dense chunk goes to a pull only once the tables are at the pull's
//                         version too: a worker's rows and parameters are of one version, and a
//                         checkpoint holds both
//   --backup-workers b    the step is held until N - b workers pushed every chunk of the slice
//   with tables           and their SPARSE_PUSH (over any channels, in any order): those workers
//                         make the step for the chunks and the tables alike
//   otherwise             the dense chunks and the tables each apply a step on their own
#pragma once

#include <cstdint>
#include <vector>

#include "ps/policy.h"

namespace pstrain {

class StepGate {
 public:
  StepGate(const ConsistencyPolicy& policy, int num_workers, bool tables, int backup_workers)
      : num_workers_(num_workers),
        quorum_(policy.quorum()),
        tables_in_step_(tables && policy.mode() == Mode::kSync),
        holds_steps_(tables_in_step_ && backup_workers > 0) {}

  // Backup workers with tables: the dense store holds each step until the loop names its workers
  // (DenseStore's held steps), and so do the tables (SparseStore::apply_step).
  bool holds_steps() const { return holds_steps_; }
  // The newest version a dense chunk may be sent at, the tables being at `tables_version`.
  uint64_t dense_limit(uint64_t tables_version) const {
    return tables_in_step_ ? tables_version : UINT64_MAX;
  }
  // Held steps: given, by worker, who pushed every dense chunk of the step being collected and who
  // pushed its rows, whether the step is whole; then *workers names the ones that make it.
  bool whole(const std::vector<bool>& dense, const std::vector<bool>& sparse,
             std::vector<bool>* workers) const {
    if (!holds_steps_) return false;
    workers->assign(static_cast<size_t>(num_workers_), false);
    int n = 0;
    for (size_t w = 0; w < workers->size(); ++w) {
      (*workers)[w] = dense[w] && sparse[w];
      n += (*workers)[w] ? 1 : 0;
    }
    return n >= quorum_;
  }

 private:
  const int num_workers_;
  const int quorum_;
  const bool tables_in_step_;  // sync with tables: the dense chunks wait for the tables' version
  const bool holds_steps_;
};

}  // namespace pstrain
