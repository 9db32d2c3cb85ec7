#include "worker/cpu/cpu_conv.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "shared/util/error.h"
#include "worker/cpu/onednn_util.h"
#include "worker/cpu/thread_pool.h"

namespace pstrain {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// A reorder between the layers' layout and a primitive's; none when they are the same.
struct Move {
  bool needed = false;
  dnnl::reorder::primitive_desc pd;
  dnnl::reorder prim;
  size_t copy_floats = 0, pad_floats = 0;  // the copy in the primitive's layout; the reorder's scratchpad

  Move() = default;
  // `from` -> `to`, one of them the primitive's layout (`into_primitive`: `to`).
  Move(const dnnl::engine& engine, const memory::desc& from, const memory::desc& to, bool into_primitive)
      : needed(!(from == to)) {
    if (!needed) return;
    pd = dnnl::reorder::primitive_desc(engine, from, engine, to, user_scratchpad());
    copy_floats = floats_of((into_primitive ? to : from).get_size());
    pad_floats = floats_of(pd.scratchpad_desc().get_size());
  }
  void make() {
    if (needed) prim = dnnl::reorder(pd);
  }
  // Moves `from` into `to` (both memory objects of the right layouts) when needed.
  void run(dnnl::stream& s, const memory& from, const memory& to, float* pad) const {
    if (!needed) return;
    prim.execute(s, {{DNNL_ARG_FROM, from},
                     {DNNL_ARG_TO, to},
                     {DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), from.get_engine(), pad)}});
  }
};

// The key of a cache entry: a convolution's shape and the samples of one call.
struct Key {
  int c, h, w, k, s, p, oc, mb;
  bool operator<(const Key& o) const {
    return std::tie(c, h, w, k, s, p, oc, mb) < std::tie(o.c, o.h, o.w, o.k, o.s, o.p, o.oc, o.mb);
  }
};

// The three primitives of one shape and block size, their reorders and what they need of the
// scratch. Descriptors are made when the size is first asked for (no code generated yet), the
// primitives (oneDNN's JIT kernels) at the first call.
struct Entry {
  memory::desc x, y, w;  // the layers' layouts: [mb, C, H, W], [mb, outputs, OH, OW] NCHW, OIHW
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_backward_data::primitive_desc data_pd;
  dnnl::convolution_backward_weights::primitive_desc weights_pd;
  Move fwd_x, fwd_w, fwd_y, data_dy, data_w, data_dx, weights_x, weights_dy, weights_dw;
  bool made = false;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data data;
  dnnl::convolution_backward_weights weights;

  // Floats per call: the reordered weights (shared by the threads), and per thread the reordered
  // blocks and one scratchpad (the largest of the pass's steps, which run one after another).
  size_t fwd_shared() const { return fwd_w.copy_floats + fwd_w.pad_floats; }
  size_t fwd_slot() const {
    return fwd_x.copy_floats + fwd_y.copy_floats +
           std::max({floats_of(fwd_pd.scratchpad_desc().get_size()), fwd_x.pad_floats, fwd_y.pad_floats});
  }
  size_t data_shared() const { return data_w.copy_floats + data_w.pad_floats; }
  size_t data_slot() const {
    return data_dy.copy_floats + data_dx.copy_floats +
           std::max(
               {floats_of(data_pd.scratchpad_desc().get_size()), data_dy.pad_floats, data_dx.pad_floats});
  }
  size_t weights_slot() const {
    return weights_x.copy_floats + weights_dy.copy_floats + weights_dw.copy_floats +
           std::max({floats_of(weights_pd.scratchpad_desc().get_size()), weights_x.pad_floats,
                     weights_dy.pad_floats, weights_dw.pad_floats});
  }

  void make() {
    if (made) return;
    fwd = dnnl::convolution_forward(fwd_pd);
    data = dnnl::convolution_backward_data(data_pd);
    weights = dnnl::convolution_backward_weights(weights_pd);
    for (Move* m :
         {&fwd_x, &fwd_w, &fwd_y, &data_dy, &data_w, &data_dx, &weights_x, &weights_dy, &weights_dw}) {
      m->make();
    }
    made = true;
  }
};

// Layers with fewer input channels than this run their data gradient on NCHW (cpu_conv.h).
constexpr int kBlockedDataMinChannels = 16;

