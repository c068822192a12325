// Backend::token_logprobs and head_logprobs on every backend (the CPU backend and PJRT through
// XLA's CPU plugin) against a double-precision reference from the same inputs (h and w as the
// dtype holds them): log_softmax at the label and the argmax flag, on fresh random inputs with
// ignored rows, chunks and vocabulary tiles that do not divide N and V (the last tile clamped),
// the soft-cap on and off, and deliberate ties (two head rows equal, so their logits are equal
// bit for bit in any precision): the flag goes to the lower id only, as torch.argmax's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend_test_util.h"
#include "cli/test_seed.h"

namespace lmt {
namespace {

struct Scores {
  std::vector<double> logprob;
  std::vector<int32_t> greedy;
};

// v as the dtype holds it, rounded (f32, bf16) and widened back.
std::vector<double> held(const std::vector<double>& v, DType dt) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = dt == DType::f64   ? v[i]
             : dt == DType::f32 ? static_cast<float>(v[i])
                                : bf16_to_f32(f32_to_bf16(static_cast<float>(v[i])));
  return out;
}

Buffer upload(Backend* be, const std::vector<double>& v, DType dt) {
  Buffer b(be, v.size() * dtype_size(dt));
  if (dt == DType::f64) {
    be->from_host(b.data(), v.data(), b.bytes());
  } else if (dt == DType::f32) {
    const std::vector<float> f = test::cast<float>(v);
    be->from_host(b.data(), f.data(), b.bytes());
  } else {
    std::vector<uint16_t> x(v.size());
    for (size_t i = 0; i < v.size(); ++i) x[i] = f32_to_bf16(static_cast<float>(v[i]));
    be->from_host(b.data(), x.data(), b.bytes());
  }
  return b;
}

Scores download(Backend* be, DType dt, const Buffer& lp, const Buffer& gr, int64_t N) {
  Scores s;
  s.logprob.resize(static_cast<size_t>(N));
  s.greedy.resize(static_cast<size_t>(N));
  be->to_host(s.greedy.data(), gr.data(), gr.bytes());
  if (dt == DType::f64) {
    be->to_host(s.logprob.data(), lp.data(), lp.bytes());
  } else {
    std::vector<float> f(static_cast<size_t>(N));
    be->to_host(f.data(), lp.data(), lp.bytes());
    s.logprob.assign(f.begin(), f.end());
  }
  return s;
}

// The reference: each row's capped logits z (in double, from the given values), log_softmax at
// the label, argmax with ties to the lowest id; `gap`: each row's top-two difference and `scale`
// its largest |z| (what a rounded kernel's error is relative to).
struct Reference {
  Scores s;
  std::vector<double> gap, scale;
};
Reference reference(const std::vector<double>& z_in, const std::vector<int32_t>& labels, int64_t V,
                    double softcap) {
  const auto N = static_cast<int64_t>(labels.size());
  Reference r;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> z(z_in.begin() + n * V, z_in.begin() + (n + 1) * V);
    if (softcap > 0)
      for (double& x : z) x = softcap * std::tanh(x / softcap);
    double mx = -INFINITY, second = -INFINITY, scale = 0;
    int64_t arg = 0;
    for (int64_t j = 0; j < V; ++j) {
      scale = std::max(scale, std::fabs(z[j]));
      if (z[j] > mx)
        second = mx, mx = z[j], arg = j;
      else if (z[j] > second)
        second = z[j];  // an equal maximum is the second too: gap 0
    }
    double sum = 0;
    for (double x : z) sum += std::exp(x - mx);
    const bool ignored = labels[n] == -100;
    r.s.logprob.push_back(ignored ? 0 : z[labels[n]] - mx - std::log(sum));
    r.s.greedy.push_back(!ignored && arg == labels[n]);
    r.gap.push_back(mx - second);
    r.scale.push_back(scale);
  }
  return r;
}

