#include "worker/report/metrics_file.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "shared/util/error.h"
#include "shared/util/log.h"

namespace pstrain {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

MetricsFile::MetricsFile(const std::string& path, const std::string& flag) : path_(path), opened_(now_seconds()) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) throw Error(flag + ": cannot create directory " + parent.string() + ": " + ec.message());
  file_.reset(std::fopen(path.c_str(), "a"));
  if (!file_) throw Error(flag + ": cannot write " + path + ": " + std::strerror(errno));
}

void MetricsFile::write(const nlohmann::ordered_json& record) {
  if (!file_) return;
  nlohmann::ordered_json line;
  if (!record.contains("time_s")) line["time_s"] = now_seconds() - opened_;
  for (auto it = record.begin(); it != record.end(); ++it) line[it.key()] = it.value();
  const std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_.get()) != text.size() || std::fflush(file_.get()) != 0) {
    if (!failed_) PSLOG(WARN) << "metrics file " << path_ << ": write failed: " << std::strerror(errno);
    failed_ = true;
  }
}

}  // namespace pstrain
