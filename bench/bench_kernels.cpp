// Micro-benchmarks of the CPU backend's compute-bound kernels at GPT-2-small shapes with 1024-token
// micro-batches: the GEMMs of a layer (OpenBLAS sgemm) and causal flash attention forward and
// backward (B=1, T=1024, 12 heads of 64). The products of a GPT-2 124M training step (B4 T64 and
// B1 T1024, in the three layouts a Linear layer's step uses) in f32 through OpenBLAS and through
// oneDNN's f32 matmul (the measurement behind keeping OpenBLAS for f32), and in bf16 through the
// backend (oneDNN; skipped where the CPU lacks bf16 matrix instructions). Each benchmark checks its
// result before timing and reports FLOP/s; attention counts only the visible (causal) half of the
// score matrix, 2 matmuls forward and 5 backward, as FlashAttention's papers do.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <vector>

#if LMTRAIN_HAVE_DNNL
#include <dnnl.hpp>
#endif

#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/rng.h"

namespace lmt {
namespace {

std::vector<float> randn(int64_t n, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  fill_normal(v.data(), n, 0.0, 1.0, 1234, stream);
  return v;
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

// C[M,N] = A[M,K] B[N,K]^T, the layout of a Linear layer's forward (x W^T).
void BM_Sgemm(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  CpuBackend be;
  const std::vector<float> A = randn(M * K, 1), B = randn(N * K, 2);
  std::vector<float> C(static_cast<size_t>(M * N));
  be.gemm(DType::f32, false, true, M, N, K, 1.0, A.data(), K, B.data(), K, 0.0, C.data(), N);
  double want = 0;  // check one element against a plain dot product
  for (int64_t k = 0; k < K; ++k) want += double{A[3 * K + k]} * B[5 * K + k];
  if (!all_finite(C) || std::fabs(C[3 * N + 5] - want) > 1e-3 * std::sqrt(double(K))) {
    state.SkipWithError("sgemm result is wrong");
    return;
  }
  for (auto _ : state) {
    be.gemm(DType::f32, false, true, M, N, K, 1.0, A.data(), K, B.data(), K, 0.0, C.data(), N);
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Sgemm)
    ->Args({2048, 768, 768})   // attention output projection
    ->Args({2048, 2304, 768})  // fused qkv projection
    ->Args({2048, 3072, 768})  // MLP up
    ->Args({2048, 768, 3072})  // MLP down
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A training step's products, M x N x K and layout: 0 = x W^T (forward), 1 = dY W (the input's
// gradient), 2 = dY^T X (the weight's gradient).
void step_products(benchmark::internal::Benchmark* b) {
  for (const int layout : {0, 1, 2}) {
    b->Args({256, 3072, 768, layout});    // B4 T64: MLP up
    b->Args({256, 768, 3072, layout});    // MLP down
    b->Args({1024, 2304, 768, layout});   // B1 T1024: fused qkv
    b->Args({1024, 50304, 768, layout});  // the head
  }
  // The demo Llama's Linear layers, B16 T128 (2048 tokens), as the step calls them: in x out.
  for (const auto [in, out] : {std::pair{192, 320},      // fused q, k, v (two KV heads)
                               std::pair{192, 192},      // o
                               std::pair{192, 1024},     // fused gate and up
                               std::pair{512, 192},      // down
                               std::pair{192, 2048}}) {  // the head (vocab 2048)
    b->Args({2048, out, in, 0});
    b->Args({2048, in, out, 1});
    b->Args({out, in, 2048, 2});
  }
  b->Args({2048, 2048, 2048, 0});
}

struct Product {
  bool ta, tb;
  int64_t M, N, K, lda, ldb;
};
Product product(const benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const int64_t layout = state.range(3);
  if (layout == 0) return {false, true, M, N, K, K, K};
  if (layout == 1) return {false, false, M, N, K, K, N};
  return {true, false, M, N, K, M, N};
}
void count(benchmark::State& state, const Product& p) {
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * p.M * p.N * p.K, benchmark::Counter::kIsIterationInvariantRate);
}

// Times the backend's product of p in dt: A, B and C hold dt's elements.
void time_backend_gemm(benchmark::State& state, CpuBackend& be, DType dt, const Product& p,
                       const void* A, const void* B, void* C) {
  for (auto _ : state) {
    be.gemm(dt, p.ta, p.tb, p.M, p.N, p.K, 1.0, A, p.lda, B, p.ldb, 0.0, C, p.N);
    benchmark::DoNotOptimize(C);
  }
  count(state, p);
}

void BM_StepGemmOpenblasF32(benchmark::State& state) {
  const Product p = product(state);
  CpuBackend be;
  const std::vector<float> A = randn(p.M * p.K, 1), B = randn(p.N * p.K, 2);
  std::vector<float> C(static_cast<size_t>(p.M * p.N));
  time_backend_gemm(state, be, DType::f32, p, A.data(), B.data(), C.data());
}
BENCHMARK(BM_StepGemmOpenblasF32)
    ->Apply(step_products)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

#if LMTRAIN_HAVE_DNNL
void BM_StepGemmOnednnF32(benchmark::State& state) {
  const Product p = product(state);
  using dnnl::memory;
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const memory::desc a({p.M, p.K}, memory::data_type::f32,
                       p.ta ? memory::dims{1, p.lda} : memory::dims{p.lda, 1});
  const memory::desc b({p.K, p.N}, memory::data_type::f32,
                       p.tb ? memory::dims{1, p.ldb} : memory::dims{p.ldb, 1});
  const memory::desc c({p.M, p.N}, memory::data_type::f32, memory::dims{p.N, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
  const dnnl::matmul mm(pd);
  std::vector<float> A = randn(p.M * p.K, 1), B = randn(p.N * p.K, 2);
  std::vector<float> C(static_cast<size_t>(p.M * p.N));
  const memory am(a, eng, A.data()), bm(b, eng, B.data()), cm(c, eng, C.data());
  for (auto _ : state) {
    mm.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    strm.wait();
    benchmark::DoNotOptimize(C.data());
  }
  state.SetLabel(pd.impl_info_str());
  count(state, p);
}
BENCHMARK(BM_StepGemmOnednnF32)->Apply(step_products)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

void BM_StepGemmBf16(benchmark::State& state) {
  const Product p = product(state);
  CpuBackend be;
  if (const std::string why = be.unsupported(DType::bf16); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  auto bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
    return h;
  };
  const std::vector<uint16_t> A = bf16(randn(p.M * p.K, 1)), B = bf16(randn(p.N * p.K, 2));
  std::vector<uint16_t> C(static_cast<size_t>(p.M * p.N));
  time_backend_gemm(state, be, DType::bf16, p, A.data(), B.data(), C.data());
}
BENCHMARK(BM_StepGemmBf16)->Apply(step_products)->Unit(benchmark::kMillisecond)->UseRealTime();

// One AdamW step over n parameters (GPT-2 124M has 124M): p, g, m, v read, p, m, v written.
void BM_AdamW(benchmark::State& state) {
  const int64_t n = state.range(0);
  CpuBackend be;
  std::vector<float> p = randn(n, 1), g = randn(n, 2), m(static_cast<size_t>(n)),
                     v(static_cast<size_t>(n), 1.0f);
  const double scale = 1.0;
  int64_t step = 0;
  for (auto _ : state) {
    const std::array<float, 3> f = adamw_factors(1e-4, 0.9, 0.95, 0.1, ++step);
    be.adamw_step(p.data(), g.data(), m.data(), v.data(), n, f.data(), 0.9, 0.95, 1e-8, true,
                  &scale);
    benchmark::DoNotOptimize(p.data());
  }
  state.counters["elements/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AdamW)->Arg(int64_t{1} << 24)->Unit(benchmark::kMillisecond)->UseRealTime();

// The model's layout: q, k, v interleaved per token row [B*T, 3*H*D]; out [B*T, H*D].
struct AttnSetup {
  int64_t B = 1, T = 1024;
  int H = 12, D = 64;
  AttentionArgs a;
  std::vector<float> qkv, out, lse, dout, dqkv;
  AttnSetup() {
    const int64_t Q = int64_t{H} * D, RS = 3 * Q;
    a.batch = B, a.q_len = a.kv_len = T, a.num_heads = a.num_kv_heads = H, a.head_dim = D;
    a.q_row_stride = a.kv_row_stride = RS, a.q_batch_stride = a.kv_batch_stride = T * RS;
    a.out_row_stride = Q, a.out_batch_stride = T * Q, a.scale = 1.0 / std::sqrt(double(D));
    qkv = randn(B * T * RS, 3), dout = randn(B * T * Q, 4);
    out.resize(static_cast<size_t>(B * T * Q)), dqkv.resize(qkv.size());
    lse.resize(static_cast<size_t>(B * H * T));
  }
  const float* q() const { return qkv.data(); }
  const float* k() const { return qkv.data() + int64_t{H} * D; }
  const float* v() const { return qkv.data() + 2 * int64_t{H} * D; }
  void forward(Backend& be) {
    be.attention_forward(DType::f32, a, out.data(), lse.data(), q(), k(), v());
  }
  void backward(Backend& be) {
    float* g = dqkv.data();
    const int64_t Q = int64_t{H} * D;
    be.attention_backward(DType::f32, a, g, g + Q, g + 2 * Q, dout.data(), q(), k(), v(),
                          out.data(), lse.data());
  }
  double visible_pairs() const { return double(B) * H * T * (T + 1) / 2.0; }
  // Finite everywhere, and the output of query t, head 0 equals a plain softmax in double.
  bool plausible(int64_t t = 777) const {
    if (!all_finite(out) || !all_finite(lse) || !all_finite(dqkv)) return false;
    const int64_t RS = a.q_row_stride;
    std::vector<double> p(static_cast<size_t>(t + 1));
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j <= t; ++j) {
      double x = 0;
      for (int d = 0; d < D; ++d) x += double{q()[t * RS + d]} * k()[j * RS + d];
      p[j] = x * a.scale, mx = std::max(mx, p[j]);
    }
    for (double& x : p) sum += (x = std::exp(x - mx));
    for (int d = 0; d < D; ++d) {
      double o = 0;
      for (int64_t j = 0; j <= t; ++j) o += p[j] / sum * v()[j * RS + d];
      if (std::fabs(o - out[t * a.out_row_stride + d]) > 1e-4) return false;
    }
    return true;
  }
};

// Times `pass` on a checked attention setup; flops_per_pair_dim counts the matmul work per
// visible (query, key) pair and head dimension (2 per matmul: forward 2 matmuls, backward 5).
template <class Pass>
void run_attention(benchmark::State& state, double flops_per_pair_dim, Pass pass) {
  CpuBackend be;
  AttnSetup s;
  s.forward(be);
  s.backward(be);
  if (!s.plausible()) {
    state.SkipWithError("attention result is wrong");
    return;
  }
  for (auto _ : state) {
    pass(be, s);
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] = benchmark::Counter(flops_per_pair_dim * s.visible_pairs() * s.D,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionForward(benchmark::State& state) {
  run_attention(state, 4.0, [](CpuBackend& be, AttnSetup& s) { s.forward(be); });
}
BENCHMARK(BM_AttentionForward)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AttentionBackward(benchmark::State& state) {
  run_attention(state, 10.0, [](CpuBackend& be, AttnSetup& s) { s.backward(be); });
}
BENCHMARK(BM_AttentionBackward)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AttentionForwardBackward(benchmark::State& state) {
  run_attention(state, 14.0, [](CpuBackend& be, AttnSetup& s) {
    s.forward(be);
    s.backward(be);
  });
}
BENCHMARK(BM_AttentionForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace lmt

BENCHMARK_MAIN();