// Scores within tol * (1 + the row's largest |z|); flags equal wherever the reference's top two
// are more than flag_gap apart, and at the deliberate ties (gap exactly 0).
void expect_scores(const Scores& got, const Reference& want, double tol, double flag_gap,
                   const std::string& what) {
  double worst = 0;
  for (size_t i = 0; i < got.logprob.size(); ++i) {
    const double err = std::fabs(got.logprob[i] - want.s.logprob[i]);
    worst = std::max(worst, err);
    EXPECT_LE(err, tol * (1 + want.scale[i]))
        << what << ": row " << i << " got " << got.logprob[i] << " want " << want.s.logprob[i];
    if (want.gap[i] == 0 || want.gap[i] > flag_gap)
      EXPECT_EQ(got.greedy[i], want.s.greedy[i]) << what << ": greedy flag of row " << i;
    else
      EXPECT_TRUE(got.greedy[i] == 0 || got.greedy[i] == 1) << what;
  }
  std::printf("%-60s max |logprob - reference| %.3g\n", what.c_str(), worst);
}

// N rows of h [N,C] and a head w [V,C] with two pairs of equal rows (7 = 50 and 85 = 100, the
// second pair across the clamped last tile of 24 ids), and rows whose logits peak at a pair:
// their argmax is a tie, won by the lower id.
struct Inputs {
  int64_t N = 37, C = 16, V = 103;
  std::vector<double> h, w;
  std::vector<int32_t> labels;
};
Inputs make_inputs(uint32_t seed) {
  Inputs in;
  in.h = test::randn(in.N * in.C, seed, 0, 1.0);
  in.w = test::randn(in.V * in.C, seed, 1, 0.5);
  Rng rng(seed, 2);
  for (int64_t i = 0; i < in.N; ++i)
    in.labels.push_back(i % 5 == 3 ? -100 : static_cast<int32_t>(rng.next_u64() % in.V));
  in.labels[in.N - 1] = static_cast<int32_t>(in.V - 1);
  auto pair = [&](int64_t a, int64_t b, int64_t axis) {  // w[a] = w[b] = 4 e_axis
    for (int64_t c = 0; c < in.C; ++c) in.w[a * in.C + c] = in.w[b * in.C + c] = c == axis ? 4 : 0;
  };
  pair(7, 50, 0);
  pair(85, 100, 1);
  // Rows peaking at a pair (logit 20 against others of deviation about 3): label the lower id,
  // the higher one, or another.
  const int64_t tie_rows[][3] = {{0, 0, 7}, {1, 0, 50}, {2, 1, 85}, {4, 1, 100}, {5, 0, 3}};
  for (const auto& t : tie_rows) {
    for (int64_t ax : {0, 1}) in.h[t[0] * in.C + ax] = ax == t[1] ? 5 : 0;
    in.labels[t[0]] = static_cast<int32_t>(t[2]);
  }
  return in;
}

std::vector<DType> dtypes_of(const Backend& be) {
  if (be.name() == "cpu") return {DType::f64, DType::f32, DType::bf16};
  return {DType::f32, DType::bf16};
}

// Tolerances relative to the row's largest |z|: f64 and f32 rounding of the logits and their
// sums; bf16 logits are rounded to 8 bits (the label's and the log-sum-exp's error add).
double tol_of(DType dt) {
  return dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 2e-6 : 1.6e-2;
}
double flag_gap_of(DType dt) {
  return dt == DType::f64 ? 1e-9 : dt == DType::f32 ? 1e-4 : 0.5;
}

