// pstrain._core: a Python process as one worker of a pstrain job (docs/python.md). It parses the
// same flags as pstrain-worker (so the launcher starts it as it starts the binary, and roles come
// from the same environment) and joins the job through the same connections and exchange
// (worker/connections.h): the PS modes, the all-reduce and hybrid. The caller's model lives in
// Python; what crosses is one flat float32 vector of its parameters and one of its gradient sums.
//
// Every blocking call releases the GIL; none keeps a pointer into a caller's array past the call.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "shared/config/cluster_env.h"
#include "shared/config/options.h"
#include "shared/net/shared_memory.h"
#include "shared/net/zmq_util.h"
#include "shared/util/error.h"
#include "shared/util/modes.h"
#include "worker/backend/backend.h"
#include "worker/backend/replica.h"
#include "worker/connections.h"
#include "worker/exchange/exchange.h"
#include "worker/python/script_steps.h"
#include "worker/sparse/ctr_input.h"
#include "worker/sparse/embedding_setup.h"

namespace py = pybind11;

namespace pstrain {
namespace {

// A 1-D float32 buffer of `n` elements (that this module may write, if `writable`): the caller's memory
// (numpy's arrays, torch's CPU tensors through numpy, array.array('f')). Through the buffer
// protocol, not numpy's C API, so the module works with numpy 1 and 2 alike.
float* floats_of(const py::buffer& b, size_t n, const char* what, bool writable = true) {
  py::buffer_info info;
  try {
    info = b.request(writable);
  } catch (const py::error_already_set&) {
    throw UsageError(std::string(what) + " must be writable (a numpy array the caller owns)");
  }
  if (info.format != py::format_descriptor<float>::format() || info.itemsize != 4 || info.ndim != 1 ||
      (info.size > 1 && info.strides[0] != 4)) {
    throw UsageError(std::string(what) + " must be a contiguous 1-D float32 array (got format '" + info.format +
                     "', " + std::to_string(info.ndim) + " dimension(s))");
  }
  if (static_cast<size_t>(info.size) != n) {
    throw UsageError(std::string(what) + " has " + std::to_string(info.size) + " elements, the model " +
                     std::to_string(n));
  }
  return static_cast<float*>(info.ptr);
}

class Worker {
 public:
  explicit Worker(const std::vector<std::string>& args) {
    std::vector<const char*> argv{"pstrain-worker"};
    for (const auto& a : args) argv.push_back(a.c_str());
    // parse_job_options' steps, with the data the caller's (no --train-data to check).
    GivenOptions given;
    auto parsed = parse_flags(Role::kWorker, static_cast<int>(argv.size()), argv.data(), &given);
    if (!parsed) throw UsageError("--help was given: nothing to run");
    resolve_cluster(Role::kWorker, read_cluster_env(process_environment()), given, &*parsed);
    parsed->data_elsewhere = true;
    finish_job_options(&*parsed);
    o_ = *parsed;
    keep_message_memory();
    remove_segments_on_termination();
    steps_ = std::make_unique<ScriptSteps>(o_);  // the chief: the checkpoint directory's lock, SIGTERM, metrics
    backend_ = make_cpu_backend(1);  // holds the replica's host buffers only: the model is the caller's
  }

  ~Worker() {
    exchange_.reset();  // before the connections it uses
    connections_.reset();
  }

  const JobOptions& options() const { return o_; }
  uint64_t size() const { return total_; }
  uint64_t current_step() const { return step_; }  // the step this worker computes now
  uint64_t total_steps() const { return total_steps_; }
  // The PS shards' embedding tables (the job's --embedding-dim), once started.
  RowSource& rows() {
    if (!exchange_) throw UsageError("embedding rows before start()");
    RowSource* source = exchange_->row_source();
    if (source == nullptr || o_.embedding_dim == 0) {
      throw UsageError("embedding rows need tables on the PS shards: give the job --embedding-dim D (and PS shards)");
    }
    return *source;
  }

  // Joins the job with `params` (every worker the same values: the chief's start the job) and
  // leaves in it the parameters of the returned step, the first this worker runs. `variables`
  // ((name, shape) pairs in the vector's order; None: one, "params") name its parts in
  // checkpoints, for pstrain-export.
  uint64_t start(const py::buffer& params, uint64_t total_steps, uint64_t steps_per_epoch,
                 const std::optional<std::vector<std::pair<std::string, std::vector<size_t>>>>& variables) {
    if (exchange_) throw UsageError("start() was called already");
    const py::buffer_info shape = params.request();
    total_ = static_cast<uint64_t>(shape.size);
    if (total_ == 0) throw UsageError("the model has no parameters");
    float* values = floats_of(params, total_, "params");
    const Layout layout = layout_of(variables);
    replica_ = std::make_unique<Replica>(*backend_, total_, 1);
    std::memcpy(replica_->host_params(), values, total_ * sizeof(float));
    total_steps_ = total_steps;
    uint64_t first = 0;
    {
      py::gil_scoped_release unlocked;
      connections_ = std::make_unique<WorkerConnections>(o_);
      exchange_ = connections_->make_exchange(total_, *replica_);
      first = exchange_->start(replica_->host_params(), total_steps);
    }
    std::memcpy(values, replica_->host_params(), total_ * sizeof(float));
    step_ = first;
    steps_->started(layout, total_steps, steps_per_epoch, first);
    return first;
  }

