// Blocked attention (hlo::attention_forward_blocked / attention_backward_blocked) on XLA's CPU
// plugin: against the CPU backend's kernels on fresh random inputs in float32 (lengths that are
// not a multiple of the block, grouped-query heads, window, soft-cap, documents), within 2e-5 of
// the largest element as in lowering_test; and one sequence of 32768 tokens, checked on a few
// rows against double precision computed for those rows only, within a memory bound that a [T,T]
// score tensor (4 GiB per head) would break.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/pjrt/hlo/lowering.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

using Dims = std::vector<int64_t>;

class AttentionBlockedTest : public test::LoweringFixture {
 protected:
  // Random document starts, non-decreasing along each sequence, 1 to 4 documents.
  std::vector<int32_t> documents(int64_t B, int64_t T) {
    std::vector<int32_t> starts(B * T);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int64_t> cuts = {0};
      for (uint32_t n = rng_() % 4; n > 0; --n) cuts.push_back(1 + rng_() % (T - 1));
      std::sort(cuts.begin(), cuts.end());
      for (int64_t i = 0; i < T; ++i) {
        int64_t s = 0;
        for (int64_t c : cuts) s = c <= i ? c : s;
        starts[b * T + i] = int32_t(s);
      }
    }
    return starts;
  }
};

// Both directions in one program, the backward fed the blocked forward's out and lse.
TEST_F(AttentionBlockedTest, MatchesCpuKernel) {
  struct Case {
    int64_t B, T, Hq, Hkv, D, window;
    double softcap;
    bool docs;
    int64_t block;
  };
  for (const Case& c :
       {Case{2, 13, 4, 2, 8, 0, 0.0, false, 4}, Case{1, 23, 6, 2, 4, 5, 2.0, false, 8},
        Case{2, 20, 2, 2, 6, 0, 0.0, true, 6}, Case{1, 37, 4, 1, 8, 9, 3.0, true, 8},
        Case{2, 7, 2, 1, 4, 0, 0.0, false, 16}}) {
    const std::vector<int32_t> starts = c.docs ? documents(c.B, c.T) : std::vector<int32_t>();
    const int64_t block = c.block;
    check_attention(
        c.B, c.T, c.Hq, c.Hkv, c.D, c.softcap, c.window, c.docs ? &starts : nullptr,
        [block](StablehloBuilder& b, const hlo::AttentionArgsHlo& a, const HloValue& q,
                const HloValue& k, const HloValue& v, const HloValue& d, const HloValue* doc) {
          const hlo::AttentionOut f = hlo::attention_forward_blocked(b, a, q, k, v, doc, block);
          const hlo::AttentionGrads g =
              hlo::attention_backward_blocked(b, a, d, q, k, v, f.out, f.lse, doc, block);
          return std::vector<HloValue>{f.out, f.lse, g.dq, g.dk, g.dv};
        },
        "T " + std::to_string(c.T) + " block " + std::to_string(c.block) + ": ");
  }
}