TEST(TokenLogprobs, HeadLogprobsMatchesADoubleReferenceOnEveryBackend) {
  const uint32_t seed = test::fresh_seed("TokenLogprobs.HeadLogprobsMatchesADoubleReference");
  const Inputs in = make_inputs(seed);
  for (const std::unique_ptr<Backend>& be : test::parity_backends())
    for (DType dt : dtypes_of(*be)) {
      const std::vector<double> h = held(in.h, dt), w = held(in.w, dt);
      std::vector<double> z(static_cast<size_t>(in.N * in.V), 0.0);
      for (int64_t n = 0; n < in.N; ++n)
        for (int64_t v = 0; v < in.V; ++v)
          for (int64_t c = 0; c < in.C; ++c) z[n * in.V + v] += h[n * in.C + c] * w[v * in.C + c];
      const Buffer hb = upload(be.get(), h, dt), wb = upload(be.get(), w, dt);
      Buffer lb(be.get(), in.labels.size() * 4);
      be->from_host(lb.data(), in.labels.data(), lb.bytes());
      for (double cap : {0.0, 5.0}) {
        const Reference want = reference(z, in.labels, in.V, cap);
        for (int64_t chunk : {int64_t{8}, int64_t{64}})
          for (int64_t tile : {int64_t{0}, int64_t{24}, int64_t{100}}) {
            const std::string what = be->name() + " " + std::string(dtype_name(dt)) + " cap " +
                                     std::to_string(cap) + " chunk " + std::to_string(chunk) +
                                     " tile " + std::to_string(tile);
            SCOPED_TRACE("seed " + std::to_string(seed) + ", " + what);
            HeadLossArgs a;
            a.N = in.N, a.C = in.C, a.V = in.V, a.chunk = chunk, a.softcap = cap;
            a.vocab_tile = tile;  // 0: whole rows; 24: 5 tiles, the last clamped; 100: 2 tiles
            const HeadLossScratch s = head_loss_scratch(std::min(chunk, in.N), in.V, tile);
            Buffer logits(be.get(), static_cast<size_t>(s.logits) * dtype_size(dt));
            Buffer lp(be.get(), static_cast<size_t>(in.N) * (dt == DType::f64 ? 8 : 4));
            Buffer gr(be.get(), static_cast<size_t>(in.N) * 4);
            be->head_logprobs(dt, a, hb.data(), wb.data(), static_cast<const int32_t*>(lb.data()),
                              lp.data(), gr.data(), logits.data());
            const Scores got = download(be.get(), dt, lp, gr, in.N);
            expect_scores(got, want, tol_of(dt), flag_gap_of(dt), what);
            // The deliberate ties, whatever the dtype: the lower id wins.
            EXPECT_EQ(got.greedy[0], 1);
            EXPECT_EQ(got.greedy[1], 0);
            EXPECT_EQ(got.greedy[2], 1);
            EXPECT_EQ(got.greedy[4], 0);
            EXPECT_EQ(got.greedy[5], 0);
            EXPECT_EQ(got.logprob[3], 0);  // ignored rows
            EXPECT_EQ(got.greedy[3], 0);
          }
      }
    }
}

// token_logprobs on logits given directly, with rows holding equal maxima at chosen ids.
TEST(TokenLogprobs, TokenLogprobsOnGivenLogitsOnEveryBackend) {
  const uint32_t seed = test::fresh_seed("TokenLogprobs.TokenLogprobsOnGivenLogits");
  const int64_t N = 11, V = 37;
  std::vector<double> z = test::randn(N * V, seed, 0, 2.0);
  Rng rng(seed, 1);
  std::vector<int32_t> labels;
  for (int64_t n = 0; n < N; ++n)
    labels.push_back(n == 6 ? -100 : static_cast<int32_t>(rng.next_u64() % V));
  for (int64_t n : {0, 1}) {  // a tie at ids 4 and 30, labelled at either
    z[n * V + 4] = z[n * V + 30] = 9.0;
    labels[n] = n == 0 ? 4 : 30;
  }
  for (const std::unique_ptr<Backend>& be : test::parity_backends())
    for (DType dt : dtypes_of(*be))
      for (double cap : {0.0, 3.0}) {
        const std::string what = be->name() + " token_logprobs " + std::string(dtype_name(dt)) +
                                 " cap " + std::to_string(cap);
        SCOPED_TRACE("seed " + std::to_string(seed) + ", " + what);
        const std::vector<double> zh = held(z, dt);
        const Buffer zb = upload(be.get(), zh, dt);
        Buffer lb(be.get(), labels.size() * 4);
        be->from_host(lb.data(), labels.data(), lb.bytes());
        Buffer lp(be.get(), static_cast<size_t>(N) * (dt == DType::f64 ? 8 : 4));
        Buffer gr(be.get(), static_cast<size_t>(N) * 4);
        be->token_logprobs(dt, zb.data(), static_cast<const int32_t*>(lb.data()), N, V, -100, cap,
                           lp.data(), gr.data());
        const Scores got = download(be.get(), dt, lp, gr, N);
        // The logits are given exactly in the dtype: f32's accuracy for every dtype but f64.
        expect_scores(got, reference(zh, labels, V, cap), dt == DType::f64 ? 1e-12 : 2e-6, 1e-4,
                      what);
        EXPECT_EQ(got.greedy[0], 1);
        EXPECT_EQ(got.greedy[1], 0);
        EXPECT_EQ(got.logprob[6], 0);
      }
}

}  // namespace
}  // namespace lmt