int blocks_of(int batch) { return (batch + CpuConv::kBlock - 1) / CpuConv::kBlock; }

std::string shape_text(const ConvGeometry& g, int outputs, int mb) {
  return std::to_string(mb) + "x" + std::to_string(g.channels) + "x" + std::to_string(g.height) + "x" +
         std::to_string(g.width) + " -> " + std::to_string(outputs) + " channels, kernel " +
         std::to_string(g.kernel) + " stride " + std::to_string(g.stride) + " pad " + std::to_string(g.pad);
}

// One block's weight gradient dW (into udw) from its x and dy, through `base`'s scratch where a
// primitive wants another memory format.
void weight_gradient(Entry& e, dnnl::stream& s, float* base, const memory& ux, const memory& udy, const memory& udw) {
  const dnnl::engine engine = ux.get_engine();
  float* pad = base + e.weights_x.copy_floats + e.weights_dy.copy_floats + e.weights_dw.copy_floats;
  const memory px = e.weights_x.needed ? memory(e.weights_pd.src_desc(), engine, base) : ux;
  const memory pdy =
      e.weights_dy.needed ? memory(e.weights_pd.diff_dst_desc(), engine, base + e.weights_x.copy_floats) : udy;
  const memory pdw = e.weights_dw.needed ? memory(e.weights_pd.diff_weights_desc(), engine,
                                                  base + e.weights_x.copy_floats + e.weights_dy.copy_floats)
                                         : udw;
  e.weights_x.run(s, ux, px, pad);
  e.weights_dy.run(s, udy, pdy, pad);
  e.weights.execute(s, {{DNNL_ARG_SRC, px},
                        {DNNL_ARG_DIFF_DST, pdy},
                        {DNNL_ARG_DIFF_WEIGHTS, pdw},
                        {DNNL_ARG_SCRATCHPAD, memory(e.weights_pd.scratchpad_desc(), engine, pad)}});
  e.weights_dw.run(s, pdw, udw, pad);
}

// One block's input gradient dx (into udx) from its dy and the weights in the data primitive's
// format.
void data_gradient(Entry& e, dnnl::stream& s, float* base, const memory& udy, const memory& w, const memory& udx) {
  const dnnl::engine engine = udy.get_engine();
  float* dpad = base + e.data_dy.copy_floats + e.data_dx.copy_floats;
  const memory qdy = e.data_dy.needed ? memory(e.data_pd.diff_dst_desc(), engine, base) : udy;
  const memory qdx =
      e.data_dx.needed ? memory(e.data_pd.diff_src_desc(), engine, base + e.data_dy.copy_floats) : udx;
  e.data_dy.run(s, udy, qdy, dpad);
  e.data.execute(s, {{DNNL_ARG_DIFF_DST, qdy},
                     {DNNL_ARG_WEIGHTS, w},
                     {DNNL_ARG_DIFF_SRC, qdx},
                     {DNNL_ARG_SCRATCHPAD, memory(e.data_pd.scratchpad_desc(), engine, dpad)}});
  e.data_dx.run(s, qdx, udx, dpad);
}

// dw = ((dw + g_first) + g_first+1) + ..., each element's terms in block order: a wave's `count`
// partials of `weights` floats each, `partial` apart; the first replaces dw where `overwrite`.
void add_partials(ThreadPool& pool, const float* partials, size_t partial, int count, bool overwrite, float* dw,
                  size_t weights) {
  pool.run(
      weights,
      [&](size_t lo, size_t hi) {
        for (int j = 0; j < count; ++j) {
          const float* p = partials + static_cast<size_t>(j) * partial;
          if (j == 0 && overwrite) {
            std::copy(p + lo, p + hi, dw + lo);
          } else {
            for (size_t i = lo; i < hi; ++i) dw[i] += p[i];
          }
        }
      },
      size_t{1} << 14);
}

}  // namespace

struct CpuConv::Impl {
  explicit Impl(ThreadPool& p) : pool(p), engine(dnnl::engine::kind::cpu, 0) {
    for (int t = 0; t < pool.threads(); ++t) streams.emplace_back(engine);
  }

