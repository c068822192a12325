// Flash attention on the CPU backend against a naive double-precision reference (full softmax per
// query row), and its backward against that reference and against central finite differences.
// Table-driven: each case names its shapes, masking and memory layout. "packed" cases interleave
// q, k, v in one row buffer [N, (Hq + 2 Hkv) D + pad] the way the model does; the others put k and
// v in a cache-like buffer longer than kv_len; "documents" cases are packed samples whose
// queries see only their own document's keys. Row and batch strides always carry padding, whose
// content must survive untouched.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_dispatch.h"
#include "backend_test_util.h"

namespace lmt {
namespace {

using test::expect_close;

struct AttnCase {
  const char* name;
  int64_t B, Tq, Tk;
  int Hq, Hkv, D;
  int64_t off = 0, window = 0;
  double softcap = 0;
  bool packed = true;
  double scale = 0;  // 0: 1 / sqrt(D)
  int docs = 0;      // > 0: packed samples of about this many documents per sequence
};

constexpr double kSentinel = 777.0;

// Where every addressed element of q, k, v (one input storage) and out (one output storage) is.
struct Layout {
  AttentionArgs a;
  int64_t q0 = 0, k0 = 0, v0 = 0, in_size = 0, out_size = 0;
  std::vector<int64_t> q_idx, k_idx, v_idx, o_idx;  // [b, t, h, d] order
  std::vector<int32_t> doc_start;                   // [B, Tq] when the case has documents
};

Layout make_layout(const AttnCase& c) {
  Layout l;
  AttentionArgs& a = l.a;
  a.batch = c.B, a.q_len = c.Tq, a.kv_len = c.Tk, a.num_heads = c.Hq, a.num_kv_heads = c.Hkv;
  a.head_dim = c.D, a.q_offset = c.off, a.window = c.window, a.softcap = c.softcap;
  a.scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.D));
  const int64_t D = c.D, Q = c.Hq * D, KV = c.Hkv * D;
  if (c.packed) {  // the model's layout: [B, T, q heads | k heads | v heads | pad]
    EXPECT_EQ(c.Tq, c.Tk);
    const int64_t rs = Q + 2 * KV + 3;
    a.q_row_stride = a.kv_row_stride = rs;
    a.q_batch_stride = a.kv_batch_stride = c.Tq * rs;
    l.q0 = 0, l.k0 = Q, l.v0 = Q + KV, l.in_size = c.B * c.Tq * rs;
  } else {  // q rows, then a k cache and a v cache with room for two more tokens
    a.q_row_stride = Q + 2, a.q_batch_stride = c.Tq * (Q + 2) + 1;
    a.kv_row_stride = KV + 1, a.kv_batch_stride = (c.Tk + 2) * (KV + 1);
    l.k0 = c.B * a.q_batch_stride, l.v0 = l.k0 + c.B * a.kv_batch_stride;
    l.in_size = l.v0 + c.B * a.kv_batch_stride;
  }
  a.out_row_stride = Q + 1, a.out_batch_stride = c.Tq * (Q + 1) + 2;
  l.out_size = c.B * a.out_batch_stride;
  if (c.docs > 0) {  // documents start at scattered places, a different cut per sequence
    for (int64_t b = 0; b < c.B; ++b) {
      int32_t start = 0;
      for (int64_t t = 0; t < c.Tq; ++t) {
        if (t > 0 && (t * 7919 + b * 104729) % (c.Tq / c.docs + 1) == 0)
          start = static_cast<int32_t>(t);
        l.doc_start.push_back(start);
      }
    }
  }
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t t = 0; t < c.Tq; ++t)
      for (int64_t i = 0; i < Q; ++i) {
        l.q_idx.push_back(l.q0 + b * a.q_batch_stride + t * a.q_row_stride + i);
        l.o_idx.push_back(b * a.out_batch_stride + t * a.out_row_stride + i);
      }
    for (int64_t t = 0; t < c.Tk; ++t)
      for (int64_t i = 0; i < KV; ++i) {
        l.k_idx.push_back(l.k0 + b * a.kv_batch_stride + t * a.kv_row_stride + i);
        l.v_idx.push_back(l.v0 + b * a.kv_batch_stride + t * a.kv_row_stride + i);
      }
  }
  return l;
}

