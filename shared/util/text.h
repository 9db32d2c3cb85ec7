// Small string helpers the config parsers share.
#pragma once

#include <string>

namespace pstrain {

// `s` without leading and trailing spaces, tabs, carriage returns and newlines.
std::string trim(const std::string& s);

}  // namespace pstrain
