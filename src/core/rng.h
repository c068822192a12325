// Counter-based random numbers (Philox-4x32-10). Every number is a pure function of
// (seed, stream, index), so results never depend on thread count or the order of calls:
// initialisation, dropout and sampling are reproducible anywhere.
#pragma once

#include <array>
#include <cstdint>

namespace lmt {

// Four 32-bit random words for counter `ctr` under key (seed).
std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t stream, uint64_t ctr);

// A uniform float in [0, 1) and a standard normal for element `index` of stream `stream`.
double uniform01(uint64_t seed, uint64_t stream, uint64_t index);
double normal01(uint64_t seed, uint64_t stream, uint64_t index);

// Dropout's mask: element `index` of mask (seed, stream) is kept when Philox word index % 4 of
// counter index / 4 is at least dropout_threshold(p), which happens with probability 1 - p.
uint32_t dropout_threshold(double p);  // p in [0, 1)
bool dropout_keeps(uint64_t seed, uint64_t stream, uint64_t index, double p);

// Fills out[0..n) with N(mean, std) numbers for elements [offset, offset + n) of the stream.
// Parallel over elements; the result is independent of the thread count.
void fill_normal(float* out, int64_t n, double mean, double std, uint64_t seed, uint64_t stream,
                 uint64_t offset = 0);
void fill_normal(double* out, int64_t n, double mean, double std, uint64_t seed, uint64_t stream,
                 uint64_t offset = 0);

// A sequential generator for host-side decisions (sampling, shuffles). Its whole state is
// (seed, stream, counter), which checkpoints save and restore exactly.
class Rng {
 public:
  Rng(uint64_t seed = 0, uint64_t stream = 0) : seed_(seed), stream_(stream) {}
  double uniform() { return uniform01(seed_, stream_, counter_++); }
  double normal() { return normal01(seed_, stream_, counter_++); }
  uint64_t next_u64();
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n);

  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }
  uint64_t counter() const { return counter_; }
  void set_counter(uint64_t c) { counter_ = c; }

 private:
  uint64_t seed_, stream_, counter_ = 0;
};

}  // namespace lmt