  // Pushes the gradient sums of step `step` over `samples` samples and leaves the parameters of
  // the next step in `params`. Returns the step's figures.
  py::dict step(uint64_t step, const py::buffer& grad, const py::buffer& params, uint64_t samples, double loss_sum, uint64_t correct) {
    if (!exchange_) throw UsageError("step() before start()");
    if (samples == 0) throw UsageError("a step of 0 samples");
    const float* g = floats_of(grad, total_, "grad", false);
    float* values = floats_of(params, total_, "params");
    std::memcpy(replica_->host_grad(), g, total_ * sizeof(float));
    PushInfo info = plan(step);
    info.samples = samples;
    info.loss_sum = loss_sum;
    info.correct = correct;
    info.times = previous_;
    StepMetrics m;
    {
      py::gil_scoped_release unlocked;
      exchange_->gradient_ready(step, replica_->host_grad(), 0, info);  // all of it is final
      m = exchange_->finish_step(step, replica_->host_params(), replica_->host_grad(), info, &previous_);
      steps_->finished(step, info, m, &previous_);
    }
    std::memcpy(values, replica_->host_params(), total_ * sizeof(float));
    step_ = m.next_step;
    stopped_ = stopped_ || m.stop;
    py::dict out;
    out["next_step"] = m.next_step;
    out["version"] = m.version;
    out["samples"] = m.samples;
    out["loss"] = m.samples > 0 ? m.loss_sum / static_cast<double>(m.samples) : 0.0;
    out["accuracy"] = m.samples > 0 ? static_cast<double>(m.correct) / static_cast<double>(m.samples) : 0.0;
    out["stop"] = m.stop;
    return out;
  }

  // Step `step`'s checkpoint and stop, decided once, by whichever push of the step comes first:
  // a Rows push (before the dense gradient: its pushes must carry the plan too) or step().
  PushInfo plan(uint64_t step) {
    if (!exchange_) throw UsageError("step() before start()");
    if (planned_step_ != step) {
      planned_ = PushInfo();
      steps_->plan(step, &planned_);
      exchange_->plan_step(step, planned_);
      planned_step_ = step;
    }
    return planned_;
  }

  // The job stopped after a final checkpoint (the chief was asked to stop): resume it with --resume.
  bool stopped() const { return stopped_; }

  // A Rows reads the job's tables as `fields` fields: model.json says so.
  void tables_read(size_t fields, EmbeddingPool pool) { steps_->tables_read(fields, pool); }

  void done(bool stopped) {
    if (!exchange_) return;
    py::gil_scoped_release unlocked;
    exchange_->done(stopped || stopped_);
  }

 private:
  // start()'s variables as a layout of total_ floats; names that a MANIFEST line and a file name
  // can hold (a torch state_dict's: "bottom.0.weight").
  Layout layout_of(const std::optional<std::vector<std::pair<std::string, std::vector<size_t>>>>& variables) const {
    Layout layout;
    if (!variables) {
      layout.add("params", {static_cast<size_t>(total_)});
      return layout;
    }
    std::set<std::string> names;
    for (const auto& [name, shape] : *variables) {
      if (name.empty() || name.find_first_of(" \t\n\r/\\") != std::string::npos || name[0] == '.') {
        throw UsageError("variables: '" + name + "' is not a variable name (no spaces, '/' or a leading '.')");
      }
      if (!names.insert(name).second) throw UsageError("variables: '" + name + "' appears twice");
      layout.add(name, shape.empty() ? std::vector<size_t>{1} : shape);  // a 0-d tensor as [1]
    }
    if (layout.total() != total_) {
      throw UsageError("variables hold " + std::to_string(layout.total()) + " values, params " + std::to_string(total_));
    }
    return layout;
  }

