// MT19937 as CPython's _randommodule.c writes it (init_genrand, init_by_array, genrand_uint32)
// and the sampling methods of Lib/random.py 3.11 on top.
#include "eval/py_random.h"

#include <cmath>
#include <unordered_set>

#include "core/error.h"

namespace lmt::eval {

namespace {
constexpr int kN = 624;
constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpperMask = 0x80000000u;
constexpr uint32_t kLowerMask = 0x7fffffffu;
}  // namespace

void PyRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + i;
  mti_ = kN;
}

PyRandom::PyRandom(int64_t seed) {
  // random_seed(): the key is abs(seed) as little-endian 32-bit words, at least one.
  uint64_t a = seed < 0 ? uint64_t(0) - uint64_t(seed) : uint64_t(seed);
  std::vector<uint32_t> key;
  do {
    key.push_back(uint32_t(a & 0xffffffffu));
    a >>= 32;
  } while (a != 0);
  init_genrand(19650218u);
  const int len = int(key.size());
  int i = 1, j = 0;
  for (int k = kN > len ? kN : len; k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + uint32_t(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= len) j = 0;
  }
  for (int k = kN - 1; k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - uint32_t(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;  // MSB is 1, assuring a non-zero initial array
}

uint32_t PyRandom::next32() {
  static const uint32_t mag01[2] = {0u, kMatrixA};
  if (mti_ >= kN) {
    int kk = 0;
    for (; kk < kN - kM; ++kk) {
      const uint32_t y = (mt_[kk] & kUpperMask) | (mt_[kk + 1] & kLowerMask);
      mt_[kk] = mt_[kk + kM] ^ (y >> 1) ^ mag01[y & 1u];
    }
    for (; kk < kN - 1; ++kk) {
      const uint32_t y = (mt_[kk] & kUpperMask) | (mt_[kk + 1] & kLowerMask);
      mt_[kk] = mt_[kk + (kM - kN)] ^ (y >> 1) ^ mag01[y & 1u];
    }
    const uint32_t y = (mt_[kN - 1] & kUpperMask) | (mt_[0] & kLowerMask);
    mt_[kN - 1] = mt_[kM - 1] ^ (y >> 1) ^ mag01[y & 1u];
    mti_ = 0;
  }
  uint32_t y = mt_[mti_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

double PyRandom::random() {
  const uint32_t a = next32() >> 5, b = next32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

uint64_t PyRandom::getrandbits(int k) {
  LMT_CHECK(k >= 0 && k <= 64, "getrandbits of " + std::to_string(k) + " bits");
  if (k == 0) return 0;
  if (k <= 32) return next32() >> (32 - k);
  // Words fill from the least significant; the last one keeps its top k % 32 bits.
  const uint64_t lo = next32();
  uint64_t hi = next32();
  if (k < 64) hi >>= (64 - k);
  return lo | (hi << 32);
}

int64_t PyRandom::randbelow(int64_t n) {
  LMT_CHECK(n >= 1, "randbelow(" + std::to_string(n) + ")");
  int k = 0;
  for (uint64_t v = uint64_t(n); v; v >>= 1) ++k;
  uint64_t r = getrandbits(k);
  while (r >= uint64_t(n)) r = getrandbits(k);
  return int64_t(r);
}

void PyRandom::shuffle(std::vector<int64_t>& x) {
  for (int64_t i = int64_t(x.size()) - 1; i > 0; --i) std::swap(x[i], x[randbelow(i + 1)]);
}

std::vector<int64_t> PyRandom::sample(int64_t n, int64_t k) {
  LMT_CHECK(k >= 0 && k <= n, "sample of " + std::to_string(k) + " from " + std::to_string(n));
  std::vector<int64_t> result(static_cast<size_t>(k));
  int64_t setsize = 21;  // size of a small set minus size of an empty list
  if (k > 5) {
    // math.log(k * 3, 4): log(x) / log(base) in double, as CPython computes it.
    const double e = std::ceil(std::log(double(k * 3)) / std::log(4.0));
    setsize += int64_t(1) << (2 * int64_t(e));
  }
  if (n <= setsize) {
    std::vector<int64_t> pool(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pool[i] = i;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = randbelow(n - i);
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::unordered_set<int64_t> selected;
    for (int64_t i = 0; i < k; ++i) {
      int64_t j = randbelow(n);
      while (selected.count(j)) j = randbelow(n);
      selected.insert(j);
      result[i] = j;
    }
  }
  return result;
}

}  // namespace lmt::eval
