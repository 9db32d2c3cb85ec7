// Small files the tests write: text as it is, and the same gzip-compressed.
#pragma once

#include <string>

namespace pstrain::test {

// `path` holding exactly `text` (created or truncated).
void write_text(const std::string& path, const std::string& text);
// `path` holding `text` gzip-compressed; a failed expectation when it cannot be written.
void write_gzip(const std::string& path, const std::string& text);

}  // namespace pstrain::test
