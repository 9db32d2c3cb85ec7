// The values a new embedding row starts with: a pure function of (seed, table, ID), so a row is
// the same whichever shard creates it, whenever, and however many shards there are. In shared/:
// a PS shard creates rows with it, and a worker reading saved tables (--evaluate, --predict)
// reads an ID without a row as the PS would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shared/util/modes.h"

namespace pstrain {

enum class RowInitKind { kUniform, kZeros };

struct RowInit {
  RowInitKind kind = RowInitKind::kUniform;  // uniform in [-scale, scale), or zeros (FTRL's usual start)
  double scale = 0;                          // uniform's bound; 0: 1 / sqrt(dim)
};

// "uniform" | "zeros"; false for another name.
bool parse_row_init(const std::string& name, RowInitKind* out);
const char* row_init_name(RowInitKind kind);
// A table's initialiser under its optimizer (--embedding-optimizer): zeros for ftrl (its usual
// start), uniform for the others.
RowInitKind row_init_for(TableOptimizer optimizer);

// Writes row `id` of table `table` (dim floats) to out. Element j of a uniform row is
// (2 * (u + 0.5) / 2^24 - 1) * scale, u the top 24 bits of mix_id(key + j * kGolden),
// key = mix_id(mix_id(mix_id(seed) ^ table) ^ id): counter-based, so any element of any row is
// computed alone, in double and rounded once to float (the same bits on every platform).
void init_row(const RowInit& init, uint64_t seed, uint32_t table, uint64_t id, size_t dim, float* out);

}  // namespace pstrain
