// CRC-32C (Castagnoli: polynomial 0x1EDC6F41, bits reflected, as iSCSI (RFC 3720), ext4 and
// TFRecord files use it), 8 bytes at a time with SSE 4.2's crc32 instruction where the CPU has it,
// else byte by byte from a 256-entry table; and the masked form that
// TFRecord stores (a CRC kept beside the data it covers is masked, so that the CRC of a record
// holding CRCs stays well distributed).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pstrain::crc32c {

// The CRC-32C of data[0, n) following `crc`, the CRC of the bytes before them (0 for none):
// extend(extend(0, a, n), b, m) is the CRC of a then b.
uint32_t extend(uint32_t crc, const void* data, size_t n);
uint32_t value(const void* data, size_t n);  // extend(0, data, n)

// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8; unmask(mask(c)) == c.
uint32_t mask(uint32_t crc);
uint32_t unmask(uint32_t masked);

}  // namespace pstrain::crc32c
