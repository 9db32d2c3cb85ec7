// The metrics a PARAMS reports (docs/wire_protocol.md): a step's pushes summed into its pending
// sums, and applied steps summed into what a worker has not been sent yet (async, ssp). Header
// arithmetic only, the same for any store of parameters.
#pragma once

#include "shared/wire/protocol.h"

namespace pstrain {

// Adds a push's metrics and step times to the pending sums of its chunk (`pushes` before it).
void add_metrics(Header* sum, const Header& h, int pushes);

// Adds the metrics of applied updates to what a worker has not been sent yet (async, ssp).
void merge_metrics(Header* sum, const Header& m);

}  // namespace pstrain
