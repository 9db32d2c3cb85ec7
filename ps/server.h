// The parameter server of one shard: holds its slice of the flat parameter vector and the
// optimizer state for it, validates every message, and serves workers until all said DONE.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ps/policy.h"
#include "shared/layout.h"
#include "shared/optimizer.h"
#include "shared/options.h"
#include "shared/protocol.h"
#include "shared/transport.h"

namespace pstrain {

class ParameterServer {
 public:
  // `endpoint` must outlive the server; the calling thread of serve() owns it.
  ParameterServer(const JobOptions& options, Endpoint& endpoint);
  // Serves until every worker has said DONE. Throws pstrain::Error on a fatal failure.
  void serve();

  uint64_t version() const { return version_; }
  const std::vector<float>& params() const { return params_; }
  uint64_t rejected() const { return rejected_; }  // messages answered with an error or dropped

 private:
  struct Parked {
    std::string route;
    uint64_t request_id;
    uint64_t want;
  };

  void handle(Message& msg);
  void on_hello(const Message& msg, const Header& h);
  bool on_init(const Message& msg, const Header& h, std::string* error);
  bool on_push(const Message& msg, const Header& h, std::string* error);
  bool on_pull(const Message& msg, const Header& h, std::string* error);
  void on_done(const Message& msg, const Header& h);
  bool check_slice(const Header& h, std::string* error) const;
  void apply_update();
  void answer_parked();
  void send_params(const std::string& route, uint64_t request_id);
  void reject(const std::string& route, uint64_t request_id, const std::string& why);
  void reply(const std::string& route, Header h, const float* payload);
  void report_stall();

  const JobOptions options_;
  Endpoint& endpoint_;
  std::unique_ptr<ConsistencyPolicy> policy_;
  std::unique_ptr<Optimizer> optimizer_;

  uint64_t total_ = 0;        // parameters of the model, learned from the first HELLO
  uint64_t total_steps_ = 0;  // updates of the job (HELLO's step field), for the lr schedule
  Slice slice_;
  bool initialized_ = false;
  uint64_t version_ = 0;
  std::vector<float> params_, accum_;
  uint64_t accum_samples_ = 0, accum_correct_ = 0;
  double accum_loss_ = 0;
  uint64_t last_samples_ = 0, last_correct_ = 0;  // metrics of the last applied step
  double last_loss_ = 0;

  std::map<std::string, int> worker_of_route_;
  std::vector<std::string> route_of_worker_;
  std::vector<bool> done_;
  int num_done_ = 0;
  std::vector<Parked> parked_;
  uint64_t rejected_ = 0;
  Clock::time_point waiting_since_;
  Clock::time_point last_stall_report_;
};

}  // namespace pstrain
