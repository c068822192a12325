// Shared pieces of the PJRT tests: one client on XLA's CPU plugin per test process (loading the
// plugin and creating a client is the slow part), fresh random inputs with their seed in the
// failure message, naive references in double, and the UserError a call throws. A machine without
// the plugin fails these tests with the message that says to run scripts/setup.sh: CI always has
// it, so a skip would hide a broken setup.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/pjrt/hlo/lowering.h"
#include "backend/pjrt/runtime/client.h"
#include "core/error.h"
#include "test_util.h"

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

// max |got - want| / max |want| over n elements (the largest error relative to the largest
// reference value).
template <class A, class B>
double max_rel_diff(const A* got, const B* want, size_t n) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(double(got[i]) - double(want[i])));
    ref = std::max(ref, std::fabs(double(want[i])));
  }
  return ref > 0 ? err / ref : err;
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
  // One attention lowering on fresh random q [B,T,Hq,D], k and v [B,T,Hkv,D] and dout: `build`
  // appends forward and backward to a program whose params are q, k, v, dout and the document
  // starts (doc: null when the case has none) and returns out, lse, dq, dk, dv, each compared
  // with the CPU backend's kernel. starts: [B,T], or null for no document masking.
  using AttentionBuild = std::function<std::vector<HloValue>(
      StablehloBuilder&, const hlo::AttentionArgsHlo&, const HloValue& q, const HloValue& k,
      const HloValue& v, const HloValue& dout, const HloValue* doc)>;
  void check_attention(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, double softcap,
                       int64_t window, const std::vector<int32_t>* starts,
                       const AttentionBuild& build, const std::string& name) {
    const std::vector<float> q = uniform(B * T * Hq * D), k = uniform(B * T * Hkv * D),
                             v = uniform(B * T * Hkv * D), dout = uniform(B * T * Hq * D);
    const std::vector<int32_t> doc = starts ? *starts : std::vector<int32_t>(B * T, 0);
    hlo::AttentionArgsHlo a;
    a.scale = 1.0 / std::sqrt(double(D)), a.softcap = softcap, a.window = window;
    StablehloBuilder b;
    const auto pq = b.param(DType::f32, {B, T, Hq, D}), pk = b.param(DType::f32, {B, T, Hkv, D}),
               pv = b.param(DType::f32, {B, T, Hkv, D}), pd = b.param(DType::f32, {B, T, Hq, D}),
               ps = b.param(DType::i32, {B, T});
    b.ret(build(b, a, pq, pk, pv, pd, starts ? &ps : nullptr));
    PjrtBuffer bq = dev(q, {B, T, Hq, D}), bk = dev(k, {B, T, Hkv, D}), bv = dev(v, {B, T, Hkv, D}),
               bd = dev(dout, {B, T, Hq, D}), bs = dev_i32(doc, {B, T});
    std::vector<std::vector<float>> got;
    for (PjrtBuffer& o :
         client_->compile(b.text()).execute(std::vector<PjrtBuffer*>{&bq, &bk, &bv, &bd, &bs}))
      got.push_back(o.to_host<float>());

    AttentionArgs args;
    args.batch = B, args.q_len = T, args.kv_len = T, args.num_heads = int(Hq),
    args.num_kv_heads = int(Hkv), args.head_dim = int(D);
    args.q_row_stride = Hq * D, args.q_batch_stride = T * Hq * D;
    args.kv_row_stride = Hkv * D, args.kv_batch_stride = T * Hkv * D;
    args.out_row_stride = Hq * D, args.out_batch_stride = T * Hq * D;
    args.scale = a.scale, args.softcap = softcap, args.window = window;
    args.doc_start = starts ? doc.data() : nullptr;
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

// The bytes of a file ("" when it cannot be read).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Tests on the test plugin (tests/pjrt/test_plugin), which wraps the plugin every other PJRT test
// uses; record_dir_ is the test's own directory for what the plugin records, removed after it.
class TestPluginTest : public PjrtTest {
 protected:
  void SetUp() override {
    PjrtTest::SetUp();
    if (HasFatalFailure()) return;
    if (!std::getenv("LMT_TEST_PLUGIN_WRAP"))  // read once, when the test plugin is first loaded
      setenv("LMT_TEST_PLUGIN_WRAP", client_->plugin().path().c_str(), 1);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    record_dir_ = std::filesystem::temp_directory_path() /
                  ("lmt_test_plugin_" + std::string(info->test_suite_name()) + "_" + info->name() +
                   "_" + std::to_string(getpid()));
    std::filesystem::remove_all(record_dir_);
  }
  void TearDown() override { std::filesystem::remove_all(record_dir_); }

  std::filesystem::path record_dir_;
};

}  // namespace lmt::test
