// What a CTR model's embedding tables are (docs/sparse.md, docs/models.md "model.json"): the
// "embeddings" object of model.json, which --evaluate and --predict need to build the model's
// input from the saved tables as the PS served it in training.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/util/modes.h"  // EmbeddingPool

namespace pstrain {

// The pool named `name`; false when it names none.
bool parse_embedding_pool(const std::string& name, EmbeddingPool* pool);

struct EmbeddingSetup {
  uint32_t dim = 0;                 // floats per row; 0: the model has no tables
  bool per_field_tables = false;    // --embedding-tables per-field (key: the raw ID); else one shared
                                    // table, key mix_id(raw ^ mix_id(field + 1)) (embedding_key)
  size_t dense = 13;                // dense features per record, first in the model's input
  size_t fields = 26;               // categorical fields per record, each one row of the input
  EmbeddingPool pool = EmbeddingPool::kSum;  // a multi-valued field's row (model.json "pool";
                                             // absent: sum)
  std::vector<std::string> tables;  // by table id: "ids", or "C1".."C26"
  // An ID without a saved row reads as the PS would read it (docs/sparse.md, "A step (sync)"):
  // its initialiser's row (shared/train/row_init.h) of (seed, table, key), or zeros while
  // min_count > 1 (not admitted).
  std::string init = "uniform";     // uniform | zeros
  uint64_t seed = 0;
  int64_t min_count = 1;
  std::string optimizer;            // the tables' (their saved rows hold its slots)
  int num_ps = 1;                   // shards whose files hold the rows: <table>.shard<s>-of-<num_ps>
  // The --schema the IDs were read by (FeatureSchema::canonical(); model.json "schema"), "" for
  // the Criteo reader's (the preset criteo reads the same IDs).
  std::string schema;
};

}  // namespace pstrain
