// The `embedding` entry of the --model grammar (docs/models.md, "Embedding tables"): a CTR
// model's tables written in the model itself, `embedding 8 tables=per-field, dense 256, relu,
// dense 1`, rather than with --embedding-dim and --embedding-tables. The entry is taken out of the
// layer list here, when the options are parsed, so every process of the job (the PS shards hold
// the tables and never read the layers) and everything after parsing (fingerprints, model.json)
// sees one form: the --embedding-* options and a list of dense layers. The entry:
//   embedding D [tables=shared|per-field] [pool=sum|mean]
#pragma once

#include <string>

#include "shared/config/options.h"

namespace pstrain {

// If o->model's first item is an `embedding` entry, removes it from o->model and sets
// o->embedding_dim, o->embedding_tables and o->embedding_pool from it. `given` says which flags the command line or
// config file gave: a flag given with another value than the entry's is a contradiction. Throws
// pstrain::UsageError (exit 2) naming the item for a malformed entry (no dim, a dim outside
// [1, 4096], an unknown key or value), an `embedding` item that is not the first, an entry with no
// layers after it, or a contradicting flag.
void take_model_embedding(JobOptions* o, const GivenOptions& given);

}  // namespace pstrain