// T = 32768, one kv head shared by two query heads, causal. dout is zero except on a few rows,
// so that dk and dv (every row) and dq (the same rows; zero elsewhere) follow from those rows'
// probabilities alone, which double precision computes in O(T) each.
TEST_F(AttentionBlockedTest, LongSequenceInBoundedMemory) {
  const int64_t B = 1, T = 32768, Hq = 2, Hkv = 1, D = 16, block = 512;
  const std::vector<int64_t> rows = {0, 1, 511, 512, 4097, 20000, 32767};
  const std::vector<float> q = uniform(T * Hq * D), k = uniform(T * Hkv * D),
                           v = uniform(T * Hkv * D), dense_dout = uniform(T * Hq * D);
  std::vector<float> dout(T * Hq * D, 0.0f);
  for (int64_t i : rows)
    std::copy_n(dense_dout.begin() + i * Hq * D, Hq * D, dout.begin() + i * Hq * D);
  hlo::AttentionArgsHlo a;
  a.scale = 1.0 / std::sqrt(double(D));
  StablehloBuilder b;
  const auto pq = b.param(DType::f32, {B, T, Hq, D}), pk = b.param(DType::f32, {B, T, Hkv, D}),
             pv = b.param(DType::f32, {B, T, Hkv, D}), pd = b.param(DType::f32, {B, T, Hq, D});
  const hlo::AttentionOut f = hlo::attention_forward_blocked(b, a, pq, pk, pv, nullptr, block);
  const hlo::AttentionGrads g =
      hlo::attention_backward_blocked(b, a, pd, pq, pk, pv, f.out, f.lse, nullptr, block);
  b.ret({f.out, f.lse, g.dq, g.dk, g.dv});
  PjrtBuffer bq = dev(q, {B, T, Hq, D}), bk = dev(k, {B, T, Hkv, D}), bv = dev(v, {B, T, Hkv, D}),
             bd = dev(dout, {B, T, Hq, D});
  std::vector<std::vector<float>> got;
  for (PjrtBuffer& o :
       client_->compile(b.text()).execute(std::vector<PjrtBuffer*>{&bq, &bk, &bv, &bd}))
    got.push_back(o.to_host<float>());

  // The chosen rows in double: probabilities p_j, out, lse; dq and the rows' share of dk, dv.
  std::vector<double> want_out(rows.size() * Hq * D), want_lse(rows.size() * Hq),
      want_dq(T * Hq * D, 0.0), want_dk(T * D, 0.0), want_dv(T * D, 0.0);
  std::vector<float> got_out, got_lse;
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t i = rows[r];
    for (int64_t h = 0; h < Hq; ++h) {
      const float* qi = &q[(i * Hq + h) * D];
      const float* di = &dout[(i * Hq + h) * D];
      std::vector<double> s(i + 1);
      double max = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double{qi[d]} * k[j * D + d];
        s[j] = a.scale * dot, max = std::max(max, s[j]);
      }
      for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[j] - max);
      std::vector<double> o(D, 0.0);
      for (int64_t j = 0; j <= i; ++j) {
        s[j] = std::exp(s[j] - max) / sum;  // now p_j
        for (int64_t d = 0; d < D; ++d) o[d] += s[j] * v[j * D + d];
      }
      double delta = 0;
      for (int64_t d = 0; d < D; ++d) {
        want_out[(r * Hq + h) * D + d] = o[d];
        got_out.push_back(got[0][(i * Hq + h) * D + d]);
        delta += double{di[d]} * o[d];
      }
      want_lse[r * Hq + h] = max + std::log(sum);
      got_lse.push_back(got[1][h * T + i]);
      for (int64_t j = 0; j <= i; ++j) {
        double dp = 0;
        for (int64_t d = 0; d < D; ++d) dp += double{di[d]} * v[j * D + d];
        const double ds = s[j] * (dp - delta) * a.scale;
        for (int64_t d = 0; d < D; ++d) {
          want_dq[(i * Hq + h) * D + d] += ds * k[j * D + d];
          want_dk[j * D + d] += ds * qi[d];
          want_dv[j * D + d] += s[j] * di[d];
        }
      }
    }
  }
  auto check = [&](const std::vector<float>& got_v, const std::vector<double>& want,
                   const std::string& what) {
    double scale = 1;
    for (double w : want) scale = std::max(scale, std::fabs(w));
    test::expect_near_all(got_v, want, std::vector<double>(want.size(), scale), 2e-5,
                          "T 32768 " + what + ", " + seed_note());
  };
  check(got_out, want_out, "out rows");
  check(got_lse, want_lse, "lse rows");
  check(got[2], want_dq, "dq");
  check(got[3], want_dk, "dk");
  check(got[4], want_dv, "dv");
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  EXPECT_LT(usage.ru_maxrss, 2L << 20) << "peak RSS in KiB";  // under 2 GiB
}

}  // namespace
}  // namespace lmt
