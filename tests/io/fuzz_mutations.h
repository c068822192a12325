// The raw byte mutations every reader's fuzz test applies (tests/io/test_safetensors_fuzz.cpp,
// tests/tokenizer/test_tokenizer_json_fuzz.cpp), beside the format-aware ones each adds.
#pragma once

#include <cstddef>
#include <random>

namespace lmt::test {

// Mutation `kind` of `b` (a std::string or std::vector<uint8_t>): 0 flips a few bits anywhere,
// 1 truncates, 2 overwrites a run of up to 16 bytes with random ones. Returns false, leaving `b`
// as it is, for any other kind.
template <class Bytes>
bool mutate_raw_bytes(Bytes& b, unsigned kind, std::mt19937_64& rng) {
  using Byte = typename Bytes::value_type;
  auto pos = [&](size_t size) { return size ? rng() % size : 0; };
  switch (kind) {
    case 0:
      for (int i = 0, k = 1 + static_cast<int>(rng() % 8); i < k && !b.empty(); ++i)
        b[pos(b.size())] ^= static_cast<Byte>(1u << (rng() % 8));
      return true;
    case 1:
      b.resize(pos(b.size() + 1));
      return true;
    case 2:
      for (size_t p = pos(b.size()), k = 1 + rng() % 16; k-- && p < b.size(); ++p)
        b[p] = static_cast<Byte>(rng());
      return true;
    default:
      return false;
  }
}

}  // namespace lmt::test
