// Decoders for Parquet's level and byte-array encodings (see encodings.h). Bit-unpacking reads a
// value at a time with a fast 8-byte load where the buffer allows it; it is not the bottleneck
// next to decompression and the per-document work downstream.
#include "data/parquet/encodings.h"

#include <cstring>

#include "core/error.h"

namespace lmt::parquet {

namespace {

// Pages are at most 1 GiB, so a decoded page is too; more is corruption.
constexpr size_t kMaxArena = size_t{1} << 30;

[[noreturn]] void fail(const std::string& what, const std::string& reason) {
  throw UserError(what + ": " + reason);
}

uint64_t uleb(Bytes& in, const std::string& what) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in.p >= in.end) fail(what, "encoded data ends early");
    uint8_t b = *in.p++;
    v |= uint64_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) return v;
  }
  fail(what, "malformed varint in encoded data");
}

int64_t zigzag(Bytes& in, const std::string& what) {
  uint64_t z = uleb(in, what);
  return static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);
}

// Value number `i` of `bw` bits (0..64) packed LSB first from `base`; the caller checked that
// `avail` bytes cover it.
uint64_t unpack(const uint8_t* base, size_t avail, uint64_t i, int bw) {
  if (bw == 0) return 0;
  uint64_t bit = i * static_cast<uint64_t>(bw);
  size_t byte = bit >> 3;
  int shift = static_cast<int>(bit & 7);
  uint64_t mask = bw == 64 ? ~uint64_t{0} : (uint64_t{1} << bw) - 1;
  if (shift + bw <= 64 && byte + 8 <= avail) {
    uint64_t w;
    std::memcpy(&w, base + byte, 8);
    return (w >> shift) & mask;
  }
  unsigned __int128 acc = 0;
  int need = (shift + bw + 7) / 8;
  for (int k = 0; k < need; ++k) acc |= static_cast<unsigned __int128>(base[byte + k]) << (8 * k);
  return static_cast<uint64_t>(acc >> shift) & mask;
}

// DELTA_BINARY_PACKED: the header's value count must equal `count`.
void decode_delta_binary(Bytes& in, size_t count, std::vector<int64_t>& out,
                         const std::string& what) {
  uint64_t block = uleb(in, what), miniblocks = uleb(in, what), total = uleb(in, what);
  int64_t value = zigzag(in, what);
  if (block == 0 || block % 128 != 0 || miniblocks == 0 || block % miniblocks != 0 ||
      (block / miniblocks) % 32 != 0 || block > (uint64_t{1} << 20))
    fail(what, "malformed DELTA_BINARY_PACKED header");
  if (total != count)
    fail(what, "DELTA_BINARY_PACKED holds " + std::to_string(total) + " values, expected " +
                   std::to_string(count));
  const uint64_t per_mini = block / miniblocks;
  out.clear();
  out.reserve(count);
  if (count == 0) return;
  out.push_back(value);
  uint8_t widths[1 << 15];
  while (out.size() < count) {
    int64_t min_delta = zigzag(in, what);
    if (in.size() < miniblocks || miniblocks > sizeof widths)
      fail(what, "DELTA_BINARY_PACKED block ends early");
    std::memcpy(widths, in.p, miniblocks);
    in.p += miniblocks;
    for (uint64_t m = 0; m < miniblocks && out.size() < count; ++m) {
      int bw = widths[m];
      if (bw > 64) fail(what, "DELTA_BINARY_PACKED bit width " + std::to_string(bw));
      uint64_t bytes = per_mini * static_cast<uint64_t>(bw) / 8;
      if (in.size() < bytes) fail(what, "DELTA_BINARY_PACKED miniblock ends early");
      for (uint64_t i = 0; i < per_mini && out.size() < count; ++i) {
        uint64_t d = unpack(in.p, bytes, i, bw);
        value = static_cast<int64_t>(static_cast<uint64_t>(value) +
                                     static_cast<uint64_t>(min_delta) + d);
        out.push_back(value);
      }
      in.p += bytes;
    }
  }
}

}  // namespace

