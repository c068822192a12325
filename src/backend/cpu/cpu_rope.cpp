// Rotary position embedding in the Hugging Face "rotate_half" layout, in place, for the CPU
// backend. The angle is computed as Hugging Face does (float32 position times float32 inv_freq, a
// float32 product); its cos and sin are taken in double and rounded once, then shared by all heads
// of the token. The inverse (backward) is the transposed rotation.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"

namespace lmt {

// x: N token rows `row_stride` apart, `heads` heads of head_dim each; the first rotary_dim dims of
// a head rotate as pairs (d, d + rotary_dim/2). pos[N] i32, inv_freq[rotary_dim/2] f32.
void CpuBackend::rope(DType dt, void* x, const int32_t* pos, const float* inv_freq, int64_t N,
                      int64_t row_stride, int heads, int head_dim, int rotary_dim,
                      double attn_factor, bool inverse) {
  LMT_CHECK(rotary_dim % 2 == 0 && rotary_dim > 0 && rotary_dim <= head_dim,
            "CpuBackend::rope: rotary_dim " + std::to_string(rotary_dim) +
                " must be even and in (0, head_dim]");
  // Where positions repeat (a batch of several sequences, packed documents) the angles of each
  // position are taken once into a table: the same values, without a cos and sin per token of
  // every call (1.25% of the demo's step went to them).
  int32_t max_pos = -1;
  bool nonnegative = true;
  for (int64_t n = 0; n < N; ++n) {
    max_pos = std::max(max_pos, pos[n]);
    nonnegative = nonnegative && pos[n] >= 0;
  }
  const int64_t positions = int64_t{max_pos} + 1;
  const bool table = nonnegative && 2 * positions <= N;
  cpu::dispatch_compute(dt, "rope", [&](auto tag) {
    using T = decltype(tag);
    using C = cpu::compute_t<T>;
    T* xx = static_cast<T*>(x);
    const int half = rotary_dim / 2;
    auto angles = [&](int32_t position, C* cs, C* sn) {
      const float p = static_cast<float>(position);
      for (int i = 0; i < half; ++i) {
        const float angle = p * inv_freq[i];
        cs[i] = static_cast<C>(std::cos(static_cast<double>(angle)) * attn_factor);
        sn[i] = static_cast<C>(std::sin(static_cast<double>(angle)) * attn_factor);
      }
    };
    std::vector<C> tcs, tsn;  // [positions][half] when table
    if (table) {
      tcs.resize(static_cast<size_t>(positions * half));
      tsn.resize(tcs.size());
#pragma omp parallel for schedule(static) if (positions * half >= 4096)
      for (int64_t q = 0; q < positions; ++q)
        angles(static_cast<int32_t>(q), &tcs[q * half], &tsn[q * half]);
    }
#pragma omp parallel if (N * heads * rotary_dim >= cpu::kParallelMin)
    {
      std::vector<C> own_cs(static_cast<size_t>(half)), own_sn(static_cast<size_t>(half));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        const C* cs = own_cs.data();
        const C* sn = own_sn.data();
        if (table) {
          cs = &tcs[static_cast<size_t>(pos[n]) * half];
          sn = &tsn[static_cast<size_t>(pos[n]) * half];
        } else {
          angles(pos[n], own_cs.data(), own_sn.data());
        }
        for (int h = 0; h < heads; ++h) {
          T* v = xx + n * row_stride + static_cast<int64_t>(h) * head_dim;
          T* v2 = v + half;
          if (!inverse) {
            for (int i = 0; i < half; ++i) {
              const C a = v[i], b = v2[i];
              v[i] = a * cs[i] - b * sn[i];
              v2[i] = b * cs[i] + a * sn[i];
            }
          } else {
            for (int i = 0; i < half; ++i) {
              const C a = v[i], b = v2[i];
              v[i] = a * cs[i] + b * sn[i];
              v2[i] = b * cs[i] - a * sn[i];
            }
          }
        }
      }
    }
  });
}

}  // namespace lmt
