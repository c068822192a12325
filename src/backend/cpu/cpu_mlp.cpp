// MLP activations for the CPU backend: the gated unit (SwiGLU / GeGLU / ReGLU: act(gate) * up) and
// the plain activation of GPT-2's MLP, forward and backward, and ReLU's and ReLU^2's backward from
// a 1-bit sign mask or from the output (train.activation_bits: 1). The activation is a template
// parameter so each loop is branch-free and vectorises; float uses the vectorisable exp/tanh of
// cpu_dispatch.h. The four loops of the MLP's activations are cloned for AVX2 and AVX-512
// (LMT_CLONES: one function per element type, since templates cannot be cloned): their polynomials
// are most of the MLP's time outside its products.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"

namespace lmt {

namespace {

constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;

// act(g) and act'(g).
template <Activation A, class T>
LMT_INLINE T act_value(T g) {
  if constexpr (A == Activation::silu) {
    return g / (T(1) + cpu::exp_t(-g));
  } else if constexpr (A == Activation::relu) {
    return g > T(0) ? g : T(0);
  } else if constexpr (A == Activation::relu2) {
    const T r = g > T(0) ? g : T(0);
    return r * r;
  } else {
    const T t = cpu::tanh_t(T(kGeluK) * (g + T(kGeluC) * g * g * g));
    return T(0.5) * g * (T(1) + t);
  }
}

template <Activation A, class T>
LMT_INLINE T act_grad(T g) {
  if constexpr (A == Activation::silu) {
    const T s = T(1) / (T(1) + cpu::exp_t(-g));
    return s * (T(1) + g * (T(1) - s));
  } else if constexpr (A == Activation::relu) {
    return g > T(0) ? T(1) : T(0);
  } else if constexpr (A == Activation::relu2) {  // T(2) * r, as relu2_backward_from_output
    return T(2) * (g > T(0) ? g : T(0));
  } else {
    const T t = cpu::tanh_t(T(kGeluK) * (g + T(kGeluC) * g * g * g));
    return T(0.5) * (T(1) + t) +
           T(0.5) * g * (T(1) - t * t) * T(kGeluK) * (T(1) + T(3 * kGeluC) * g * g);
  }
}

// The loops: rows [r0, r1) of the gated unit, elements [i0, i1) of the plain activation.
template <Activation A, class T>
LMT_INLINE void glu_forward_loop(T* y, const T* gu, int64_t r0, int64_t r1, int64_t F) {
  using C = cpu::compute_t<T>;
  for (int64_t n = r0; n < r1; ++n) {
    const T* __restrict g = gu + n * 2 * F;
    const T* __restrict u = g + F;
    T* __restrict yr = y + n * F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) yr[f] = act_value<A>(C(g[f])) * u[f];
  }
}

template <Activation A, class T>
LMT_INLINE void glu_backward_loop(T* dgu, const T* dy, const T* gu, int64_t r0, int64_t r1,
                                  int64_t F) {
  using C = cpu::compute_t<T>;
  for (int64_t n = r0; n < r1; ++n) {
    const T* __restrict g = gu + n * 2 * F;
    const T* __restrict u = g + F;
    const T* __restrict d = dy + n * F;
    T* __restrict dg = dgu + n * 2 * F;
    T* __restrict du = dg + F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      dg[f] = d[f] * u[f] * act_grad<A>(C(g[f]));
      du[f] = d[f] * act_value<A>(C(g[f]));
    }
  }
}

template <Activation A, class T>
LMT_INLINE void act_forward_loop(T* __restrict y, const T* __restrict x, int64_t i0, int64_t i1) {
  using C = cpu::compute_t<T>;
#pragma omp simd
  for (int64_t i = i0; i < i1; ++i) y[i] = act_value<A>(C(x[i]));
}

template <Activation A, class T>
LMT_INLINE void act_backward_loop(T* __restrict gx, const T* __restrict dy, const T* __restrict x,
                                  int64_t i0, int64_t i1) {
  using C = cpu::compute_t<T>;
#pragma omp simd
  for (int64_t i = i0; i < i1; ++i) gx[i] = dy[i] * act_grad<A>(C(x[i]));
}

