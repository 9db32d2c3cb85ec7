// The element losses of float targets (--loss bce | mse | huber: docs/models.md, "Losses") and
// their gradients, one definition for the CPU backend, the CUDA kernels and the evaluation's
// metrics. A sample's loss is the mean of its K element losses (PyTorch's reduction='mean' over
// the K outputs), a batch's the sum of its samples'.
#pragma once

#include <cmath>

#include "shared/util/modes.h"
#include "worker/backend/backend.h"  // PSTRAIN_HOST_DEVICE

namespace pstrain {

// The loss of output z against target t, in double: bce max(z, 0) - z t + log(1 + exp(-|z|))
// (BCEWithLogitsLoss; finite for any z), mse (z - t)^2, huber 0.5 d^2 where |d| <= delta, else
// delta (|d| - delta / 2), d = z - t (HuberLoss(delta)).
PSTRAIN_HOST_DEVICE inline double element_loss(Loss loss, float z, float t, float delta) {
  const double zd = z, td = t, d = zd - td;
  switch (loss) {
    case Loss::kBce:
      return (zd > 0 ? zd : 0.0) - zd * td + log1p(exp(-fabs(zd)));
    case Loss::kMse:
      return d * d;
    case Loss::kHuber: {
      const double a = fabs(d);
      return a <= delta ? 0.5 * d * d : delta * (a - 0.5 * delta);
    }
    case Loss::kSoftmax:
      break;
  }
  return 0;
}

// The logistic function in float, without overflow for any z.
PSTRAIN_HOST_DEVICE inline float stable_sigmoid(float z) {
  if (z >= 0) return 1.0f / (1.0f + expf(-z));
  const float e = expf(z);
  return e / (1.0f + e);
}

// d element_loss / dz divided by `cols` (the sample's mean), in float: bce (sigmoid(z) - t) / K,
// mse 2 (z - t) / K, huber clamp(z - t, -delta, delta) / K.
PSTRAIN_HOST_DEVICE inline float element_grad(Loss loss, float z, float t, float delta, int cols) {
  const float d = z - t, k = static_cast<float>(cols);
  switch (loss) {
    case Loss::kBce:
      return (stable_sigmoid(z) - t) / k;
    case Loss::kMse:
      return 2.0f * d / k;
    case Loss::kHuber:
      return (d > delta ? delta : d < -delta ? -delta : d) / k;
    case Loss::kSoftmax:
      break;
  }
  return 0;
}

}  // namespace pstrain
