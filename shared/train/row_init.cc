#include "shared/train/row_init.h"

#include <cmath>

#include "shared/train/sparse_ids.h"
#include "shared/util/splitmix.h"

namespace pstrain {

bool parse_row_init(const std::string& name, RowInitKind* out) {
  if (name == "uniform") *out = RowInitKind::kUniform;
  else if (name == "zeros") *out = RowInitKind::kZeros;
  else return false;
  return true;
}

const char* row_init_name(RowInitKind kind) { return kind == RowInitKind::kZeros ? "zeros" : "uniform"; }

RowInitKind row_init_for(TableOptimizer optimizer) {
  return optimizer == TableOptimizer::kFtrl ? RowInitKind::kZeros : RowInitKind::kUniform;
}

void init_row(const RowInit& init, uint64_t seed, uint32_t table, uint64_t id, size_t dim, float* out) {
  if (init.kind == RowInitKind::kZeros) {
    for (size_t j = 0; j < dim; ++j) out[j] = 0.0f;
    return;
  }
  const double scale = init.scale > 0 ? init.scale : 1.0 / std::sqrt(static_cast<double>(dim));
  const uint64_t key = mix_id(mix_id(mix_id(seed) ^ table) ^ id);
  constexpr double kUnit = 1.0 / 16777216.0;  // 2^-24
  for (size_t j = 0; j < dim; ++j) {
    const uint64_t u = mix_id(key + j * kGolden) >> 40;
    out[j] = static_cast<float>((2.0 * (static_cast<double>(u) + 0.5) * kUnit - 1.0) * scale);
  }
}

}  // namespace pstrain