// Calls LOOP<A>(args...) for the activation act, inlined (no lambdas: a clone's ISA reaches only
// what inlines into it).
// clang-format off
#define LMT_ACT_SWITCH(LOOP, ...)                        \
  switch (act) {                                         \
    case Activation::silu:                               \
      return LOOP<Activation::silu>(__VA_ARGS__);        \
    case Activation::gelu_tanh:                          \
      return LOOP<Activation::gelu_tanh>(__VA_ARGS__);   \
    case Activation::relu:                               \
      return LOOP<Activation::relu>(__VA_ARGS__);        \
    case Activation::relu2:                              \
      return LOOP<Activation::relu2>(__VA_ARGS__);       \
  }

#define LMT_MLP_CLONED_LOOPS(T)                                                                  \
  LMT_CLONES void glu_forward_rows(Activation act, T* y, const T* gu, int64_t r0, int64_t r1,    \
                                   int64_t F) {                                                  \
    LMT_ACT_SWITCH(glu_forward_loop, y, gu, r0, r1, F)                                           \
  }                                                                                              \
  LMT_CLONES void glu_backward_rows(Activation act, T* dgu, const T* dy, const T* gu, int64_t r0,\
                                    int64_t r1, int64_t F) {                                     \
    LMT_ACT_SWITCH(glu_backward_loop, dgu, dy, gu, r0, r1, F)                                    \
  }                                                                                              \
  LMT_CLONES void act_forward_range(Activation act, T* y, const T* x, int64_t i0, int64_t i1) {  \
    LMT_ACT_SWITCH(act_forward_loop, y, x, i0, i1)                                               \
  }                                                                                              \
  LMT_CLONES void act_backward_range(Activation act, T* gx, const T* dy, const T* x, int64_t i0, \
                                     int64_t i1) {                                               \
    LMT_ACT_SWITCH(act_backward_loop, gx, dy, x, i0, i1)                                         \
  }
// clang-format on
LMT_MLP_CLONED_LOOPS(float)
LMT_MLP_CLONED_LOOPS(double)
LMT_MLP_CLONED_LOOPS(cpu::bf16)
#undef LMT_MLP_CLONED_LOOPS
#undef LMT_ACT_SWITCH

// Rows of the gated unit per work item: about cpu::kChunk elements, at least one row.
int64_t rows_per_chunk(int64_t F) {
  return std::max<int64_t>(1, cpu::kChunk / std::max<int64_t>(F, 1));
}

void check_activation(Activation act) {
  LMT_CHECK(act == Activation::silu || act == Activation::gelu_tanh || act == Activation::relu ||
                act == Activation::relu2,
            "CpuBackend: unknown activation " + std::to_string(static_cast<int>(act)));
}

}  // namespace

// gate_up[N,2F] = [gate | up] per row -> out[N,F] = act(gate) * up.
void CpuBackend::glu_forward(DType dt, Activation act, void* out, const void* gate_up, int64_t N,
                             int64_t F) {
  check_activation(act);
  cpu::dispatch_compute(dt, "glu_forward", [&](auto tag) {
    using T = decltype(tag);
    T* y = static_cast<T*>(out);
    const T* gu = static_cast<const T*>(gate_up);
    cpu::for_chunks(N, rows_per_chunk(F), N * F >= cpu::kParallelMin,
                    [&](int64_t r0, int64_t r1) { glu_forward_rows(act, y, gu, r0, r1, F); });
  });
}

// dgate_up[N,2F] = [dout * up * act'(gate) | dout * act(gate)], overwritten.
void CpuBackend::glu_backward(DType dt, Activation act, void* dgate_up, const void* dout,
                              const void* gate_up, int64_t N, int64_t F) {
  check_activation(act);
  cpu::dispatch_compute(dt, "glu_backward", [&](auto tag) {
    using T = decltype(tag);
    T* dgu = static_cast<T*>(dgate_up);
    const T* dy = static_cast<const T*>(dout);
    const T* gu = static_cast<const T*>(gate_up);
    cpu::for_chunks(N, rows_per_chunk(F), N * F >= cpu::kParallelMin, [&](int64_t r0, int64_t r1) {
      glu_backward_rows(act, dgu, dy, gu, r0, r1, F);
    });
  });
}

