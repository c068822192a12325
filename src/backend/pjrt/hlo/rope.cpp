// Rotary position embedding (backend.h's rope, Hugging Face's rotate_half layout) as StableHLO
// (see lowering.h): the angle formed in f32, as the CPU kernel forms it.
#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {

Value rope(StablehloBuilder& b, const Value& x, const Value& pos, const Value& inv_freq,
           int64_t rotary_dim, double attn_factor, bool inverse) {
  LMT_CHECK(x.rank() == 3 && pos.rank() == 1 && pos.dims[0] == x.dims[0] && rotary_dim % 2 == 0 &&
                rotary_dim > 0 && rotary_dim <= x.dims[2] &&
                inv_freq.dims == std::vector<int64_t>{rotary_dim / 2},
            "rope: x [N,H,D], pos [N], inv_freq [rotary_dim/2]");
  const int64_t N = x.dims[0], H = x.dims[1], D = x.dims[2], half = rotary_dim / 2;
  const Value angle = b.multiply(b.broadcast_in_dim(b.convert(pos, DType::f32), {N, half}, {0}),
                                 b.broadcast_in_dim(inv_freq, {N, half}, {1}));
  auto table = [&](const Value& t) {  // [N, half] -> [N, H, half] in x's dtype, times the factor
    const Value scaled = b.multiply(t, b.constant(attn_factor, DType::f32, {N, half}));
    return b.broadcast_in_dim(b.convert(scaled, x.dtype), {N, H, half}, {0, 2});
  };
  const Value cs = table(b.cosine(angle)), sn = table(b.sine(angle));
  const Value a = b.slice(x, {0, 0, 0}, {N, H, half});
  const Value c = b.slice(x, {0, 0, half}, {N, H, rotary_dim});
  const Value first = inverse ? b.add(b.multiply(a, cs), b.multiply(c, sn))
                              : b.subtract(b.multiply(a, cs), b.multiply(c, sn));
  const Value second = inverse ? b.subtract(b.multiply(c, cs), b.multiply(a, sn))
                               : b.add(b.multiply(c, cs), b.multiply(a, sn));
  if (rotary_dim == D) return b.concatenate({first, second}, 2);
  return b.concatenate({first, second, b.slice(x, {0, 0, rotary_dim}, {N, H, D})}, 2);
}

}  // namespace lmt::hlo
