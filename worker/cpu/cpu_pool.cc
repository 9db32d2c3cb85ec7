#include "worker/cpu/cpu_pool.h"

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

// The key of a cache entry: a pooling's window and the planes of one call.
struct Key {
  int kind, h, w, k, s, planes;
  bool operator<(const Key& o) const {
    return std::tie(kind, h, w, k, s, planes) < std::tie(o.kind, o.h, o.w, o.k, o.s, o.planes);
  }
};

// The primitives of one window and block size. Descriptors are made when the size is first asked
// for, the primitives (JIT kernels) at the first call.
struct Entry {
  memory::desc x, y;  // [1, planes, H, W] and [1, planes, OH, OW], NCHW
  dnnl::pooling_v2_forward::primitive_desc infer_pd, train_pd;  // train_pd: with max's workspace
  dnnl::pooling_v2_backward::primitive_desc back_pd;
  bool made = false;
  dnnl::pooling_v2_forward infer, train;
  dnnl::pooling_v2_backward back;
  bool max = false;

  size_t forward_slot() const { return floats_of(infer_pd.scratchpad_desc().get_size()); }
  // Backward: max's workspace and forward output, then one scratchpad for the steps in turn.
  size_t workspace_floats() const { return max ? floats_of(train_pd.workspace_desc().get_size()) : 0; }
  size_t output_floats() const { return max ? floats_of(y.get_size()) : 0; }
  size_t backward_slot() const {
    return workspace_floats() + output_floats() +
           std::max(max ? floats_of(train_pd.scratchpad_desc().get_size()) : 0,
                    floats_of(back_pd.scratchpad_desc().get_size()));
  }
  void make() {
    if (made) return;
    infer = dnnl::pooling_v2_forward(infer_pd);
    if (max) train = dnnl::pooling_v2_forward(train_pd);
    back = dnnl::pooling_v2_backward(back_pd);
    made = true;
  }
};

int blocks_of(int planes) { return (planes + CpuPool::kBlock - 1) / CpuPool::kBlock; }

std::string shape_text(PoolKind kind, int planes, const PoolGeometry& g) {
  return std::string(kind == PoolKind::kMax ? "max" : "average") + " pooling of " + std::to_string(planes) +
         " planes " + std::to_string(g.height) + "x" + std::to_string(g.width) + ", window " +
         std::to_string(g.kernel) + " stride " + std::to_string(g.stride);
}

}  // namespace

struct CpuPool::Impl {
  explicit Impl(ThreadPool& p) : pool(p), engine(dnnl::engine::kind::cpu, 0) {
    for (int t = 0; t < pool.threads(); ++t) streams.emplace_back(engine);
  }

  // Called on the thread that calls the backend only (the cache has no lock).
  Entry& entry(PoolKind kind, const PoolGeometry& g, int planes) {
    one_openmp_thread();
    const Key key{static_cast<int>(kind), g.height, g.width, g.kernel, g.stride, planes};
    auto it = cache.find(key);
    if (it != cache.end()) return *it->second;
    try {
      auto e = std::make_unique<Entry>();
      e->max = kind == PoolKind::kMax;
      const auto f32 = memory::data_type::f32;
      e->x = memory::desc({1, planes, g.height, g.width}, f32, tag::nchw);
      e->y = memory::desc({1, planes, g.out_height, g.out_width}, f32, tag::nchw);
      const memory::dims strides{g.stride, g.stride}, window{g.kernel, g.kernel}, none{0, 0};
      // No padding: the average's divisor is K x K either way.
      const auto alg = e->max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
      auto desc = [&](dnnl::prop_kind prop) {
        return dnnl::pooling_v2_forward::desc(prop, alg, e->x, e->y, strides, window, none, none, none);
      };
      e->infer_pd = dnnl::pooling_v2_forward::primitive_desc(desc(dnnl::prop_kind::forward_inference),
                                                             user_scratchpad(), engine);
      e->train_pd = dnnl::pooling_v2_forward::primitive_desc(desc(dnnl::prop_kind::forward_training),
                                                             user_scratchpad(), engine);
      e->back_pd = dnnl::pooling_v2_backward::primitive_desc(
          dnnl::pooling_v2_backward::desc(alg, e->x, e->y, strides, window, none, none, none),
          user_scratchpad(), engine, e->train_pd);
      return *cache.emplace(key, std::move(e)).first->second;
    } catch (const dnnl::error& err) {
      throw Error("oneDNN " + shape_text(kind, planes, g) + ": " + err.what());
    }
  }

  // The entries a call on `planes` planes runs: blocks of kBlock and the shorter last one.
  std::vector<Entry*> entries(PoolKind kind, const PoolGeometry& g, int planes, bool make) {
    std::vector<Entry*> out;
    if (planes >= kBlock) out.push_back(&entry(kind, g, kBlock));
    if (planes % kBlock != 0) out.push_back(&entry(kind, g, planes % kBlock));
    if (make) {
      try {
        for (Entry* e : out) e->make();
      } catch (const dnnl::error& err) {
        throw Error("oneDNN " + shape_text(kind, planes, g) + ": " + err.what());
      }
    }
    return out;
  }
  static Entry& of_block(const std::vector<Entry*>& es, int planes, int block) {
    return *es[(block + 1) * kBlock <= planes ? 0 : es.size() - 1];
  }
  int slots(int planes) const { return std::min(pool.threads(), blocks_of(planes)); }
  static size_t slot_floats(const std::vector<Entry*>& es) {
    size_t slot = 0;
    for (const Entry* e : es) slot = std::max({slot, e->forward_slot(), e->backward_slot()});
    return slot;
  }