// Inputs: the storage holds N(0,1) at every addressed element and the sentinel elsewhere.
std::vector<double> make_inputs(const Layout& l, uint64_t seed) {
  std::vector<double> in(static_cast<size_t>(l.in_size), kSentinel);
  const std::vector<double> r = test::randn(l.in_size, seed, 1);
  for (const auto* idx : {&l.q_idx, &l.k_idx, &l.v_idx})
    for (int64_t i : *idx) in[i] = r[i];
  return in;
}

// ---- naive reference in double: full score row per query ----
struct RefOut {
  std::vector<double> out, lse, grad;  // out storage, [B,Hq,Tq], input storage (addressed only)
};

RefOut reference(const Layout& l, const std::vector<double>& in, const std::vector<double>* dout) {
  AttentionArgs a = l.a;
  a.doc_start = l.doc_start.empty() ? nullptr : l.doc_start.data();
  const int64_t D = a.head_dim, G = a.num_heads / a.num_kv_heads;
  RefOut r;
  r.out.assign(static_cast<size_t>(l.out_size), kSentinel);
  r.lse.assign(static_cast<size_t>(a.batch * a.num_heads * a.q_len), 0);
  r.grad.assign(in.size(), 0);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int h = 0; h < a.num_heads; ++h)
      for (int64_t i = 0; i < a.q_len; ++i) {
        const int64_t g = h / G;
        const int64_t qo = l.q0 + b * a.q_batch_stride + i * a.q_row_stride + h * D;
        const int64_t oo = b * a.out_batch_stride + i * a.out_row_stride + h * D;
        auto ko = [&](int64_t j) {
          return l.k0 + b * a.kv_batch_stride + j * a.kv_row_stride + g * D;
        };
        auto vo = [&](int64_t j) {
          return l.v0 + b * a.kv_batch_stride + j * a.kv_row_stride + g * D;
        };
        const int64_t p = a.q_offset + i;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j < a.kv_len; ++j)
          if (j <= p && (a.window <= 0 || p - j < a.window) &&
              (!a.doc_start || j >= a.doc_start[b * a.q_len + i]))
            keys.push_back(j);
        double& lse = r.lse[(b * a.num_heads + h) * a.q_len + i];
        if (keys.empty()) {
          lse = -INFINITY;
          for (int64_t d = 0; d < D; ++d) r.out[oo + d] = 0;
          continue;
        }
        std::vector<double> s(keys.size()), t(keys.size(), 0), pr(keys.size());
        double mx = -INFINITY;
        for (size_t n = 0; n < keys.size(); ++n) {
          double x = 0;
          for (int64_t d = 0; d < D; ++d) x += in[qo + d] * in[ko(keys[n]) + d];
          x *= a.scale;
          if (a.softcap > 0) t[n] = std::tanh(x / a.softcap), x = a.softcap * t[n];
          s[n] = x, mx = std::max(mx, x);
        }
        double sum = 0;
        for (size_t n = 0; n < keys.size(); ++n) sum += std::exp(s[n] - mx);
        lse = mx + std::log(sum);
        for (size_t n = 0; n < keys.size(); ++n) pr[n] = std::exp(s[n] - lse);
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (size_t n = 0; n < keys.size(); ++n) o += pr[n] * in[vo(keys[n]) + d];
          r.out[oo + d] = o;
        }
        if (!dout) continue;
        const double* dO = dout->data() + oo;
        std::vector<double> dp(keys.size());
        double Di = 0;
        for (size_t n = 0; n < keys.size(); ++n) {
          for (int64_t d = 0; d < D; ++d) dp[n] += dO[d] * in[vo(keys[n]) + d];
          Di += pr[n] * dp[n];
        }
        for (size_t n = 0; n < keys.size(); ++n) {
          const double ds = pr[n] * (dp[n] - Di) * (1 - t[n] * t[n]) * a.scale;
          for (int64_t d = 0; d < D; ++d) {
            r.grad[vo(keys[n]) + d] += pr[n] * dO[d];
            r.grad[qo + d] += ds * in[ko(keys[n]) + d];
            r.grad[ko(keys[n]) + d] += ds * in[qo + d];
          }
        }
      }
  return r;
}

