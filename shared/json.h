// A strict JSON reader (RFC 8259) for small documents from the environment, such as Kubeflow's
// TF_CONFIG. It keeps object members in document order, refuses duplicate keys, and reports the
// first error with its line, column and byte offset. Not for large or untrusted-by-the-MiB input:
// nesting is limited to kMaxJsonDepth.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace pstrain {

constexpr int kMaxJsonDepth = 64;

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;  // kString: the decoded string (UTF-8); kNumber: the literal as written
  std::vector<JsonValue> items;                             // kArray
  std::vector<std::pair<std::string, JsonValue>> members;  // kObject, in document order
  size_t offset = 0;                                        // where the value starts in the document

  const JsonValue* find(const std::string& key) const;  // kObject: the member's value, or nullptr
};

const char* json_type_name(JsonValue::Type type);  // "null", "a boolean", "a number", ...

// Parses the whole of `text`. Throws pstrain::UsageError
// "<what> is not valid JSON: <problem> at line L, column C (offset N)".
JsonValue parse_json(const std::string& text, const std::string& what);

}  // namespace pstrain