  // Runs `block(entry, first plane, stream, slot's scratch)` on every block, blocks over the
  // threads; a oneDNN error becomes pstrain::Error naming the pooling.
  template <typename F>
  void each_block(PoolKind kind, const PoolGeometry& g, int planes, float* scratch, const char* pass,
                  F&& block) {
    const std::vector<Entry*> es = entries(kind, g, planes, true);
    const size_t slot = slot_floats(es);
    std::atomic<int> next_slot{0};
    std::atomic<bool> failed{false};
    std::string why;
    pool.run(static_cast<size_t>(blocks_of(planes)), [&](size_t lo, size_t hi) {
      one_openmp_thread();
      const int s = next_slot++;
      dnnl::stream& stream = streams[static_cast<size_t>(s)];
      try {
        for (size_t b = lo; b < hi; ++b) {
          block(of_block(es, planes, static_cast<int>(b)), b * kBlock, stream,
                scratch + static_cast<size_t>(s) * slot);
        }
        stream.wait();
      } catch (const dnnl::error& err) {
        if (!failed.exchange(true)) why = err.what();
      }
    });
    if (failed) throw Error(std::string("oneDNN ") + shape_text(kind, planes, g) + " " + pass + ": " + why);
  }

  ThreadPool& pool;
  dnnl::engine engine;
  std::vector<dnnl::stream> streams;  // one per thread that may run at once
  std::map<Key, std::unique_ptr<Entry>> cache;
};

CpuPool::CpuPool(ThreadPool& pool) : impl_(std::make_unique<Impl>(pool)) {}
CpuPool::~CpuPool() = default;

bool CpuPool::on_onednn(PoolKind kind, const PoolGeometry& g) {
  return !(kind == PoolKind::kMax && g.kernel == 2 && g.stride == 2 && g.height == 2 * g.out_height &&
           g.width == 2 * g.out_width);
}

size_t CpuPool::scratch_floats(PoolKind kind, int planes, const PoolGeometry& g) const {
  if (!on_onednn(kind, g) || planes <= 0) return 0;
  // Any number up to `planes`: its slots are no more, and its last block is of 1 to kBlock planes.
  size_t most = 0;
  for (int last = 1; last <= std::min(planes, kBlock); ++last) {
    std::vector<Entry*> es{&impl_->entry(kind, g, last)};
    if (planes > kBlock && last < kBlock) es.push_back(&impl_->entry(kind, g, kBlock));
    most = std::max(most, Impl::slot_floats(es));
  }
  return most * static_cast<size_t>(impl_->slots(planes));
}

void CpuPool::forward(PoolKind kind, const float* x, int planes, const PoolGeometry& g, float* y,
                      float* scratch) {
  if (planes <= 0) return;
  Impl& im = *impl_;
  const size_t in = static_cast<size_t>(g.height) * g.width,
               out = static_cast<size_t>(g.out_height) * g.out_width;
  im.each_block(
      kind, g, planes, scratch, "forward", [&](Entry& e, size_t first, dnnl::stream& s, float* base) {
        e.infer.execute(s, {{DNNL_ARG_SRC, memory(e.x, im.engine, const_cast<float*>(x) + first * in)},
                            {DNNL_ARG_DST, memory(e.y, im.engine, y + first * out)},
                            {DNNL_ARG_SCRATCHPAD, memory(e.infer_pd.scratchpad_desc(), im.engine, base)}});
      });
}

void CpuPool::backward(PoolKind kind, const float* x, const float* dy, int planes, const PoolGeometry& g,
                       float* dx, float* scratch) {
  if (planes <= 0) return;
  Impl& im = *impl_;
  const size_t in = static_cast<size_t>(g.height) * g.width,
               out = static_cast<size_t>(g.out_height) * g.out_width;
  im.each_block(
      kind, g, planes, scratch, "backward", [&](Entry& e, size_t first, dnnl::stream& s, float* base) {
        float* pad = base + e.workspace_floats() + e.output_floats();
        std::unordered_map<int, memory> args{
            {DNNL_ARG_DIFF_DST, memory(e.y, im.engine, const_cast<float*>(dy) + first * out)},
            {DNNL_ARG_DIFF_SRC, memory(e.x, im.engine, dx + first * in)},
            {DNNL_ARG_SCRATCHPAD, memory(e.back_pd.scratchpad_desc(), im.engine, pad)}};
        if (e.max) {  // the maxima's positions, from the block's forward run again
          const memory ws(e.train_pd.workspace_desc(), im.engine, base);
          e.train.execute(s, {{DNNL_ARG_SRC, memory(e.x, im.engine, const_cast<float*>(x) + first * in)},
                              {DNNL_ARG_DST, memory(e.y, im.engine, base + e.workspace_floats())},
                              {DNNL_ARG_WORKSPACE, ws},
                              {DNNL_ARG_SCRATCHPAD, memory(e.train_pd.scratchpad_desc(), im.engine, pad)}});
          args.emplace(DNNL_ARG_WORKSPACE, ws);
        }
        e.back.execute(s, args);
      });
}

}  // namespace pstrain