  // The entry of a shape and block size, its descriptors made on first use. Called on the thread
  // that calls the backend only (the cache has no lock: a backend computes one thing at a time).
  Entry& entry(const ConvGeometry& g, int outputs, int mb) {
    one_openmp_thread();
    const Key key{g.channels, g.height, g.width, g.kernel, g.stride, g.pad, outputs, mb};
    auto it = cache.find(key);
    if (it != cache.end()) return *it->second;
    try {
      auto e = std::make_unique<Entry>();
      const memory::dims xd{mb, g.channels, g.height, g.width}, wd{outputs, g.channels, g.kernel, g.kernel},
          bd{outputs}, yd{mb, outputs, g.out_height, g.out_width}, strides{g.stride, g.stride},
          pad{g.pad, g.pad};
      const auto f32 = memory::data_type::f32;
      e->x = memory::desc(xd, f32, tag::nchw);
      e->y = memory::desc(yd, f32, tag::nchw);
      e->w = memory::desc(wd, f32, tag::oihw);
      const memory::desc any_x(xd, f32, tag::any), any_w(wd, f32, tag::any), any_y(yd, f32, tag::any),
          bias(bd, f32, tag::x);
      const auto direct = dnnl::algorithm::convolution_direct;
      e->fwd_pd = dnnl::convolution_forward::primitive_desc(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, any_x, any_w, bias,
                                          any_y, strides, pad, pad),
          user_scratchpad(), engine);
      const bool plain_data = g.channels < kBlockedDataMinChannels;
      e->data_pd = dnnl::convolution_backward_data::primitive_desc(
          dnnl::convolution_backward_data::desc(direct, plain_data ? e->x : any_x, plain_data ? e->w : any_w,
                                                plain_data ? e->y : any_y, strides, pad, pad),
          user_scratchpad(), engine, e->fwd_pd);
      e->weights_pd = dnnl::convolution_backward_weights::primitive_desc(
          dnnl::convolution_backward_weights::desc(direct, any_x, any_w, any_y, strides, pad, pad),
          user_scratchpad(), engine, e->fwd_pd);
      e->fwd_x = Move(engine, e->x, e->fwd_pd.src_desc(), true);
      e->fwd_w = Move(engine, e->w, e->fwd_pd.weights_desc(), true);
      e->fwd_y = Move(engine, e->fwd_pd.dst_desc(), e->y, false);
      e->data_dy = Move(engine, e->y, e->data_pd.diff_dst_desc(), true);
      e->data_w = Move(engine, e->w, e->data_pd.weights_desc(), true);
      e->data_dx = Move(engine, e->data_pd.diff_src_desc(), e->x, false);
      e->weights_x = Move(engine, e->x, e->weights_pd.src_desc(), true);
      e->weights_dy = Move(engine, e->y, e->weights_pd.diff_dst_desc(), true);
      e->weights_dw = Move(engine, e->weights_pd.diff_weights_desc(), e->w, false);
      return *cache.emplace(key, std::move(e)).first->second;
    } catch (const dnnl::error& err) {
      throw Error("oneDNN convolution " + shape_text(g, outputs, mb) + ": " + err.what());
    }
  }

  // The entries a call on `batch` samples runs: blocks of kBlock and the shorter last one.
  std::vector<Entry*> entries(const ConvGeometry& g, int outputs, int batch, bool make) {
    std::vector<Entry*> out;
    if (batch >= kBlock) out.push_back(&entry(g, outputs, kBlock));
    if (batch % kBlock != 0) out.push_back(&entry(g, outputs, batch % kBlock));
    if (make) {
      try {
        for (Entry* e : out) e->make();
      } catch (const dnnl::error& err) {
        throw Error("oneDNN convolution " + shape_text(g, outputs, batch) + ": " + err.what());
      }
    }
    return out;
  }
  // Which of entries() block `block` runs.
  static size_t of_block(const std::vector<Entry*>& es, int batch, int block) {
    return (block + 1) * kBlock <= batch ? 0 : es.size() - 1;
  }

  // Threads that work at once on a batch: a block each at most.
  int slots(int batch) const { return std::min(pool.threads(), blocks_of(batch)); }

  // Where a call's buffers lie in the scratch (offsets in floats).
  struct ForwardLayout {
    size_t shared = 0, slot = 0, total = 0;  // each entry's weights, then slot t at shared + t * slot
  };
  struct BackwardLayout {
    size_t data_shared = 0, partials = 0, slot = 0, total = 0;  // weights, partials, slots in that order
  };
  ForwardLayout forward_layout(const std::vector<Entry*>& es, int batch) const {
    ForwardLayout l;
    for (const Entry* e : es) l.shared += e->fwd_shared(), l.slot = std::max(l.slot, e->fwd_slot());
    l.total = l.shared + static_cast<size_t>(slots(batch)) * l.slot;
    return l;
  }
  BackwardLayout backward_layout(const std::vector<Entry*>& es, int batch, size_t weights) const {
    BackwardLayout l;
    for (const Entry* e : es) {
      l.data_shared += e->data_shared();
      l.slot = std::max({l.slot, e->data_slot(), e->weights_slot()});
    }
    l.partials = static_cast<size_t>(slots(batch)) * floats_of(weights * sizeof(float));
    l.total = l.data_shared + l.partials + static_cast<size_t>(slots(batch)) * l.slot;
    return l;
  }

  ThreadPool& pool;
  dnnl::engine engine;
  std::vector<dnnl::stream> streams;  // one per thread that may run at once
  std::map<Key, std::unique_ptr<Entry>> cache;
};

