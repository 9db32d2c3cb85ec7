// Small string helpers the config parsers share.
#pragma once

#include <string>
#include <vector>

namespace pstrain {

// `s` without leading and trailing spaces, tabs, carriage returns and newlines.
std::string trim(const std::string& s);

// The candidate a mistyped `word` most likely meant, or "" when none is close: the one at the
// least edit distance (insertions, deletions, substitutions and swaps of neighbours; letter case
// ignored), if that distance is at most a third of the word's length (at least 1) and no other
// candidate is as close. For "did you mean" in usage errors.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

// " (did you mean 'X'?)" for closest(word, candidates), with `prefix` before X (e.g. "--"); "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates,
                         const std::string& prefix = "");

}  // namespace pstrain
