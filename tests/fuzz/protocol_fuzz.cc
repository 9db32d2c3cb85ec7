// libFuzzer target: the PS protocol's header decoder and frame check (shared/wire/protocol.h) on
// arbitrary bytes. Invariant beyond "no crash": a header that decodes re-encodes to bytes that
// decode to the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "shared/wire/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pstrain::Header h;
  std::string error;
  if (!pstrain::decode_header(data, size, &h, &error)) {
    if (error.empty()) std::abort();  // a refusal always says why
    return 0;
  }
  for (size_t frames = 0; frames < 4; ++frames) {
    pstrain::check_frames(h, frames, size, &error);
    pstrain::check_frames(h, frames, h.length * sizeof(float), &error);
  }
  const std::string again = pstrain::encode_header(h);
  pstrain::Header h2;
  if (!pstrain::decode_header(again.data(), again.size(), &h2, &error)) std::abort();
  if (h2.op != h.op || h2.step != h.step || h2.offset != h.offset || h2.length != h.length ||
      h2.sender != h.sender || h2.samples != h.samples || h2.message != h.message) {
    std::abort();
  }
  return 0;
}
