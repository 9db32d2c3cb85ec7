#include "shared/util/text.h"

#include <algorithm>
#include <cctype>

namespace pstrain {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

namespace {

std::string lower(const std::string& s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Optimal string alignment distance (Damerau-Levenshtein without repeated edits of a substring).
size_t distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string w = lower(word);
  const size_t limit = std::max<size_t>(1, w.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  bool tied = false;
  for (const std::string& c : candidates) {
    const size_t d = distance(w, lower(c));
    if (d < best_distance) {
      best = c;
      best_distance = d;
      tied = false;
    } else if (d == best_distance && c != best) {
      tied = true;
    }
  }
  return best_distance <= limit && !tied ? best : "";
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates,
                         const std::string& prefix) {
  const std::string c = closest(word, candidates);
  return c.empty() ? "" : " (did you mean '" + prefix + c + "'?)";
}

}  // namespace pstrain
