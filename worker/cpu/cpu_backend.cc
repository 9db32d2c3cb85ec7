#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "worker/backend.h"

namespace pstrain {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) { openblas_set_num_threads(threads); }

  std::string name() const override { return "cpu (OpenBLAS)"; }
  bool host_accessible() const override { return true; }
  size_t bytes_allocated() const override { return *allocated_; }

  BufferPtr allocate(size_t n) override {
    *allocated_ += n * sizeof(float);
    return BufferPtr(new float[n](), [allocated = allocated_, n](float* p) {
      *allocated -= n * sizeof(float);
      delete[] p;
    });
  }
  BufferPtr allocate_host(size_t n) override {
    return BufferPtr(new float[n](), [](float* p) { delete[] p; });
  }

  void upload(float* dst, const float* host, size_t n) override {
    if (dst != host) std::memcpy(dst, host, n * sizeof(float));
  }
  void download(float* host, const float* src, size_t n) override {
    if (host != src) std::memcpy(host, src, n * sizeof(float));
  }

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
  }

  void bias_activation(float* y, const float* bias, int rows, int cols, bool relu) override {
    for (int r = 0; r < rows; ++r) {
      float* row = y + static_cast<size_t>(r) * cols;
      if (relu) {
        for (int c = 0; c < cols; ++c) row[c] = std::max(row[c] + bias[c], 0.0f);
      } else {
        for (int c = 0; c < cols; ++c) row[c] += bias[c];
      }
    }
  }

  void relu_backward(float* dy, const float* y, size_t n) override {
    for (size_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }

  void column_sums(const float* dy, int rows, int cols, float* dbias, bool accumulate) override {
    if (!accumulate) std::fill(dbias, dbias + cols, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const float* row = dy + static_cast<size_t>(r) * cols;
      for (int c = 0; c < cols; ++c) dbias[c] += row[c];
    }
  }

  BatchStats softmax_xent(const float* logits, const int32_t* labels, int rows, int cols,
                          float* dlogits) override {
    BatchStats stats;
    for (int r = 0; r < rows; ++r) {
      const float* z = logits + static_cast<size_t>(r) * cols;
      const int label = labels[r];
      const int argmax = static_cast<int>(std::max_element(z, z + cols) - z);
      const float zmax = z[argmax];
      double denom = 0;
      for (int c = 0; c < cols; ++c) denom += std::exp(static_cast<double>(z[c] - zmax));
      stats.loss_sum += std::log(denom) - static_cast<double>(z[label] - zmax);
      stats.correct += argmax == label;
      if (dlogits != nullptr) {
        float* d = dlogits + static_cast<size_t>(r) * cols;
        for (int c = 0; c < cols; ++c) {
          d[c] = static_cast<float>(std::exp(static_cast<double>(z[c] - zmax)) / denom) - (c == label);
        }
      }
    }
    return stats;
  }

 private:
  // Shared with the deleters, so a buffer may outlive the backend.
  std::shared_ptr<size_t> allocated_ = std::make_shared<size_t>(0);
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace pstrain