// ---- kernel runs ----
template <class T>
struct KernelOut {
  std::vector<T> out, lse, grad;
};

template <class T>
KernelOut<T> run_kernel(const Layout& layout, const std::vector<double>& in_d,
                        const std::vector<double>* dout_d) {
  Layout l = layout;  // doc_start points into this copy's vector
  l.a.doc_start = l.doc_start.empty() ? nullptr : l.doc_start.data();
  CpuBackend be;
  const DType dt = dtype_of<T>();
  std::vector<T> in = test::cast<T>(in_d);
  KernelOut<T> k;
  k.out.assign(static_cast<size_t>(l.out_size), T(kSentinel));
  k.lse.assign(static_cast<size_t>(l.a.batch * l.a.num_heads * l.a.q_len), T(kSentinel));
  be.attention_forward(dt, l.a, k.out.data(), k.lse.data(), in.data() + l.q0, in.data() + l.k0,
                       in.data() + l.v0);
  if (dout_d) {
    std::vector<T> dout = test::cast<T>(*dout_d);
    k.grad.assign(in.size(), T(kSentinel));  // dq, dk, dv are overwritten, padding is not
    T* g = k.grad.data();
    be.attention_backward(dt, l.a, g + l.q0, g + l.k0, g + l.v0, dout.data(), in.data() + l.q0,
                          in.data() + l.k0, in.data() + l.v0, k.out.data(), k.lse.data());
  }
  return k;
}

std::vector<double> gather(const std::vector<double>& v, const std::vector<int64_t>& idx) {
  std::vector<double> r;
  for (int64_t i : idx) r.push_back(v[i]);
  return r;
}
template <class T>
std::vector<double> gather(const std::vector<T>& v, const std::vector<int64_t>& idx) {
  return gather(test::widen(v), idx);
}

// Unaddressed elements (padding) must still hold the sentinel.
template <class T>
void expect_padding_untouched(const std::vector<T>& v, std::vector<std::vector<int64_t>> used,
                              const char* what) {
  std::vector<char> mark(v.size(), 0);
  for (const auto& u : used)
    for (int64_t i : u) mark[i] = 1;
  size_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (!mark[i] && v[i] != T(kSentinel)) ++bad;
  EXPECT_EQ(bad, 0u) << what << ": padding elements were written";
}

// lse: -inf must match -inf exactly; the rest compares with tolerance.
template <class T>
void expect_lse_close(const std::vector<T>& got, const std::vector<double>& want, double tol) {
  std::vector<double> g = test::widen(got), w = want;
  for (size_t i = 0; i < w.size(); ++i)
    if (std::isinf(w[i])) {
      EXPECT_TRUE(std::isinf(g[i]) && g[i] < 0) << "lse[" << i << "] = " << g[i];
      g[i] = w[i] = 0;
    }
  expect_close(g, w, tol, "lse");
}

class Attention : public ::testing::TestWithParam<AttnCase> {};

template <class T>
void check_against_reference(const AttnCase& c, uint64_t seed) {
  SCOPED_TRACE(sizeof(T) == 4 ? "f32" : "f64");
  const Layout l = make_layout(c);
  const std::vector<double> in = make_inputs(l, seed);
  const std::vector<double> dout = test::randn(l.out_size, seed, 2);
  const RefOut ref = reference(l, in, &dout);
  const KernelOut<T> k = run_kernel<T>(l, in, &dout);
  const double tol = test::kTol<T>;
  expect_close(gather(k.out, l.o_idx), gather(ref.out, l.o_idx), tol, "out");
  expect_lse_close(k.lse, ref.lse, tol);
  // Gradients of float kernels lose a few more bits (dS = P (dP - Di) cancels).
  const double gtol = sizeof(T) == 4 ? 2e-5 : tol;
  expect_close(gather(k.grad, l.q_idx), gather(ref.grad, l.q_idx), gtol, "dq");
  expect_close(gather(k.grad, l.k_idx), gather(ref.grad, l.k_idx), gtol, "dk");
  expect_close(gather(k.grad, l.v_idx), gather(ref.grad, l.v_idx), gtol, "dv");
  expect_padding_untouched(k.out, {l.o_idx}, "out");
  expect_padding_untouched(k.grad, {l.q_idx, l.k_idx, l.v_idx}, "dq/dk/dv");
}

