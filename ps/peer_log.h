// How the PS loop (ps/server.h) names a peer in its log, and which replies it could not send
// are worth a line. A worker that exits while one of its requests is parked still gets a
// WAITING report every second; each would fail ("Host unreachable") and, logged, fill the log
// with four lines a second for as long as the stall lasts, hiding the line that says why. So a
// peer's first failed reply is logged, and the next one only after a reply to it went out.
#pragma once

#include <string>
#include <unordered_set>

namespace pstrain {

// "peer 0x..." : ZeroMQ's routing ID of the peer, in hex.
inline std::string peer_name(const std::string& route) {
  static const char* hex = "0123456789abcdef";
  std::string out = "peer 0x";
  for (unsigned char c : route) out += {hex[c >> 4], hex[c & 15]};
  return out;
}

class ReplyDrops {
 public:
  // A reply to `route` could not go: true if it is the first since one last went (log it).
  bool dropped(const std::string& route) { return failing_.insert(route).second; }
  // A reply to `route` went out.
  void sent(const std::string& route) {
    if (!failing_.empty()) failing_.erase(route);
  }

 private:
  std::unordered_set<std::string> failing_;  // routes whose last reply could not go
};

}  // namespace pstrain
