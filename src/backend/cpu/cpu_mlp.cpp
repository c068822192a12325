// MLP activations for the CPU backend: the gated unit (SwiGLU / GeGLU: act(gate) * up) and the
// plain activation of GPT-2's MLP, forward and backward. The activation is a template parameter so
// each loop is branch-free and vectorises; float uses the vectorisable exp/tanh of cpu_dispatch.h.
#include <cmath>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"

namespace lmt {

namespace {

template <Activation A>
using ActTag = std::integral_constant<Activation, A>;

template <class F>
void with_activation(Activation act, F&& f) {
  if (act == Activation::silu) return f(ActTag<Activation::silu>{});
  if (act == Activation::gelu_tanh) return f(ActTag<Activation::gelu_tanh>{});
  LMT_CHECK(false, "CpuBackend: unknown activation " + std::to_string(static_cast<int>(act)));
}

constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;

// act(g) and act'(g).
template <Activation A, class T>
LMT_INLINE T act_value(T g) {
  if constexpr (A == Activation::silu) {
    return g / (T(1) + cpu::exp_t(-g));
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
  } else {
    const T t = cpu::tanh_t(T(kGeluK) * (g + T(kGeluC) * g * g * g));
    return T(0.5) * (T(1) + t) +
           T(0.5) * g * (T(1) - t * t) * T(kGeluK) * (T(1) + T(3 * kGeluC) * g * g);
  }
}

}  // namespace

// gate_up[N,2F] = [gate | up] per row -> out[N,F] = act(gate) * up.
void CpuBackend::glu_forward(DType dt, Activation act, void* out, const void* gate_up, int64_t N,
                             int64_t F) {
  cpu::dispatch_float(dt, "glu_forward", [&](auto tag) {
    using T = decltype(tag);
    with_activation(act, [&](auto a) {
      constexpr Activation A = decltype(a)::value;
      T* y = static_cast<T*>(out);
      const T* gu = static_cast<const T*>(gate_up);
#pragma omp parallel for schedule(static) if (N * F >= cpu::kParallelMin)
      for (int64_t n = 0; n < N; ++n) {
        const T* __restrict g = gu + n * 2 * F;
        const T* __restrict u = g + F;
        T* __restrict yr = y + n * F;
#pragma omp simd
        for (int64_t f = 0; f < F; ++f) yr[f] = act_value<A>(g[f]) * u[f];
      }
    });
  });
}

// dgate_up[N,2F] = [dout * up * act'(gate) | dout * act(gate)], overwritten.
void CpuBackend::glu_backward(DType dt, Activation act, void* dgate_up, const void* dout,
                              const void* gate_up, int64_t N, int64_t F) {
  cpu::dispatch_float(dt, "glu_backward", [&](auto tag) {
    using T = decltype(tag);
    with_activation(act, [&](auto a) {
      constexpr Activation A = decltype(a)::value;
      T* dgu = static_cast<T*>(dgate_up);
      const T* dy = static_cast<const T*>(dout);
      const T* gu = static_cast<const T*>(gate_up);
#pragma omp parallel for schedule(static) if (N * F >= cpu::kParallelMin)
      for (int64_t n = 0; n < N; ++n) {
        const T* __restrict g = gu + n * 2 * F;
        const T* __restrict u = g + F;
        const T* __restrict d = dy + n * F;
        T* __restrict dg = dgu + n * 2 * F;
        T* __restrict du = dg + F;
#pragma omp simd
        for (int64_t f = 0; f < F; ++f) {
          dg[f] = d[f] * u[f] * act_grad<A>(g[f]);
          du[f] = d[f] * act_value<A>(g[f]);
        }
      }
    });
  });
}

// out[n] = act(x[n])
void CpuBackend::act_forward(DType dt, Activation act, void* out, const void* x, int64_t n) {
  cpu::dispatch_float(dt, "act_forward", [&](auto tag) {
    using T = decltype(tag);
    with_activation(act, [&](auto a) {
      constexpr Activation A = decltype(a)::value;
      T* y = static_cast<T*>(out);
      const T* xx = static_cast<const T*>(x);
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelMin)
      for (int64_t i = 0; i < n; ++i) y[i] = act_value<A>(xx[i]);
    });
  });
}

// dx[n] = dout[n] * act'(x[n]), overwritten.
void CpuBackend::act_backward(DType dt, Activation act, void* dx, const void* dout, const void* x,
                              int64_t n) {
  cpu::dispatch_float(dt, "act_backward", [&](auto tag) {
    using T = decltype(tag);
    with_activation(act, [&](auto a) {
      constexpr Activation A = decltype(a)::value;
      T* gx = static_cast<T*>(dx);
      const T* dy = static_cast<const T*>(dout);
      const T* xx = static_cast<const T*>(x);
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelMin)
      for (int64_t i = 0; i < n; ++i) gx[i] = dy[i] * act_grad<A>(xx[i]);
    });
  });
}

}  // namespace lmt