// out[n] = act(x[n])
void CpuBackend::act_forward(DType dt, Activation act, void* out, const void* x, int64_t n) {
  check_activation(act);
  cpu::dispatch_compute(dt, "act_forward", [&](auto tag) {
    using T = decltype(tag);
    T* y = static_cast<T*>(out);
    const T* xx = static_cast<const T*>(x);
    cpu::for_chunks(n, cpu::kChunk, n >= cpu::kParallelMin,
                    [&](int64_t i0, int64_t i1) { act_forward_range(act, y, xx, i0, i1); });
  });
}

// dx[n] = dout[n] * act'(x[n]), overwritten.
void CpuBackend::act_backward(DType dt, Activation act, void* dx, const void* dout, const void* x,
                              int64_t n) {
  check_activation(act);
  cpu::dispatch_compute(dt, "act_backward", [&](auto tag) {
    using T = decltype(tag);
    T* gx = static_cast<T*>(dx);
    const T* dy = static_cast<const T*>(dout);
    const T* xx = static_cast<const T*>(x);
    cpu::for_chunks(n, cpu::kChunk, n >= cpu::kParallelMin,
                    [&](int64_t i0, int64_t i1) { act_backward_range(act, gx, dy, xx, i0, i1); });
  });
}

// Bit i % 32 of word i / 32 = x[i] > 0.
void CpuBackend::relu_mask(DType dt, void* mask, const void* x, int64_t n) {
  cpu::dispatch_compute(dt, "relu_mask", [&](auto tag) {
    using T = decltype(tag);
    using C = cpu::compute_t<T>;
    const T* xx = static_cast<const T*>(x);
    auto* m = static_cast<uint32_t*>(mask);
    const int64_t words = (n + 31) / 32;
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelMin)
    for (int64_t w = 0; w < words; ++w) {
      const T* __restrict xw = xx + w * 32;
      const int bits = static_cast<int>(std::min<int64_t>(32, n - w * 32));
      uint32_t word = 0;
      for (int j = 0; j < bits; ++j) word |= static_cast<uint32_t>(C(xw[j]) > C(0)) << j;
      m[w] = word;
    }
  });
}

// dx = dout * (bit ? 1 : 0): act_backward(relu)'s product, so the same bits (-0 and NaN included).
void CpuBackend::relu_backward_masked(DType dt, void* dx, const void* dout, const void* mask,
                                      int64_t n) {
  cpu::dispatch_compute(dt, "relu_backward_masked", [&](auto tag) {
    using T = decltype(tag);
    using C = cpu::compute_t<T>;
    T* gx = static_cast<T*>(dx);
    const T* dy = static_cast<const T*>(dout);
    const auto* m = static_cast<const uint32_t*>(mask);
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelMin)
    for (int64_t i = 0; i < n; ++i) gx[i] = dy[i] * (((m[i >> 5] >> (i & 31)) & 1u) ? C(1) : C(0));
  });
}

// dx = dout * (2 sqrt(y)): sqrt is correctly rounded, and sqrt(round(r * r)) == r (see backend.h).
void CpuBackend::relu2_backward_from_output(DType dt, void* dx, const void* dout, const void* y,
                                            int64_t n) {
  cpu::dispatch_compute(dt, "relu2_backward_from_output", [&](auto tag) {
    using T = decltype(tag);
    using C = cpu::compute_t<T>;
    T* gx = static_cast<T*>(dx);
    const T* dy = static_cast<const T*>(dout);
    const T* yy = static_cast<const T*>(y);
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelMin)
    for (int64_t i = 0; i < n; ++i) gx[i] = dy[i] * (C(2) * std::sqrt(C(yy[i])));
  });
}

}  // namespace lmt
