// The exchanges that talk to the PS shards (worker/exchange/exchange.h's interface): every PS
// mode's (sync, async, ssp: dense chunks, embedding rows, batch norm's statistics over ps0), and
// hybrid mode's, which all-reduces the dense parameters and keeps the tables on the PS.
#pragma once

#include <cstdint>
#include <memory>

#include "shared/net/transport.h"
#include "worker/exchange/exchange.h"

namespace pstrain {

std::unique_ptr<Exchange> make_ps_exchange(const ExchangeOptions& options, uint64_t total, Endpoint& servers,
                                           Replica& replica);
// Hybrid mode (--mode allreduce with --embedding-dim): `dense`, an all-reduce exchange, for the
// dense parameters; the PS shards `servers` for the embedding tables (row_source()).
std::unique_ptr<Exchange> make_hybrid_exchange(std::unique_ptr<Exchange> dense, const ExchangeOptions& options,
                                               uint64_t total, Endpoint& servers);

}  // namespace pstrain
