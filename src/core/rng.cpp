#include "core/rng.h"

#include <algorithm>
#include <cmath>

namespace lmt {

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t ctr) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(ctr), c1 = static_cast<uint32_t>(ctr >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

namespace {
// 53-bit uniform in [0,1) from two words.
double to_unit(uint32_t a, uint32_t b) {
  uint64_t x = (static_cast<uint64_t>(a) << 21) ^ (static_cast<uint64_t>(b) >> 11);
  x &= (1ull << 53) - 1;
  return static_cast<double>(x) * (1.0 / 9007199254740992.0);
}
}  // namespace

uint32_t dropout_threshold(double p) {
  return static_cast<uint32_t>(std::min(std::max(p, 0.0), 1.0 - 0x1p-32) * 0x1p32);
}

bool dropout_keeps(uint64_t seed, uint64_t stream, uint64_t index, double p) {
  return philox4x32(seed, stream, index / 4)[index % 4] >= dropout_threshold(p);
}

double uniform01(uint64_t seed, uint64_t stream, uint64_t index) {
  auto r = philox4x32(seed, stream, index);
  return to_unit(r[0], r[1]);
}

double normal01(uint64_t seed, uint64_t stream, uint64_t index) {
  auto r = philox4x32(seed, stream, index);
  double u1 = to_unit(r[0], r[1]);
  double u2 = to_unit(r[2], r[3]);
  // Box-Muller; 1 - u1 is in (0, 1], so the log is finite.
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(6.283185307179586 * u2);
}

template <class T>
static void fill_normal_impl(T* out, int64_t n, double mean, double std, uint64_t seed,
                             uint64_t stream, uint64_t offset) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<T>(mean + std * normal01(seed, stream, offset + static_cast<uint64_t>(i)));
}

void fill_normal(float* out, int64_t n, double mean, double std, uint64_t seed, uint64_t stream,
                 uint64_t offset) {
  fill_normal_impl(out, n, mean, std, seed, stream, offset);
}
void fill_normal(double* out, int64_t n, double mean, double std, uint64_t seed, uint64_t stream,
                 uint64_t offset) {
  fill_normal_impl(out, n, mean, std, seed, stream, offset);
}

uint64_t Rng::next_u64() {
  auto r = philox4x32(seed_, stream_, counter_++);
  return (static_cast<uint64_t>(r[0]) << 32) | r[1];
}

uint64_t Rng::below(uint64_t n) {
  // Rejection sampling: unbiased for any n.
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return x % n;
}

}  // namespace lmt
