// How a PS shard's services answer (ps/dense_service.h, ps/sparse_service.h,
// ps/stats_service.h): through the loop (ps/server.h), which owns the endpoint, stamps every reply
// with the shard as its sender and counts the bytes that go out. A refusal is not sent here: a
// service returns it, and the loop sends the ERROR.
#pragma once

#include <cstdint>
#include <string>

#include "shared/net/frame.h"
#include "shared/wire/protocol.h"

namespace pstrain {

class Replier {
 public:
  // Message frame bytes the shard received and handed to the endpoint so far (PARAMS' b_in, b_out).
  struct Traffic {
    uint64_t in = 0, out = 0;
  };

  virtual ~Replier() = default;
  // `h` (and `payload`, moved from, if not null) to the peer of `route`: one try, no waiting (a
  // peer whose queue is full is not reading); a reply that cannot go is logged and dropped.
  virtual void reply(const std::string& route, Header h, Frame* payload) = 0;
  virtual Traffic traffic() const = 0;
};

}  // namespace pstrain
