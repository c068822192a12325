// The elementwise section of backend.h as StableHLO: dropout (see lowering.h), the one
// elementwise kernel with a lowering of its own (the backend writes add, scale, sum and convert as
// single builder ops). Dropout runs Philox-4x32-10 on i32 tensors: StableHLO's i32 add, multiply
// and xor give u32's bits, the 32x32 -> 64 product's high word comes from 16-bit halves, and an
// unsigned compare is a signed one with the sign bits flipped, so lmtrain needs no unsigned dtype.
#include <array>

#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"
#include "core/rng.h"

namespace lmt::hlo {

namespace {

// A u32 as the i32 of the same bits.
Value u32(StablehloBuilder& b, uint32_t v, const Dims& dims) {
  return b.constant(double(static_cast<int32_t>(v)), DType::i32, dims);
}

// Philox-4x32-10 (core/rng.cpp philox4x32) on G counters at once, all tensors i32 [G].
class Philox {
 public:
  Philox(StablehloBuilder& b, int64_t G)
      : b_(b),
        dims_{G},
        s16_(u32(b, 16, dims_)),
        low16_(u32(b, 0xFFFF, dims_)),
        m0_(u32(b, kM0, dims_)),
        m1_(u32(b, kM1, dims_)),
        w0_(u32(b, kW0, dims_)),
        w1_(u32(b, kW1, dims_)) {}

  // The four words for counters (ctr_lo, 0) under key {seed lo, seed hi, stream lo, stream hi}.
  std::array<Value, 4> words(const Value& ctr_lo, const Value& key) {
    Value c0 = ctr_lo, c1 = u32(b_, 0, dims_), c2 = key_word(key, 2), c3 = key_word(key, 3);
    Value k0 = key_word(key, 0), k1 = key_word(key, 1);
    for (int round = 0; round < 10; ++round) {
      const Value lo0 = b_.multiply(m0_, c0), hi0 = mulhi(kM0, c0);
      const Value lo1 = b_.multiply(m1_, c2), hi1 = mulhi(kM1, c2);
      c0 = b_.bit_xor(b_.bit_xor(hi1, c1), k0);
      c1 = lo1;
      c2 = b_.bit_xor(b_.bit_xor(hi0, c3), k1);
      c3 = lo0;
      k0 = b_.add(k0, w0_);
      k1 = b_.add(k1, w1_);
    }
    return {c0, c1, c2, c3};
  }

 private:
  static constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  static constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

  Value key_word(const Value& key, int64_t j) {
    return b_.broadcast_in_dim(b_.reshape(b_.slice(key, {j}, {j + 1}), {}), dims_, {});
  }
  Value shr16(const Value& x) { return b_.shift_right_logical(x, s16_); }

  // High word of a * x: with a = ah 2^16 + al and x likewise, each partial product fits in 32
  // bits, and the middle column's carry is (al xl >> 16) + the low halves of the cross products.
  Value mulhi(uint32_t a, const Value& x) {
    const Value al = u32(b_, a & 0xFFFF, dims_), ah = u32(b_, a >> 16, dims_);
    const Value xl = b_.bit_and(x, low16_), xh = shr16(x);
    const Value ll = b_.multiply(al, xl), lh = b_.multiply(al, xh), hl = b_.multiply(ah, xl),
                hh = b_.multiply(ah, xh);
    const Value mid = b_.add(shr16(ll), b_.add(b_.bit_and(lh, low16_), b_.bit_and(hl, low16_)));
    return b_.add(b_.add(hh, shr16(mid)), b_.add(shr16(lh), shr16(hl)));
  }

  StablehloBuilder& b_;
  Dims dims_;
  Value s16_, low16_, m0_, m1_, w0_, w1_;
};

}  // namespace

// Counter g = i / 4 comes from an i32 iota over the G = ceil(n / 4) groups; its high word is 0
// for any G an i32 iota can count, hence the limit on n.
Value dropout(StablehloBuilder& b, const Value& x, double p, const Value& key) {
  LMT_CHECK(p >= 0 && p < 1, "dropout: p = " + std::to_string(p) + " is not in [0, 1)");
  LMT_CHECK(key.dtype == DType::i32 && key.dims == Dims{4}, "dropout: key must be i32[4]");
  int64_t n = 1;
  for (int64_t d : x.dims) n *= d;
  const int64_t G = (n + 3) / 4;
  LMT_CHECK(G <= 0x7FFFFFFF, "dropout: more than 4 (2^31 - 1) elements");
  Philox philox(b, G);
  const std::array<Value, 4> w = philox.words(b.iota(DType::i32, {G}, 0), key);
  std::vector<Value> cols;
  for (const Value& v : w) cols.push_back(b.reshape(v, {G, 1}));
  // Element 4g + j takes word j of counter g: the [G, 4] words in row-major order.
  const Value bits =
      b.reshape(b.slice(b.reshape(b.concatenate(cols, 1), {4 * G}), {0}, {n}), x.dims);
  const uint32_t kSign = 0x80000000u;
  const Value kept = b.compare(b.bit_xor(bits, u32(b, kSign, x.dims)),
                               u32(b, dropout_threshold(p) ^ kSign, x.dims), CompareDir::ge);
  // The CPU kernel's scale: 1 / (1 - p) in double, rounded to x's dtype, then one multiply.
  const Value scaled = b.multiply(x, b.constant(1.0 / (1.0 - p), x.dtype, x.dims));
  return b.select(kept, scaled, b.constant(0.0, x.dtype, x.dims));
}

}  // namespace lmt::hlo