  JobOptions o_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Replica> replica_;
  std::unique_ptr<WorkerConnections> connections_;
  std::unique_ptr<Exchange> exchange_;
  std::unique_ptr<ScriptSteps> steps_;
  bool stopped_ = false;
  uint64_t planned_step_ = UINT64_MAX;  // plan()'s
  PushInfo planned_;
  uint64_t total_ = 0;
  uint64_t step_ = 0;
  uint64_t total_steps_ = 0;
  StepTimes previous_{};
};

// A batch's IDs as pull() takes them: ids (64-bit), and counts (n x fields, each >= 1) or none
// (one ID per field). Copied: a prefetch keeps them past the call.
struct BatchIds {
  std::vector<uint64_t> ids;
  std::vector<uint32_t> counts;
  size_t n = 0;

  BatchIds() = default;
  BatchIds(const py::buffer& id_buffer, size_t records, const py::object& count_buffer, size_t fields) : n(records) {
    const py::buffer_info id_info = id_buffer.request();
    if (id_info.itemsize != 8 || (id_info.format != "Q" && id_info.format != "q" && id_info.format != "l" &&
                                  id_info.format != "L")) {
      throw UsageError("ids must be a contiguous array of 64-bit integers (got format '" + id_info.format + "')");
    }
    size_t want = n * fields;
    if (!count_buffer.is_none()) {
      const py::buffer_info c = py::buffer(count_buffer).request();
      if (c.itemsize != 4 || c.size != static_cast<py::ssize_t>(n * fields)) {
        throw UsageError("counts must hold n x fields uint32 values");
      }
      const auto* p = static_cast<const uint32_t*>(c.ptr);
      counts.assign(p, p + n * fields);
      want = 0;
      for (uint32_t k : counts) {
        if (k == 0) throw UsageError("a field of 0 IDs (counts must be >= 1)");
        want += k;
      }
    }
    if (static_cast<size_t>(id_info.size) != want) {
      throw UsageError("ids hold " + std::to_string(id_info.size) + " IDs, the batch " + std::to_string(want));
    }
    const auto* raw = static_cast<const uint64_t*>(id_info.ptr);
    ids.assign(raw, raw + want);
  }

  const uint32_t* count_data() const { return counts.empty() ? nullptr : counts.data(); }
  bool operator==(const BatchIds& o) const { return n == o.n && ids == o.ids && counts == o.counts; }
};

// Embedding rows for a Python model: per batch, the rows of its records' IDs pulled from the PS
// shards (pooled per field: the sum, or the mean, of a field's IDs), and after backward the
// gradient of the pooled rows pushed back, one summed row per unique ID (worker/sparse/ctr_input.h,
// the C++ workers' CTR input without dense features). With prefetch(), the next step's rows are
// asked for right after this step's push, at the next step's version, as the C++ trainer does
// (worker/train/embedding_rows_input.cc): the shards answer once this step is applied (sync), so the
// rows are those a pull at the next step would get, and they travel while the caller's dense
// step completes.
class Rows {
 public:
  Rows(Worker& worker, size_t fields, bool per_field_tables, const std::string& pool) : worker_(worker) {
    const JobOptions& o = worker.options();
    EmbeddingInputOptions e;
    e.dense = 0;
    e.fields = fields;
    e.dim = static_cast<uint32_t>(o.embedding_dim);
    e.per_field_tables = per_field_tables;
    e.num_ps = o.num_ps;
    if (!parse_embedding_pool(pool, &e.pool)) throw UsageError("pool '" + pool + "': sum or mean");
    if (e.dim == 0) throw UsageError("embedding rows need the job's --embedding-dim D (the rows' floats)");
    input_ = std::make_unique<CtrInput>(e);
    worker.tables_read(fields, e.pool);
    fields_ = fields;
  }

  size_t width() const { return input_->input_dim(); }  // floats per record: fields x dim
  uint64_t prefetched() const { return prefetched_; }     // pulls whose rows a prefetch asked for

  // The pooled rows of n records (ids: n x fields IDs, or with counts (n x fields, each >= 1) the
  // IDs of each field in turn) at the worker's current step, into out (n x width floats).
  void pull(const py::buffer& ids, size_t n, const py::object& counts, const py::buffer& out) {
    BatchIds batch(ids, n, counts, fields_);
    float* x = floats_of(out, n * width(), "out");
    RowSource& source = worker_.rows();
    input_->set_source(&source);
    const uint64_t version = worker_.current_step();
    const bool reuse = input_->requested() && asked_version_ == version && asked_ == batch;
    if (input_->requested() && asked_version_ > version) {  // its answer waits for this step's end
      throw UsageError("pull() at step " + std::to_string(version) + " after this step's push: the rows of step " +
                       std::to_string(asked_version_) + " are prefetched (pull after the optimizer's step)");
    }
    py::gil_scoped_release unlocked;
    if (input_->requested() && !reuse) input_->discard();  // prefetched IDs that were not the batch's
    if (!reuse) input_->request(batch.ids.data(), batch.count_data(), n, version);
    if (reuse) ++prefetched_;
    input_->input(nullptr, 0, n, x);
    n_ = n;
  }

