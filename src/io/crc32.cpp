#include "io/crc32.h"

#include <array>

namespace lmt {

namespace {

// The table of a reflected CRC-32 with polynomial `poly` (bit-reversed).
constexpr std::array<uint32_t, 256> make_table(uint32_t poly) {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_table(0x82f63b78u);
constexpr std::array<uint32_t, 256> kCrc32IeeeTable = make_table(0xedb88320u);

uint32_t update(const std::array<uint32_t, 256>& table, uint32_t crc, std::string_view data) {
  uint32_t c = crc ^ 0xffffffffu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  return update(kCrc32cTable, 0, data);
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

uint32_t crc32_ieee(std::string_view data, uint32_t crc) {
  return update(kCrc32IeeeTable, crc, data);
}

}  // namespace lmt
