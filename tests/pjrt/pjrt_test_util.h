// Shared pieces of the PJRT tests: one client on XLA's CPU plugin per test process (loading the
// plugin and creating a client is the slow part), fresh random inputs with their seed in the
// failure message, and naive references in double. A machine without the plugin fails these tests
// with the message that says to run scripts/setup.sh: CI always has it, so a skip would hide a
// broken setup.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/pjrt/pjrt_client.h"
#include "core/error.h"

namespace lmt::test {

class PjrtTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::unique_ptr<PjrtClient> shared;
    static std::string failure;
    if (!shared && failure.empty()) {
      try {
        shared = std::make_unique<PjrtClient>(resolve_pjrt_plugin_path());
      } catch (const UserError& e) {
        failure = e.what();
      }
    }
    ASSERT_TRUE(shared) << failure;
    client_ = shared.get();
    seed_ = std::random_device{}();
    rng_.seed(seed_);
  }

  // n numbers uniform in [-1, 1); the seed is in every failure message of the test.
  std::vector<float> uniform(size_t n) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  std::string seed_note() const { return "seed " + std::to_string(seed_); }

  PjrtClient* client_ = nullptr;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

// Expects |got_i - want_i| <= tol * scale_i for every element.
inline void expect_near_all(const std::vector<float>& got, const std::vector<double>& want,
                            const std::vector<double>& scale, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double ratio = std::fabs(got[i] - want[i]) / (tol * scale[i] + 1e-300);
    if (!(ratio <= 1)) ++bad;
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements out of tolerance; worst at " << worst << ": got " << got[worst]
                     << ", want " << want[worst];
}

// The lowering tests' base: arrays to the device, and the comparison with the CPU backend's
// kernel (within 2e-5 of the largest element: float32 rounding of equivalent orders).
class LoweringFixture : public PjrtTest {
 protected:
  PjrtBuffer dev(const std::vector<float>& v, std::vector<int64_t> dims) {
    return client_->to_device(v.data(), DType::f32, std::move(dims));
  }
  PjrtBuffer dev_i32(const std::vector<int32_t>& v, std::vector<int64_t> dims) {
    return client_->to_device(v.data(), DType::i32, std::move(dims));
  }
  void expect_match(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
    double scale = 1;
    for (float w : want) scale = std::max(scale, std::fabs(double{w}));
    expect_near_all(got, std::vector<double>(want.begin(), want.end()),
                    std::vector<double>(want.size(), scale), 2e-5, what + ", " + seed_note());
  }
  // got: out, lse, dq, dk, dv of a lowering, for q [B,T,Hq,D], k and v [B,T,Hkv,D]; each against
  // the CPU backend's attention kernel on the same inputs.
  void expect_attention_matches_cpu(const std::vector<std::vector<float>>& got, int64_t B,
                                    int64_t T, int64_t Hq, int64_t Hkv, int64_t D, double scale,
                                    double softcap, int64_t window, const int32_t* doc_start,
                                    const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, const std::vector<float>& dout,
                                    const std::string& name) {
    AttentionArgs args;
    args.batch = B, args.q_len = T, args.kv_len = T, args.num_heads = int(Hq),
    args.num_kv_heads = int(Hkv), args.head_dim = int(D);
    args.q_row_stride = Hq * D, args.q_batch_stride = T * Hq * D;
    args.kv_row_stride = Hkv * D, args.kv_batch_stride = T * Hkv * D;
    args.out_row_stride = Hq * D, args.out_batch_stride = T * Hq * D;
    args.scale = scale, args.softcap = softcap, args.window = window;
    args.doc_start = doc_start;
    std::vector<float> out(q.size()), lse(B * Hq * T), dq(q.size()), dk(k.size()), dv(v.size());
    cpu_.attention_forward(DType::f32, args, out.data(), lse.data(), q.data(), k.data(), v.data());
    cpu_.attention_backward(DType::f32, args, dq.data(), dk.data(), dv.data(), dout.data(),
                            q.data(), k.data(), v.data(), out.data(), lse.data());
    ASSERT_EQ(got.size(), 5u) << name;
    expect_match(got[0], out, name + "out");
    expect_match(got[1], lse, name + "lse");
    expect_match(got[2], dq, name + "dq");
    expect_match(got[3], dk, name + "dk");
    expect_match(got[4], dv, name + "dv");
  }
  CpuBackend cpu_;
};

}  // namespace lmt::test
