// The ring collective (docs/collective.md): one rank's place in the ring, the link to its
// neighbours and what every operation shares: sequence numbers, validating a neighbour's
// messages, deadlines and wait reports, ABORT on failure (and staying failed). Its operations are
// the link check, the ring broadcast and the all-reduce (allreduce_pass.h). Internal to
// worker/collective/: callers get a Collective from make_ring_collective (collective.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/net/transport.h"
#include "shared/util/error.h"
#include "worker/collective/collective.h"
#include "worker/collective/ring_loans.h"
#include "worker/collective/ring_rendezvous.h"
#include "worker/collective/ring_wire.h"

namespace pstrain {

// How often a rank waiting for a neighbour says so.
constexpr double kRingWaitReportSeconds = 5;

class RingCollective final : public Collective {
 public:
  RingCollective(const RingOptions& options, std::unique_ptr<Link> link, RingRendezvous rendezvous);

  int rank() const override { return options_.rank; }
  int world() const override { return options_.world; }
  void allreduce_sum(float* data, size_t n, double* scalars, size_t k) override;
  std::string broadcast(const std::string& blob) override;

  // Sends LINK_CHECK to the right and waits for the left's: the ring is closed and every rank
  // talks to the neighbour it expects.
  void check_link();

  // Helpers the pass uses.
  Link& link() { return *link_; }
  Loans& loans() { return loans_; }
  const RingOptions& options() const { return options_; }
  int left() const { return left_; }
  std::string left_neighbour() const { return neighbour(left_, "left"); }
  std::string right_neighbour() const { return neighbour(right_, "right"); }
  const std::string& operation() const { return operation_; }
  RingHeader header(RingOp op) const;

  // Validates a message from the left against `want` and its frames against the sizes `want`
  // implies. An ABORT instead fails this rank with the reason it carries.
  void expect(const std::vector<Frame>& frames, const RingHeader& want, size_t payload_bytes,
              size_t scalar_bytes);

 private:
  [[noreturn]] void aborted(const std::vector<Frame>& frames, const RingHeader& h);
  std::string neighbour(int r, const char* side) const;
  void begin(const char* what);
  template <typename Fn>
  void guarded(Fn&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      on_failure(e.what());
      throw;
    }
  }
  std::string run_broadcast(const std::string& blob);
  void send_right(std::vector<Frame>* frames);
  void receive_left(std::vector<Frame>* frames, const std::string& what);
  // Tells the right neighbour why (ABORT, which it forwards), then makes sure ZeroMQ no longer
  // reads the caller's buffer: wait briefly for the queue to drain, else drop it.
  void on_failure(const std::string& what);

  RingOptions options_;
  std::unique_ptr<Link> link_;
  Loans loans_;
  RingRendezvous rendezvous_;
  int left_, right_;
  uint64_t seq_ = 0;
  std::string operation_;
  std::string failed_;  // why the collective failed; empty while it works
  std::string cause_;   // root cause received in an ABORT, forwarded unchanged
};

}  // namespace pstrain
