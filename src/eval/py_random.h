// PyRandom: CPython 3.11's random.Random(int_seed), bit for bit, so that lmtrain eval draws the
// same few-shot examples as lm-evaluation-harness (its samplers call Random(1234).sample). Only
// what the samplers and their tests need: the MT19937 stream seeded as init_by_array seeds it
// from the seed's 32-bit words, random(), getrandbits, _randbelow, shuffle and sample.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace lmt::eval {

class PyRandom {
 public:
  // random.Random(seed) for an int seed; Python seeds with abs(seed).
  explicit PyRandom(int64_t seed);

  double random();               // random.random(): 53 bits in [0, 1)
  uint64_t getrandbits(int k);   // k in [0, 64]
  int64_t randbelow(int64_t n);  // Random._randbelow (n >= 1), by rejection on bit_length(n) bits
  void shuffle(std::vector<int64_t>& x);
  // random.sample(range(n), k) as the indices drawn, in order: the pool algorithm when n is at
  // most 21 (+ 4 ** ceil(log(3k, 4)) when k > 5), the set algorithm otherwise, as CPython picks.
  // Requires 0 <= k <= n (Python raises ValueError; the caller says so in its own words).
  std::vector<int64_t> sample(int64_t n, int64_t k);

 private:
  uint32_t next32();
  void init_genrand(uint32_t s);
  std::array<uint32_t, 624> mt_{};
  int mti_ = 625;
};

}  // namespace lmt::eval
