#include "worker/data/criteo.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace pstrain {
namespace {

constexpr size_t kQuotedMax = 32;  // characters of a bad field shown in a message

// The field as a message shows it: in double quotes, control and non-ASCII bytes as \xNN, cut
// after kQuotedMax characters.
std::string quoted(std::string_view f) {
  std::string q = "\"";
  for (size_t i = 0; i < f.size() && i < kQuotedMax; ++i) {
    const auto c = static_cast<unsigned char>(f[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      q.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      q += buf;
    }
  }
  if (f.size() > kQuotedMax) q += "...";
  return q + "\"";
}

std::string field_text(size_t field, std::string_view f) {
  return "field " + std::to_string(field + 1) + " (" + criteo_field_name(field) + ") " + quoted(f);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string parse_dense(size_t field, std::string_view f, float& out) {
  if (f.empty()) {
    out = 0;
    return "";
  }
  int64_t x = 0;
  const bool digits = f.find_first_not_of("0123456789", f[0] == '-' ? 1 : 0) == std::string_view::npos &&
                      f != "-";
  const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), x);
  if (!digits) return field_text(field, f) + " is not an integer";
  if (ec != std::errc() || end != f.data() + f.size()) return field_text(field, f) + " is outside the int64 range";
  out = criteo_dense_value(x);
  return "";
}

std::string parse_id(size_t field, std::string_view f, uint64_t& out) {
  if (f.empty()) {
    out = kCriteoMissingId;
    return "";
  }
  if (f.size() > 16) return field_text(field, f) + " is not 1 to 16 hex digits";
  uint64_t v = 0;
  for (const char c : f) {
    const int d = hex_digit(c);
    if (d < 0) return field_text(field, f) + " is not 1 to 16 hex digits";
    v = v << 4 | static_cast<uint64_t>(d);
  }
  if (v == kCriteoMissingId) return field_text(field, f) + " is the ID reserved for an empty field";
  out = v;
  return "";
}

}  // namespace

float criteo_dense_value(int64_t x) { return static_cast<float>(std::log1p(static_cast<double>(std::max<int64_t>(x, 0)))); }

std::string criteo_field_name(size_t field) {
  if (field == 0) return "label";
  if (field <= kCriteoDense) return "I" + std::to_string(field);
  return "C" + std::to_string(field - kCriteoDense);
}

std::string parse_criteo_line(std::string_view line, CriteoRecord& out) {
  const size_t fields = static_cast<size_t>(std::count(line.begin(), line.end(), '\t')) + 1;
  if (fields != kCriteoFields) {
    return std::to_string(fields) + (fields == 1 ? " field" : " fields") + ", but a Criteo line has " +
           std::to_string(kCriteoFields) + " (label, I1-I13, C1-C26, separated by tabs)";
  }
  for (size_t field = 0; field < kCriteoFields; ++field) {
    const size_t tab = line.find('\t');
    const std::string_view f = line.substr(0, tab);
    line.remove_prefix(tab == std::string_view::npos ? line.size() : tab + 1);
    std::string problem;
    if (field == 0) {
      if (f != "0" && f != "1") return field_text(field, f) + " is not 0 or 1";
      out.label = f[0] - '0';
    } else if (field <= kCriteoDense) {
      problem = parse_dense(field, f, out.dense[field - 1]);
    } else {
      problem = parse_id(field, f, out.ids[field - 1 - kCriteoDense]);
    }
    if (!problem.empty()) return problem;
  }
  return "";
}

}  // namespace pstrain