void decode_rle_hybrid(Bytes in, int bit_width, size_t count, uint32_t* out,
                       const std::string& what) {
  if (bit_width < 0 || bit_width > 32) fail(what, "bit width " + std::to_string(bit_width));
  const size_t value_bytes = static_cast<size_t>(bit_width + 7) / 8;
  size_t n = 0;
  while (n < count) {
    if (in.p >= in.end)
      fail(what,
           "RLE data ends after " + std::to_string(n) + " of " + std::to_string(count) + " values");
    uint64_t h = uleb(in, what);
    if (h & 1) {  // bit-packed: (h >> 1) groups of 8 values; a short last group may be cut off
      uint64_t values = (h >> 1) * 8;
      uint64_t bytes = (h >> 1) * static_cast<uint64_t>(bit_width);
      size_t avail = std::min<uint64_t>(bytes, in.size());
      uint64_t take = std::min<uint64_t>(values, count - n);
      if (take * static_cast<uint64_t>(bit_width) > avail * 8)
        fail(what, "bit-packed run ends early");
      for (uint64_t i = 0; i < take; ++i)
        out[n++] = static_cast<uint32_t>(unpack(in.p, avail, i, bit_width));
      in.p += avail;
    } else {  // a run of one value repeated (h >> 1) times
      uint64_t run = h >> 1;
      if (in.size() < value_bytes) fail(what, "RLE run ends early");
      uint32_t v = 0;
      for (size_t k = 0; k < value_bytes; ++k) v |= static_cast<uint32_t>(in.p[k]) << (8 * k);
      in.p += value_bytes;
      if (bit_width < 32 && (v >> bit_width) != 0) fail(what, "RLE value wider than its bit width");
      uint64_t take = std::min<uint64_t>(run, count - n);
      std::fill(out + n, out + n + take, v);
      n += take;
    }
  }
}

void decode_plain_byte_arrays(Bytes in, size_t count, std::vector<std::string_view>& out,
                              const std::string& what) {
  out.clear();
  if (count > in.size() / 4)
    fail(what, "PLAIN data holds fewer than " + std::to_string(count) + " values");
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (in.size() < 4) fail(what, "PLAIN data ends early");
    uint32_t len;
    std::memcpy(&len, in.p, 4);
    in.p += 4;
    if (len > in.size())
      fail(what, "PLAIN value length " + std::to_string(len) + " runs past the page");
    out.emplace_back(reinterpret_cast<const char*>(in.p), len);
    in.p += len;
  }
}

const uint8_t* decode_delta_length_byte_arrays(Bytes in, size_t count,
                                               std::vector<std::string_view>& out,
                                               const std::string& what) {
  std::vector<int64_t> lengths;
  decode_delta_binary(in, count, lengths, what);
  out.clear();
  out.reserve(count);
  for (int64_t len : lengths) {
    if (len < 0 || static_cast<uint64_t>(len) > in.size())
      fail(what, "DELTA_LENGTH_BYTE_ARRAY length " + std::to_string(len) + " runs past the page");
    out.emplace_back(reinterpret_cast<const char*>(in.p), static_cast<size_t>(len));
    in.p += len;
  }
  return in.p;
}

void decode_delta_byte_arrays(Bytes in, size_t count, std::string& arena,
                              std::vector<std::string_view>& out, const std::string& what) {
  std::vector<int64_t> prefixes;
  decode_delta_binary(in, count, prefixes, what);
  std::vector<std::string_view> suffixes;
  decode_delta_length_byte_arrays(in, count, suffixes, what);
  // Sizes first, so the arena is allocated once and the views stay valid.
  size_t total = 0, prev = 0;
  for (size_t i = 0; i < count; ++i) {
    if (prefixes[i] < 0 || static_cast<uint64_t>(prefixes[i]) > prev)
      fail(what, "DELTA_BYTE_ARRAY prefix length " + std::to_string(prefixes[i]) +
                     " is longer than the previous value");
    prev = static_cast<size_t>(prefixes[i]) + suffixes[i].size();
    total += prev;
    if (total > kMaxArena) fail(what, "DELTA_BYTE_ARRAY page decodes to more than 1 GiB");
  }
  arena.resize(total);
  out.clear();
  out.reserve(count);
  char* w = arena.data();
  const char* last = w;
  for (size_t i = 0; i < count; ++i) {
    size_t pre = static_cast<size_t>(prefixes[i]);
    std::memmove(w, last, pre);
    std::memcpy(w + pre, suffixes[i].data(), suffixes[i].size());
    out.emplace_back(w, pre + suffixes[i].size());
    last = w;
    w += pre + suffixes[i].size();
  }
}

}  // namespace lmt::parquet
