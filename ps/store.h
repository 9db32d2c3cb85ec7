// The seam between a PS shard's dense service (ps/dense_service.h) and a store of parameters: the
// requests routed to it and what the service and the checkpoints ask of it. A store owns its
// values, their optimizer state and the barriers of the steps pushed to them, and checks a
// request completely before it changes anything (docs/errors.md). Its values come in parts,
// each with its own version and barrier, and a pull is answered part by part as each reaches
// the version it asks for. DenseStore (ps/dense_store.h) holds the shard's slice of the flat
// vector in chunks; the embedding tables are the sparse service's (ps/sparse_service.h), with
// their own messages. Single-threaded: the loop's thread (docs/threading.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/checkpoint/checkpoint.h"
#include "shared/checkpoint/checkpoint_store.h"
#include "shared/util/clock.h"
#include "shared/wire/protocol.h"
#include "shared/net/transport.h"

namespace pstrain {

// The oldest step of a part still waiting for pushes (for the stall report and WAITING).
struct Barrier {
  uint64_t step = 0;
  Clock::time_point since;
  std::vector<bool> pushed;  // by worker
};

// An INIT or PUSH from a registered worker (its header and frames already checked).
struct Update {
  const Header& header;
  int worker = 0;
  bool rejoined = false;                // a replacement registered for this worker (--allow-rejoin)
  Frame* payload = nullptr;             // frame 1, if any: the store may keep it (moved from)
  const float* segment = nullptr;       // the worker's gradient of the slice in its segment; null: none
};

// What an accepted update did.
struct Outcome {
  bool changed = false;   // it changed the store (not a repeat of what it holds, not dropped)
  bool advanced = false;  // part `part` was initialised or reached a new version
  size_t part = 0;
  bool every_part = false;  // --clip-norm: every part reached a new version (with `advanced`)
  bool norm_ready = false;  // --clip-norm, several shards: the step waits for its CLIP (NORM goes out)
};

class Store {
 public:
  virtual ~Store() = default;

  // False, with the reason in *error, for an update that is rejected; nothing is changed then.
  virtual bool init(const Update& update, Outcome* out, std::string* error) = 0;
  virtual bool push(const Update& update, Outcome* out, std::string* error) = 0;

  virtual size_t parts() const = 0;
  virtual uint64_t version() const = 0;  // of the least advanced part (0: none)
  // A PULL for version `want`: "" when it can be answered (now or later), else why not.
  virtual std::string check_pull(uint64_t want) const = 0;
  // Whether `part` can be sent to a pull for version `want`.
  virtual bool ready(size_t part, uint64_t want) const = 0;
  // The PARAMS header of `part` for that pull, by `worker` (-1: none); the caller sets the
  // request's fields, checkpoint and stop marks, and where the values go.
  virtual Header params_header(size_t part, uint64_t want, int worker) = 0;

  // Its part of a checkpoint (docs/checkpoints.md), at version(): fills the job's shape, the
  // slice, the values and the optimizer's state.
  virtual void save(ShardCheckpoint* out) const = 0;
  // --resume, before any update: every part at the newest usable checkpoint of `files`, which is
  // loaded into *loaded; what the store does not hold (the tables) is left there for the caller.
  virtual bool resume(const CheckpointStore& files, ShardCheckpoint* loaded, std::string* error) = 0;
};

}  // namespace pstrain