CpuConv::CpuConv(ThreadPool& pool) : impl_(std::make_unique<Impl>(pool)) {}
CpuConv::~CpuConv() = default;

size_t CpuConv::scratch_floats(int batch, const ConvGeometry& g, int outputs) const {
  // Any batch up to `batch`: its slots are no more, and its last block is of 1 to kBlock samples.
  const size_t weights = static_cast<size_t>(outputs) * g.patch();
  size_t most = 0;
  for (int mb = 1; mb <= std::min(batch, kBlock); ++mb) {
    std::vector<Entry*> es{&impl_->entry(g, outputs, mb)};
    if (batch > kBlock && mb < kBlock) es.insert(es.begin(), &impl_->entry(g, outputs, kBlock));
    most = std::max(
        {most, impl_->forward_layout(es, batch).total, impl_->backward_layout(es, batch, weights).total});
  }
  return most;
}

void CpuConv::forward(const float* x, int batch, const ConvGeometry& g, int outputs, const float* w,
                      const float* bias, float* y, float* scratch) {
  if (batch <= 0) return;
  Impl& im = *impl_;
  const std::vector<Entry*> es = im.entries(g, outputs, batch, true);
  const Impl::ForwardLayout l = im.forward_layout(es, batch);
  const memory user_w(es.front()->w, im.engine, const_cast<float*>(w));
  const memory user_b(es.front()->fwd_pd.bias_desc(), im.engine, const_cast<float*>(bias));
  // The weights in each primitive's layout, once for all its blocks.
  std::vector<memory> fwd_w;
  try {
    for (size_t i = 0, at = 0; i < es.size(); at += es[i]->fwd_shared(), ++i) {
      fwd_w.push_back(es[i]->fwd_w.needed ? memory(es[i]->fwd_pd.weights_desc(), im.engine, scratch + at)
                                          : user_w);
      es[i]->fwd_w.run(im.streams[0], user_w, fwd_w[i], scratch + at + es[i]->fwd_w.copy_floats);
    }
  } catch (const dnnl::error& err) {
    throw Error("oneDNN convolution forward " + shape_text(g, outputs, batch) + ": " + err.what());
  }
  const size_t in = g.input_size(), out = static_cast<size_t>(outputs) * g.positions();
  std::atomic<int> next_slot{0};
  std::atomic<bool> failed{false};
  std::string why;
  im.pool.run(static_cast<size_t>(blocks_of(batch)), [&](size_t lo, size_t hi) {
    one_openmp_thread();
    const int slot = next_slot++;
    dnnl::stream& s = im.streams[static_cast<size_t>(slot)];
    float* base = scratch + l.shared + static_cast<size_t>(slot) * l.slot;
    try {
      for (size_t b = lo; b < hi; ++b) {
        const size_t which = Impl::of_block(es, batch, static_cast<int>(b));
        Entry& e = *es[which];
        const size_t first = b * kBlock;
        const memory ux(e.x, im.engine, const_cast<float*>(x) + first * in),
            uy(e.y, im.engine, y + first * out);
        float* pad = base + e.fwd_x.copy_floats + e.fwd_y.copy_floats;
        const memory px = e.fwd_x.needed ? memory(e.fwd_pd.src_desc(), im.engine, base) : ux;
        const memory py =
            e.fwd_y.needed ? memory(e.fwd_pd.dst_desc(), im.engine, base + e.fwd_x.copy_floats) : uy;
        e.fwd_x.run(s, ux, px, pad);
        e.fwd.execute(s, {{DNNL_ARG_SRC, px},
                          {DNNL_ARG_WEIGHTS, fwd_w[which]},
                          {DNNL_ARG_BIAS, user_b},
                          {DNNL_ARG_DST, py},
                          {DNNL_ARG_SCRATCHPAD, memory(e.fwd_pd.scratchpad_desc(), im.engine, pad)}});
        e.fwd_y.run(s, py, uy, pad);
      }
      s.wait();
    } catch (const dnnl::error& err) {
      if (!failed.exchange(true)) why = err.what();
    }
  });
  if (failed) throw Error("oneDNN convolution forward " + shape_text(g, outputs, batch) + ": " + why);
}

