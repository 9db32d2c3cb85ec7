#include "worker/backend/backend.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "shared/util/error.h"

namespace pstrain {
namespace {

// Samples unfolded at a time: kColumnChunkFloats' worth, at least one, at most the batch.
int column_chunk(int batch, const ConvGeometry& g) {
  return static_cast<int>(std::clamp<size_t>(kColumnChunkFloats / (g.patch() * g.positions()), 1,
                                             static_cast<size_t>(std::max(batch, 1))));
}

}  // namespace

void Backend::multiply(const float* a, const float* b, float* y, size_t n) {
  if (!host_accessible()) throw std::logic_error("Backend::multiply: the " + name() + " backend needs its own");
  for (size_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

size_t Backend::conv_scratch_floats(int batch, const ConvGeometry& g, int) const {
  return static_cast<size_t>(column_chunk(batch, g)) * g.patch() * g.positions();
}

// Per chunk of samples: unfold, then one GEMM per sample (batched): y_b = W col_b.
void Backend::conv_forward(const float* x, int batch, const ConvGeometry& g, int outputs, const float* w,
                           const float* bias, float* y, float* scratch) {
  const int patch = static_cast<int>(g.patch()), positions = static_cast<int>(g.positions());
  const size_t col_stride = g.patch() * g.positions(), out = static_cast<size_t>(outputs) * g.positions();
  const int chunk = column_chunk(batch, g);
  for (int first = 0; first < batch; first += chunk) {
    const int n = std::min(chunk, batch - first);
    im2col(x + static_cast<size_t>(first) * g.input_size(), n, g, scratch);
    gemm_batched(false, false, outputs, positions, patch, 1.0f, w, 0, scratch, col_stride, 0.0f,
                 y + static_cast<size_t>(first) * out, out, n);
  }
  add_bias(y, bias, batch, outputs, positions);
}

// dW = sum over samples (in order) of dy_b col_b^T; dcol_b = W^T dy_b, folded back into dx.
void Backend::conv_backward(const float* x, const float* dy, int batch, const ConvGeometry& g, int outputs,
                            const float* w, float* dx, float* dw, float* db, bool accumulate,
                            float* scratch) {
  const int patch = static_cast<int>(g.patch()), positions = static_cast<int>(g.positions());
  const size_t col_stride = g.patch() * g.positions(), out = static_cast<size_t>(outputs) * g.positions();
  const int chunk = column_chunk(batch, g);
  for (int first = 0; first < batch; first += chunk) {
    const int n = std::min(chunk, batch - first);
    const float* dy_chunk = dy + static_cast<size_t>(first) * out;
    im2col(x + static_cast<size_t>(first) * g.input_size(), n, g, scratch);
    gemm_sum(false, true, outputs, patch, positions, 1.0f, dy_chunk, out, scratch, col_stride,
             (first == 0 && !accumulate) ? 0.0f : 1.0f, dw, n);
    if (dx == nullptr) continue;
    gemm_batched(true, false, patch, positions, outputs, 1.0f, w, 0, dy_chunk, out, 0.0f, scratch, col_stride,
                 n);
    col2im(scratch, n, g, dx + static_cast<size_t>(first) * g.input_size());
  }
  bias_grad(dy, batch, outputs, positions, db, accumulate);
}

std::unique_ptr<Backend> make_backend(const BackendOptions& o) {
  if (o.device == DeviceKind::kCpu) return make_cpu_backend(o.threads);  // without asking CUDA anything
  const int gpus = cuda_device_count();
  if (o.device == DeviceKind::kAuto && gpus == 0) return make_cpu_backend(o.threads);
  const std::string flag = std::string("--device ") + device_kind_name(o.device) +
                           (o.device_index >= 0 ? ":" + std::to_string(o.device_index) : "");
  if (gpus == 0) throw Error(flag + ": no CUDA device is visible to this worker");
  const int device = o.device_index >= 0 ? o.device_index : std::max(o.local_rank, 0) % gpus;
  if (device >= gpus) {
    throw Error(flag + ": only " + std::to_string(gpus) + " CUDA device(s) are visible");
  }
  const auto limit = static_cast<size_t>(o.gpu_memory_limit_mib * 1048576.0);
  return make_cuda_backend(device, limit);
}

}  // namespace pstrain
