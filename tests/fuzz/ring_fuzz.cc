// libFuzzer target: the ring collective's header decoder and header comparison
// (worker/collective/ring_wire.h) on arbitrary bytes; a decoded header re-encodes to the same 64 bytes'
// meaning and matches itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "worker/collective/ring_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pstrain::RingHeader h;
  std::string error;
  if (!pstrain::decode_ring_header(data, size, &h, &error)) {
    if (error.empty()) std::abort();
    return 0;
  }
  const pstrain::Frame again = pstrain::encode_ring_header(h);
  pstrain::RingHeader h2;
  if (!pstrain::decode_ring_header(again.data(), again.size(), &h2, &error)) std::abort();
  if (!pstrain::ring_header_matches(h2, h, &error)) std::abort();
  pstrain::RingHeader other = h;
  other.seq += 1;
  if (pstrain::ring_header_matches(other, h, &error) || error.empty()) std::abort();
  return 0;
}