void CpuConv::backward(const float* x, const float* dy, int batch, const ConvGeometry& g, int outputs,
                       const float* w, float* dx, float* dw, bool accumulate, float* scratch) {
  const size_t weights = static_cast<size_t>(outputs) * g.patch();
  if (batch <= 0) {
    if (!accumulate) std::fill(dw, dw + weights, 0.0f);
    return;
  }
  Impl& im = *impl_;
  const std::vector<Entry*> es = im.entries(g, outputs, batch, true);
  const Impl::BackwardLayout l = im.backward_layout(es, batch, weights);
  const memory user_w(es.front()->w, im.engine, const_cast<float*>(w));
  std::vector<memory> data_w;
  try {
    for (size_t i = 0, at = 0; dx != nullptr && i < es.size(); at += es[i]->data_shared(), ++i) {
      data_w.push_back(es[i]->data_w.needed ? memory(es[i]->data_pd.weights_desc(), im.engine, scratch + at)
                                            : user_w);
      es[i]->data_w.run(im.streams[0], user_w, data_w[i], scratch + at + es[i]->data_w.copy_floats);
    }
  } catch (const dnnl::error& err) {
    throw Error("oneDNN convolution backward " + shape_text(g, outputs, batch) + ": " + err.what());
  }
  float* partials = scratch + l.data_shared;
  const size_t partial = l.partials / static_cast<size_t>(im.slots(batch));
  const size_t in = g.input_size(), out = static_cast<size_t>(outputs) * g.positions();
  const int blocks = blocks_of(batch), wave = im.slots(batch);
  std::atomic<bool> failed{false};
  std::string why;
  // Waves of one block per thread: each block's weight gradient into its own partial, then the
  // partials added to dw in block order.
  for (int wave_first = 0; wave_first < blocks; wave_first += wave) {
    const int count = std::min(wave, blocks - wave_first);
    std::atomic<int> next_slot{0};
    im.pool.run(static_cast<size_t>(count), [&](size_t lo, size_t hi) {
      one_openmp_thread();
      const int slot = next_slot++;
      dnnl::stream& s = im.streams[static_cast<size_t>(slot)];
      float* base = scratch + l.data_shared + l.partials + static_cast<size_t>(slot) * l.slot;
      try {
        for (size_t j = lo; j < hi; ++j) {
          const int b = wave_first + static_cast<int>(j);
          const size_t which = Impl::of_block(es, batch, b);
          Entry& e = *es[which];
          const size_t first = static_cast<size_t>(b) * kBlock;
          const memory ux(e.x, im.engine, const_cast<float*>(x) + first * in),
              udy(e.y, im.engine, const_cast<float*>(dy) + first * out),
              udw(e.w, im.engine, partials + j * partial);
          weight_gradient(e, s, base, ux, udy, udw);
          if (dx != nullptr) data_gradient(e, s, base, udy, data_w[which], memory(e.x, im.engine, dx + first * in));
        }
        s.wait();
      } catch (const dnnl::error& err) {
        if (!failed.exchange(true)) why = err.what();
      }
    });
    if (failed) throw Error("oneDNN convolution backward " + shape_text(g, outputs, batch) + ": " + why);
    add_partials(im.pool, partials, partial, count, wave_first == 0 && !accumulate, dw, weights);
  }
}

}  // namespace pstrain
