// The two CRC-32s of lmtrain's record files, table-driven (one byte a step; the files are small):
// CRC-32C (Castagnoli), which TFRecord framing stores masked (TensorBoard's event files), and the
// CRC-32 of zlib and Ethernet (IEEE 802.3), which W&B's transaction log stores as it is.
#pragma once

#include <cstdint>
#include <string_view>

namespace lmt {

uint32_t crc32c(std::string_view data);         // CRC-32C (Castagnoli), as in iSCSI and ext4
uint32_t masked_crc32c(std::string_view data);  // TFRecord's ((crc >> 15) | (crc << 17)) + k
// CRC-32 (IEEE), as zlib's crc32(): `crc` is the value of the bytes before `data`, so a CRC can
// run over pieces.
uint32_t crc32_ieee(std::string_view data, uint32_t crc = 0);

}  // namespace lmt
