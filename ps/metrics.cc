#include "ps/metrics.h"

#include <algorithm>

namespace pstrain {
namespace {

// The sums a PARAMS reports: the training step's samples, loss and correct predictions, the test
// set's evaluated shares, the step times.
void add_sums(Header* sum, const Header& h) {
  sum->samples += h.samples;
  sum->loss_sum += h.loss_sum;
  sum->correct += h.correct;
  sum->eval_samples += h.eval_samples;
  sum->eval_loss += h.eval_loss;
  sum->eval_correct += h.eval_correct;
  sum->times += h.times;
}

}  // namespace

// Adds the metrics of applied updates to what a worker has not been sent yet (async, ssp).
void merge_metrics(Header* sum, const Header& m) {
  add_sums(sum, m);
  if (m.slowest_us > sum->slowest_us) {
    sum->slowest = m.slowest;
    sum->slowest_us = m.slowest_us;
  }
  sum->stale_sum += m.stale_sum;
  sum->stale_count += m.stale_count;
  sum->stale_max = std::max(sum->stale_max, m.stale_max);
  sum->lead_max = std::max(sum->lead_max, m.lead_max);
  sum->dropped += m.dropped;
}

// Adds a push's metrics and step times to the pending sums of its chunk.
void add_metrics(Header* sum, const Header& h, int pushes) {
  if (pushes == 0) {
    *sum = Header{};
    sum->slowest = h.sender;
    sum->slowest_us = h.times.busy_us();
  } else if (h.times.busy_us() > sum->slowest_us) {
    sum->slowest = h.sender;
    sum->slowest_us = h.times.busy_us();
  }
  add_sums(sum, h);
}

}  // namespace pstrain
