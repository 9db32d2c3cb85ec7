// Small file helpers.
#pragma once

#include <string>

namespace pstrain {

// Writes `content` to a temporary file beside `path`, then renames it over `path`, so a reader
// sees either nothing or the whole content. Throws pstrain::Error.
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace pstrain
