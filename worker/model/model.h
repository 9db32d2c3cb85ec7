// A model: a list of layers (worker/model/layers.h) ending in softmax cross-entropy, over one flat
// parameter buffer whose layout names every variable ("layer<p>.weight", "layer<p>.bias", p
// counting the layers with parameters). Network is the list and its shapes (what a memory plan
// needs); Model adds the activation buffers on a backend and runs the passes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shared/train/layout.h"
#include "worker/backend/backend.h"
#include "worker/model/layers.h"

namespace pstrain {

class Network {
 public:
  // The layer list of a job: --model, else --hidden's MLP for `classes`.
  static std::string spec_of(const std::string& model, const std::vector<int>& hidden, int classes) {
    return model.empty() ? mlp_model(hidden, classes) : model;
  }
  // `spec`: a layer list (parse_model); `sample_shape`: the data's {C, H, W} or {D}. Throws
  // pstrain::UsageError for a list that does not fit the data or does not end in `classes`
  // outputs. `targets` empty: `classes` class labels (2 or more); else the data's float targets,
  // `classes` wide (1 or more), as messages name them ("y.npy (shape (1000, 3))").
  Network(const std::string& spec, const std::vector<size_t>& sample_shape, int classes,
          const std::string& targets = "");

  const Layout& layout() const { return layout_; }
  // The state: variables the forward pass assigns rather than the optimizer trains
  // ("layer<p>.running_mean", "layer<p>.running_var" of batchnorm layers); empty without them.
  const Layout& state_layout() const { return state_layout_; }
  // Each state variable at its initial value (running means 0, running variances 1).
  std::vector<float> initial_state() const;
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  const Shape& input() const { return input_; }
  int classes() const { return classes_; }
  // "784 -> dense 256 -> 256 -> relu -> ..." for the log.
  std::string summary() const;

  // Floats of activation memory for batches of up to `batch` samples: the layers' outputs (with
  // `recompute` only the outputs of blocks, plus one block's insides), two gradient buffers and
  // the layers' scratch on `backend` (a convolution's: Backend::conv_scratch_floats).
  size_t activation_floats(int batch, bool recompute, const Backend& backend) const;
  // Deterministic initialisation from the seed alone: weights He-uniform over their fan-in
  // (dense: inputs; conv: in channels x K x K), biases zero.
  void init(uint64_t seed, float* host_params) const;

  // The buffer plan (per sample, in floats). buffer_of[l]: the buffer layer l writes (-1: the
  // input, for a leading flatten); block_of[l]: the block of layer l (a dense layer and what
  // follows it, or a stage of layers up to and including a pooling or flatten layer).
  struct Plan {
    std::vector<int> buffer_of, block_of;
    std::vector<size_t> buffer_size;  // per sample
    std::vector<bool> persistent;     // kept from forward to backward (with recompute: blocks' outputs)
    std::vector<size_t> arena_offset; // per sample, of the other buffers in the recompute arena
    size_t arena_size = 0;            // per sample
    size_t delta_size[2] = {0, 0};    // per sample: the two gradient buffers backward alternates
                                      // between (element-wise layers work in place)
    int blocks = 0;
  };
  Plan plan(bool recompute) const;

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  Layout layout_;
  Layout state_layout_;
  Shape input_;
  int classes_;
};

// What dropout masks depend on: the job's seed and the global step, and each sample's record
// (one per row, host memory). Without records, dropout layers use the row index.
struct DropoutKeys {
  uint64_t seed = 0, step = 0;
  const uint64_t* records = nullptr;
};

class Model {
 public:
  // Activations are allocated for batches of up to max_batch samples.
  Model(Network network, int max_batch, bool recompute, Backend& backend);
  Model(const std::string& spec, const std::vector<size_t>& sample_shape, int classes, int max_batch, bool recompute,
        Backend& backend)
      : Model(Network(spec, sample_shape, classes), max_batch, recompute, backend) {}
  // The MLP of --hidden on flat inputs.
  Model(int input_dim, const std::vector<int>& hidden, int classes, int max_batch, Backend& backend);