TEST_P(Attention, ForwardAndBackwardMatchReferenceF32) {
  check_against_reference<float>(GetParam(), 11);
}
TEST_P(Attention, ForwardAndBackwardMatchReferenceF64) {
  check_against_reference<double>(GetParam(), 12);
}

// d/d input of L = sum(out * R), the kernel's backward against central differences (f64).
TEST_P(Attention, BackwardMatchesFiniteDifferences) {
  const AttnCase& c = GetParam();
  const Layout l = make_layout(c);
  std::vector<double> in = make_inputs(l, 21);
  const std::vector<double> R = test::randn(l.out_size, 21, 3);
  const KernelOut<double> k = run_kernel<double>(l, in, &R);
  const auto loss = [&] {
    const KernelOut<double> f = run_kernel<double>(l, in, nullptr);
    double s = 0;
    for (int64_t i : l.o_idx) s += f.out[i] * R[i];
    return s;
  };
  const std::vector<double>& g = k.grad;
  const test::ScopedThreads one_thread(1);
  test::expect_grad_matches_fd(in, g, loss, "dq", l.q_idx, 60);
  test::expect_grad_matches_fd(in, g, loss, "dk", l.k_idx, 60);
  test::expect_grad_matches_fd(in, g, loss, "dv", l.v_idx, 60);
  double gmax = 0;
  for (int64_t i : l.v_idx) gmax = std::max(gmax, std::fabs(g[i]));
  EXPECT_GT(gmax, 0.0) << "dv is identically zero";
}

const AttnCase kCases[] = {
    {"causal_mha", 1, 37, 37, 2, 2, 24},
    {"gqa_6q_2kv_batch2", 2, 65, 65, 6, 2, 24},
    {"gqa_6q_3kv", 1, 63, 63, 6, 3, 16},
    {"mqa_6q_1kv_separate", 1, 40, 40, 6, 1, 8, 0, 0, 0, false},
    {"window_50", 2, 130, 130, 4, 2, 16, 0, 50},
    {"window_1", 1, 70, 70, 2, 1, 8, 0, 1},
    {"softcap", 1, 70, 70, 2, 2, 32, 0, 0, 2.0, true, 0.4},
    {"softcap_window_gqa", 2, 67, 67, 4, 2, 24, 0, 20, 3.0},
    {"decode_tq1", 2, 1, 37, 6, 2, 24, 36, 0, 0, false},
    {"decode_window", 1, 1, 130, 4, 1, 16, 129, 64, 0, false},
    {"prefill_chunk_offset", 1, 20, 85, 4, 2, 16, 65, 0, 0, false},
    {"single_token", 1, 1, 1, 2, 1, 8},
    {"head_dim_64_two_tiles", 1, 130, 130, 2, 1, 64},
    {"head_dim_80", 1, 65, 65, 2, 2, 80},
    {"rows_without_keys", 1, 5, 3, 2, 1, 8, 2, 1, 0, false},
    {"documents_gqa_batch2", 2, 150, 150, 6, 2, 24, 0, 0, 0, true, 0, 5},
    {"documents_window_softcap", 2, 131, 131, 4, 2, 16, 0, 30, 2.0, true, 0, 4},
    {"documents_many_short", 1, 97, 97, 2, 1, 8, 0, 0, 0, true, 0, 20},
};

