#include "worker/data/criteo.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace pstrain {
namespace {

constexpr size_t kQuotedMax = 32;  // characters of a bad field shown in a message

}  // namespace

std::string quote_field(std::string_view f) {
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

namespace {

std::string quoted(std::string_view f) { return quote_field(f); }

// `field` counts from the label's place; a line without the label has its fields one place
// earlier, and messages give the line's own field number.
thread_local size_t field_shift = 1;

std::string field_text(size_t field, std::string_view f) {
  return "field " + std::to_string(field + field_shift) + " (" + criteo_field_name(field) + ") " + quoted(f);
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

}  // namespace

bool parse_hex_id(std::string_view f, uint64_t& out) {
  if (f.empty() || f.size() > 16) return false;
  uint64_t v = 0;
  for (const char c : f) {
    const int d = hex_digit(c);
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  out = v;
  return true;
}

namespace {

bool parse_hex(std::string_view f, uint64_t& out) { return parse_hex_id(f, out); }

// A field of one ID (or none: the missing ID).
std::string parse_id(size_t field, std::string_view f, uint64_t& out) {
  if (f.empty()) {
    out = kCriteoMissingId;
    return "";
  }
  if (!parse_hex(f, out)) return field_text(field, f) + " is not 1 to 16 hex digits";
  if (out == kCriteoMissingId) return field_text(field, f) + " is the ID reserved for an empty field";
  return "";
}

// A field listing several IDs separated by ',' (`f` holds at least one ','): appended to `lists`.
std::string parse_id_list(size_t field, std::string_view f, std::vector<uint64_t>& lists, uint32_t& count) {
  const size_t ids = static_cast<size_t>(std::count(f.begin(), f.end(), ',')) + 1;
  if (ids > kCriteoMaxIds) {
    return field_text(field, f) + " lists " + std::to_string(ids) + " IDs, more than " +
           std::to_string(kCriteoMaxIds) + " (the most one field may hold)";
  }
  const auto wrong = [&](size_t k, const std::string& what) {
    return field_text(field, f) + ": ID " + std::to_string(k) + " of " + std::to_string(ids) + " " + what;
  };
  std::string_view rest = f;
  for (size_t k = 1; k <= ids; ++k) {
    const size_t comma = rest.find(',');
    const std::string_view element = rest.substr(0, comma);
    rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
    uint64_t v = 0;
    if (element.empty()) return wrong(k, "is empty (IDs are separated by one ',')");
    if (!parse_hex(element, v)) return wrong(k, quoted(element) + " is not 1 to 16 hex digits");
    if (v == kCriteoMissingId) return wrong(k, "is the ID reserved for an empty field");
    lists.push_back(v);
  }
  count = static_cast<uint32_t>(ids);
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
  if (fields != kCriteoFields && fields != kCriteoFields - 1) {
    return std::to_string(fields) + (fields == 1 ? " field" : " fields") + ", but a Criteo line has " +
           std::to_string(kCriteoFields) + " (label, I1-I13, C1-C26, separated by tabs), or " +
           std::to_string(kCriteoFields - 1) + " without the label (input to --predict)";
  }
  const bool labelled = fields == kCriteoFields;
  field_shift = labelled ? 1 : 0;
  out.lists.clear();
  if (!labelled) out.label = kCriteoNoLabel;
  for (size_t field = labelled ? 0 : 1; field < kCriteoFields; ++field) {
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
      const size_t c = field - 1 - kCriteoDense;
      out.counts[c] = 1;
      if (f.find(',') == std::string_view::npos) {
        problem = parse_id(field, f, out.ids[c]);
      } else {
        const size_t first = out.lists.size();
        problem = parse_id_list(field, f, out.lists, out.counts[c]);
        if (problem.empty()) out.ids[c] = out.lists[first];
      }
    }
    if (!problem.empty()) return problem;
  }
  return "";
}

}  // namespace pstrain
