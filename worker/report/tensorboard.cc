#include "worker/report/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "shared/util/crc32c.h"
#include "shared/util/error.h"
#include "shared/util/log.h"

namespace pstrain {
namespace {

// Protobuf wire types (https://protobuf.dev/programming-guides/encoding/).
constexpr uint32_t kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5;

void put_varint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void put_key(uint32_t field, uint32_t wire_type, std::string* out) { put_varint(field << 3 | wire_type, out); }

void put_le(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_double(uint32_t field, double v, std::string* out) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(field, kFixed64, out);
  put_le(bits, 8, out);
}

void put_float(uint32_t field, float v, std::string* out) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(field, kFixed32, out);
  put_le(bits, 4, out);
}

void put_bytes(uint32_t field, const std::string& bytes, std::string* out) {
  put_key(field, kBytes, out);
  put_varint(bytes.size(), out);
  out->append(bytes);
}

// tensorflow.Event's fields (tensorflow/core/util/event.proto), Summary's and Summary.Value's
// (tensorflow/core/framework/summary.proto).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2;

// "compute_ms" -> "compute": a breakdown part's tag under step_ms/.
std::string part_of(const std::string& key) {
  const std::string suffix = "_ms";
  const bool ms = key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
  return ms ? key.substr(0, key.size() - suffix.size()) : key;
}

// A figure's tag: progress figures under train/, an epoch's test_X as test/X and the rest under
// epoch/, a summary's (and those of any kind to come) under its kind.
std::string tag_of(const std::string& kind, const std::string& key) {
  if (kind == "progress") return "train/" + key;
  if (kind == "epoch") return key.rfind("test_", 0) == 0 ? "test/" + key.substr(5) : "epoch/" + key;
  return kind + "/" + key;
}

bool is_step_counter(const std::string& key) {
  return key == "step" || key == "steps" || key == "epoch_step" || key == "time_s";
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

class EventFile final : public MetricsSink {
 public:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };

  EventFile(std::string path, std::unique_ptr<std::FILE, Closer> file) : path_(std::move(path)), file_(std::move(file)) {}

  // The file_version record; false with errno set if it could not be written.
  bool start() { return append(encode_file_version_event(unix_seconds())); }

  void write(const nlohmann::ordered_json& record) override {
    const StepScalars s = scalars_of(record);
    if (s.scalars.empty() || failed_) return;
    if (!append(encode_scalars_event(unix_seconds(), s.step, s.scalars))) {
      PSLOG(WARN) << "tensorboard event file " << path_ << ": write failed: " << std::strerror(errno)
                  << "; no more events are written";
      failed_ = true;
    }
  }

 private:
  bool append(const std::string& event) {
    const std::string record = tfrecord(event);
    return std::fwrite(record.data(), 1, record.size(), file_.get()) == record.size() && std::fflush(file_.get()) == 0;
  }

  const std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
  bool failed_ = false;
};

}  // namespace

StepScalars scalars_of(const nlohmann::ordered_json& record) {
  StepScalars out;
  if (!record.is_object() || !record.contains("kind") || !record.at("kind").is_string()) return out;
  const std::string kind = record.at("kind").get<std::string>();
  const char* step_key = record.contains("step") ? "step" : "steps";
  if (!record.contains(step_key) || !record.at(step_key).is_number_integer()) return out;
  out.step = record.at(step_key).get<int64_t>();
  for (auto it = record.begin(); it != record.end(); ++it) {
    if (it.value().is_number() && !is_step_counter(it.key())) {
      out.scalars.push_back({tag_of(kind, it.key()), it.value().get<float>()});
    } else if (it.key() == "breakdown" && it.value().is_object()) {
      const std::string prefix = kind == "progress" ? "step_ms/" : kind + "/step_ms/";
      for (auto part = it.value().begin(); part != it.value().end(); ++part) {
        if (part.value().is_number()) out.scalars.push_back({prefix + part_of(part.key()), part.value().get<float>()});
      }
    } else if (it.key() == "ps" && it.value().is_object()) {  // progress: {"ps0": {"apply_ms": ..}, ..}
      for (auto shard = it.value().begin(); shard != it.value().end(); ++shard) {
        if (!shard.value().is_object()) continue;
        for (auto f = shard.value().begin(); f != shard.value().end(); ++f) {
          if (f.value().is_number()) out.scalars.push_back({shard.key() + "/" + f.key(), f.value().get<float>()});
        }
      }
    }
  }
  return out;
}

std::string encode_file_version_event(double wall_time) {
  std::string event;
  put_double(kEventWallTime, wall_time, &event);
  put_bytes(kEventFileVersion, "brain.Event:2", &event);
  return event;
}

std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const Scalar& s : scalars) {
    std::string value;
    put_bytes(kValueTag, s.tag, &value);
    put_float(kValueSimpleValue, s.value, &value);
    put_bytes(kSummaryValue, value, &summary);
  }
  std::string event;
  put_double(kEventWallTime, wall_time, &event);
  put_key(kEventStep, kVarint, &event);
  put_varint(static_cast<uint64_t>(step), &event);  // int64: two's complement, as protobuf does
  put_bytes(kEventSummary, summary, &event);
  return event;
}

std::string tfrecord(const std::string& data) {
  std::string length;
  put_le(data.size(), 8, &length);
  std::string out = length;
  put_le(crc32c::mask(crc32c::value(length.data(), length.size())), 4, &out);
  out += data;
  put_le(crc32c::mask(crc32c::value(data.data(), data.size())), 4, &out);
  return out;
}

std::string chief_run_dir(const std::string& dir) { return dir + "/chief"; }

std::string worker_run_dir(const std::string& dir, int index) { return dir + "/w" + std::to_string(index); }

std::unique_ptr<MetricsSink> open_tensorboard(const std::string& dir, const std::string& flag) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(flag + ": cannot create directory " + dir + ": " + ec.message());
  // A new file every time (a replaced or resumed chief starts its own; TensorBoard reads them
  // all, in name order); "x": never another's, should a name repeat within a second.
  const std::string base = (std::filesystem::path(dir) / "events.out.tfevents.").string() +
                           std::to_string(static_cast<long long>(unix_seconds())) + "." + host_name() + "." +
                           std::to_string(static_cast<long long>(getpid()));
  std::string path = base;
  std::unique_ptr<std::FILE, EventFile::Closer> file;
  for (int n = 1; !file; ++n) {
    file.reset(std::fopen(path.c_str(), "wbx"));
    if (!file && (errno != EEXIST || n > 100)) throw Error(flag + ": cannot write " + path + ": " + std::strerror(errno));
    if (!file) path = base + "." + std::to_string(n);
  }
  auto sink = std::make_unique<EventFile>(path, std::move(file));
  if (!sink->start()) throw Error(flag + ": cannot write " + path + ": " + std::strerror(errno));
  PSLOG(INFO) << "tensorboard events to " << path;
  return sink;
}

}  // namespace pstrain
