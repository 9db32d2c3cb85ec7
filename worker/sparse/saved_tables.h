// The rows of a CTR model's tables as --save-params saved them (DIR/embeddings/, docs/sparse.md),
// behind the RowSource seam that the PS client implements in training: --evaluate and --predict
// build the model's input from them with no PS. An ID without a saved row reads as the PS would
// read it: its initialiser's row, or zeros while not admitted (min_count > 1).
#pragma once

#include <memory>
#include <string>

#include "worker/sparse/embedding_setup.h"
#include "worker/sparse/row_source.h"

namespace pstrain {

// Reads every table of `setup` from DIR/embeddings/<table>.shard<s>-of-<setup.num_ps>, all shards'
// files into one source that answers as one shard (a CtrInput of num_ps 1). Read-only: it refuses
// pushes. Throws pstrain::Error naming the file for a missing, damaged or mismatched one (another
// table, dim or optimizer than model.json's, an ID its shard does not hold).
std::unique_ptr<RowSource> open_saved_tables(const std::string& dir, const EmbeddingSetup& setup);

}  // namespace pstrain