  const Network& network() const { return net_; }
  const Layout& layout() const { return net_.layout(); }
  int classes() const { return net_.classes(); }
  void init(uint64_t seed, float* host_params) const { net_.init(seed, host_params); }
  // The state (Network::state_layout(), host memory): updated by every training forward pass,
  // read by evaluate() and logits().
  const std::vector<float>& state() const { return state_; }
  void set_state(const std::vector<float>& state);
  // Batch norm's global statistics: training passes combine their sums through `stats` (null:
  // each batch alone); it must outlive its use.
  void set_stats_exchange(StatsExchange* stats) { stats_ = stats; }

  // Called during backward each time grad[from, total) is complete (layers finish last to
  // first), with the batch's loss statistics (known after the forward pass).
  using GradReady = std::function<void(size_t from, const BatchStats& stats)>;

  using Keys = DropoutKeys;

  // Training's loss smooths the labels by this much (--label-smoothing; 0: none); evaluation's
  // never does.
  void set_label_smoothing(float smoothing) { label_smoothing_ = smoothing; }

  // Forward and backward on a batch (x, y in backend memory / host labels). grad receives the
  // gradient of the SUMMED loss over the batch (not the mean); with `accumulate` it is added to
  // what grad holds (gradient accumulation over micro-batches). With `input_grad` (backend
  // memory, batch x input floats), it receives the summed loss's gradient w.r.t. x, overwritten
  // whatever `accumulate` says (what embedding rows outside the model need: worker/sparse/).
  BatchStats train_step(const float* params, const float* x, const int32_t* y, int batch, float* grad,
                        const GradReady& on_ready = nullptr, bool accumulate = false, const Keys& keys = {},
                        float* input_grad = nullptr);
  // The loss the passes end in (--loss; docs/models.md, "Losses"): softmax cross-entropy over
  // class labels by default; with another (bce, mse, huber), the network's outputs are its K
  // predictions and the passes take float targets instead (the *_targets forms).
  void set_loss(Loss loss, float huber_delta = 1.0f) {
    loss_ = loss;
    huber_delta_ = huber_delta;
  }
  Loss loss() const { return loss_; }
  // train_step for a loss of float targets: t is batch x classes() floats in backend memory.
  BatchStats train_step_targets(const float* params, const float* x, const float* t, int batch, float* grad,
                                const GradReady& on_ready = nullptr, bool accumulate = false, const Keys& keys = {},
                                float* input_grad = nullptr);

  // Forward only (dropout off).
  BatchStats evaluate(const float* params, const float* x, const int32_t* y, int batch);
  // Forward only (dropout off): the logits, batch x classes in backend memory, valid until the
  // next pass.
  const float* logits(const float* params, const float* x, int batch);

 private:
  void forward_layers(LayerContext& ctx, const float* params, const float* x, int batch, size_t from, size_t to);
  const float* input_of(size_t l, const float* x) const;
  float* output_of(size_t l, const float* x) const;
  LayerContext context(bool training, const Keys& keys, int batch);

  Network net_;
  Backend& backend_;
  int max_batch_;
  bool recompute_;
  float label_smoothing_ = 0.0f;
  Loss loss_ = Loss::kSoftmax;
  float huber_delta_ = 1.0f;
  const float* targets_ = nullptr;  // during train_step_targets
  Network::Plan plan_;
  std::vector<BufferPtr> buffers_;  // persistent buffers (null for arena ones)
  std::vector<float*> buffer_ptr_;  // every buffer: its own or a place in the arena
  BufferPtr arena_, delta_a_, delta_b_, col_;
  std::vector<BufferPtr> scratch_;  // per layer: its LayerContext::scratch (null for most)
  std::vector<uint64_t> row_keys_;  // 0, 1, 2, ... for calls without keys
  std::vector<float> state_;
  StatsExchange* stats_ = nullptr;
};

}  // namespace pstrain