  // The IDs the next step's pull will take (as pull's): asked for by the next push().
  void prefetch(const py::buffer& ids, size_t n, const py::object& counts) {
    next_ = std::make_unique<BatchIds>(ids, n, counts, fields_);
  }

  // The gradient of the summed loss with respect to the last pull's rows (n x width floats),
  // pushed to the shards for the current step over `samples` samples; then the prefetched IDs'
  // rows asked for at the next step.
  void push(const py::buffer& dx, uint64_t samples) {
    if (n_ == 0) throw UsageError("push() without a pull()");
    const float* g = floats_of(dx, n_ * width(), "dx", false);
    input_->add_gradient(0, n_, g);
    const uint64_t step = worker_.current_step();
    worker_.plan(step);  // this step's checkpoint, which the rows' pushes carry (hybrid)
    std::unique_ptr<BatchIds> next = std::move(next_);
    py::gil_scoped_release unlocked;
    input_->push(step, samples);
    if (next && step + 1 < worker_.total_steps()) {
      input_->request(next->ids.data(), next->count_data(), next->n, step + 1);
      asked_version_ = step + 1;
      asked_ = std::move(*next);
    }
  }

 private:
  Worker& worker_;
  std::unique_ptr<CtrInput> input_;
  size_t fields_ = 0, n_ = 0;
  std::unique_ptr<BatchIds> next_;  // prefetch()'s IDs, until the next push()
  BatchIds asked_{};                // the IDs of the request in flight, at asked_version_
  uint64_t asked_version_ = 0;
  uint64_t prefetched_ = 0;
};

}  // namespace
}  // namespace pstrain

PYBIND11_MODULE(_core, m) {
  using pstrain::Worker;
  m.doc() = "pstrain's worker side for Python: one process of a job (docs/python.md)";
  // pybind11 tries the later registration first: the derived UsageError (bad flags or calls, a
  // subclass of pstrain.Error and of ValueError in Python) after Error (anything else that failed).
  const auto error = py::register_exception<pstrain::Error>(m, "Error", PyExc_RuntimeError);
  const py::tuple usage_bases = py::make_tuple(error, py::handle(PyExc_ValueError));
  py::register_exception<pstrain::UsageError>(m, "UsageError", usage_bases);
  py::class_<Worker>(m, "Worker")
      .def(py::init<const std::vector<std::string>&>(), py::arg("args"),
           "Parses pstrain-worker's flags (and the cluster environment); connects nothing yet.")
      .def_property_readonly("index", [](const Worker& w) { return w.options().index; })
      .def_property_readonly("num_workers", [](const Worker& w) { return w.options().num_workers; })
      .def_property_readonly("num_ps", [](const Worker& w) { return w.options().num_ps; })
      .def_property_readonly("batch_size", [](const Worker& w) { return w.options().batch_size; })
      .def_property_readonly("steps", [](const Worker& w) { return w.options().steps; })
      .def_property_readonly("epochs", [](const Worker& w) { return w.options().epochs; })
      .def_property_readonly("seed", [](const Worker& w) { return w.options().seed; })
      .def_property_readonly("mode", [](const Worker& w) { return std::string(pstrain::mode_name(w.options().mode)); })
      .def_property_readonly("size", &Worker::size)
      .def("start", &Worker::start, py::arg("params"), py::arg("total_steps"), py::arg("steps_per_epoch") = 0,
           py::arg("variables") = py::none())
      .def("step", &Worker::step, py::arg("step"), py::arg("grad"), py::arg("params"), py::arg("samples"),
           py::arg("loss_sum") = 0.0, py::arg("correct") = 0)
      .def("done", &Worker::done, py::arg("stopped") = false)
      .def_property_readonly("stopped", &Worker::stopped)
      .def_property_readonly("step_index", &Worker::current_step)
      .def_property_readonly("embedding_dim", [](const Worker& w) { return w.options().embedding_dim; });
  py::class_<pstrain::Rows>(m, "Rows")
      .def(py::init<Worker&, size_t, bool, const std::string&>(), py::arg("worker"), py::arg("fields"),
           py::arg("per_field_tables") = false, py::arg("pool") = "sum", py::keep_alive<1, 2>())
      .def_property_readonly("width", &pstrain::Rows::width)
      .def_property_readonly("prefetched", &pstrain::Rows::prefetched)
      .def("pull", &pstrain::Rows::pull, py::arg("ids"), py::arg("n"), py::arg("counts"), py::arg("out"))
      .def("push", &pstrain::Rows::push, py::arg("dx"), py::arg("samples"))
      .def("prefetch", &pstrain::Rows::prefetch, py::arg("ids"), py::arg("n"), py::arg("counts"));
}