INSTANTIATE_TEST_SUITE_P(Cases, Attention, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Rows that see no key: output 0, lse -inf, zero gradient, and no NaN anywhere.
TEST(AttentionEdge, RowsWithoutKeysGiveZerosNotNaN) {
  const Layout l = make_layout({"x", 1, 5, 3, 2, 1, 8, 2, 1, 0, false});
  const std::vector<double> in = make_inputs(l, 3);
  const std::vector<double> dout = test::randn(l.out_size, 3, 2);
  const KernelOut<float> k = run_kernel<float>(l, in, &dout);
  for (float v : k.out) EXPECT_FALSE(std::isnan(v));
  for (float v : k.grad) EXPECT_FALSE(std::isnan(v));
  // Query 1 sits at position 3 > the last key and window 1: nothing visible.
  for (int h = 0; h < 2; ++h) {
    EXPECT_TRUE(std::isinf(k.lse[h * 5 + 1]) && k.lse[h * 5 + 1] < 0);
    for (int d = 0; d < 8; ++d) {
      EXPECT_EQ(k.out[l.o_idx[(1 * 2 + h) * 8 + d]], 0.0f);
      EXPECT_EQ(k.grad[l.q_idx[(1 * 2 + h) * 8 + d]], 0.0f);
    }
  }
}

// Bit-identical backward: twice in a row, fused vs split work split, and 1 vs 2 threads.
TEST(AttentionDeterminism, BackwardIsBitIdentical) {
  const AttnCase c{"det", 2, 200, 200, 6, 2, 64, 0, 0, 0, true};
  const Layout l = make_layout(c);
  const std::vector<double> in = make_inputs(l, 9);
  const std::vector<double> dout = test::randn(l.out_size, 9, 2);
  const auto same = [](const KernelOut<float>& x, const KernelOut<float>& y) {
    return x.out.size() == y.out.size() && x.grad.size() == y.grad.size() &&
           std::memcmp(x.out.data(), y.out.data(), x.out.size() * 4) == 0 &&
           std::memcmp(x.lse.data(), y.lse.data(), x.lse.size() * 4) == 0 &&
           std::memcmp(x.grad.data(), y.grad.data(), x.grad.size() * 4) == 0;
  };
  const KernelOut<float> a = run_kernel<float>(l, in, &dout);
  const KernelOut<float> b = run_kernel<float>(l, in, &dout);
  EXPECT_TRUE(same(a, b)) << "two identical runs differ";
  cpu::set_attention_backward_mode(cpu::AttentionBackwardMode::fused);
  const KernelOut<float> fused = run_kernel<float>(l, in, &dout);
  cpu::set_attention_backward_mode(cpu::AttentionBackwardMode::split);
  const KernelOut<float> split = run_kernel<float>(l, in, &dout);
  cpu::set_attention_backward_mode(cpu::AttentionBackwardMode::automatic);
  EXPECT_TRUE(same(fused, split)) << "fused and split backward differ";
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const KernelOut<float> one = run_kernel<float>(l, in, &dout);
  omp_set_num_threads(threads);
  EXPECT_TRUE(same(a, one)) << "1 thread and " << threads << " threads differ";
  // And the result is right, not just repeatable.
  const RefOut ref = reference(l, in, &dout);
  expect_close(gather(a.grad, l.k_idx), gather(ref.grad, l.k_idx), 2e-5, "dk");
}

// Both work splits of the backward are checked against the reference on a GQA case.
TEST(AttentionModes, FusedAndSplitMatchReference) {
  const AttnCase c{"modes", 1, 100, 100, 6, 2, 24, 0, 30, 1.5, true};
  const Layout l = make_layout(c);
  const std::vector<double> in = make_inputs(l, 4);
  const std::vector<double> dout = test::randn(l.out_size, 4, 2);
  const RefOut ref = reference(l, in, &dout);
  for (auto mode : {cpu::AttentionBackwardMode::fused, cpu::AttentionBackwardMode::split}) {
    cpu::set_attention_backward_mode(mode);
    const KernelOut<double> k = run_kernel<double>(l, in, &dout);
    for (const auto* idx : {&l.q_idx, &l.k_idx, &l.v_idx})
      expect_close(gather(k.grad, *idx), gather(ref.grad, *idx), 1e-12, "grad");
  }
  cpu::set_attention_backward_mode(cpu::AttentionBackwardMode::automatic);
}

TEST(AttentionErrors, RejectsBadArguments) {
  CpuBackend be;
  AttentionArgs a;
  a.num_heads = 3, a.num_kv_heads = 2, a.head_dim = 8;
  float buf[64] = {};
  EXPECT_THROW(be.attention_forward(DType::f32, a, buf, buf, buf, buf, buf), InternalError);
  a.num_heads = 2;
  EXPECT_THROW(be.attention_forward(DType::f16, a, buf, buf, buf, buf, buf), InternalError);
}

}  // namespace
}  // namespace lmt
