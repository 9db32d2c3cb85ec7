// TensorBoard event files of the chief's metrics (docs/operations.md, "TensorBoard"): every
// number of every metrics record (worker/report/metrics_sink.h) as a scalar, tagged by its record's
// kind and its name ("train/loss", "step_ms/compute", "ps0/apply_ms", "test/accuracy"), at the
// record's global step. The file is what TensorFlow's summary writer makes: TFRecords (length,
// masked CRC-32C, data, masked CRC-32C) of protobuf tensorflow.Event messages, of which only the
// few fields a scalar needs are written, by hand.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "worker/report/metrics_sink.h"

namespace pstrain {

struct Scalar {
  std::string tag;
  float value = 0;
};

// A metrics record's scalars and the global step they belong to: the record's "step" (the
// summary's "steps"); no scalars for a record without one. Strings and booleans are left out,
// so are the step counters themselves.
struct StepScalars {
  int64_t step = 0;
  std::vector<Scalar> scalars;
};
StepScalars scalars_of(const nlohmann::ordered_json& record);

// Serialized tensorflow.Event messages: the first of every file, Event{wall_time, file_version:
// "brain.Event:2"}; and Event{wall_time, step, summary: Summary{value: [Value{tag,
// simple_value}, ...]}}. wall_time is in seconds since the Unix epoch.
std::string encode_file_version_event(double wall_time);
std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars);

// `data` framed as a TFRecord: its length (uint64), the masked CRC-32C of those 8 bytes
// (uint32), the data, the masked CRC-32C of the data (uint32); integers little-endian.
std::string tfrecord(const std::string& data);

// The runs under --tensorboard-dir DIR, named for what they are (TensorBoard names a run by its
// directory): the chief's figures of the job (its metrics records) in DIR/chief, worker i's own
// (its step breakdown and its training loss, worker/report/own_figures.h) in DIR/w<i>.
std::string chief_run_dir(const std::string& dir);
std::string worker_run_dir(const std::string& dir, int index);

// A new event file in `dir` (made if missing), events.out.tfevents.<unix seconds>.<host>.<pid>
// as TensorFlow names them, with its file_version record written: a sink that appends an event
// of each record's scalars, flushed at once, so TensorBoard shows them as the run goes. A
// directory or file that cannot be made throws pstrain::Error naming `flag`, the path and the
// reason; a failed write later is logged once, never fatal.
std::unique_ptr<MetricsSink> open_tensorboard(const std::string& dir, const std::string& flag);

}  // namespace pstrain
