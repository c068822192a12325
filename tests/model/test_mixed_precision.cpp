// Mixed precision on the CPU backend (train.precision: bf16): bf16 weight copies and activations,
// bf16 products with f32 accumulation, f32 statistics, master weights and loss. Every family
// variant against the f32 CPU backend within the bounds the PJRT backend's bf16 test uses. Where
// the CPU lacks bf16 matrix instructions the products are emulated (LMTRAIN_CPU_BF16=emulate,
// f32 products of bf16 values: the same contract), so the kernels are tested on any machine; the
// refusal without it is tested here and in the CLI tests.
#include <gtest/gtest.h>

#include <string>

#include "backend/cpu/cpu_backend.h"
#include "bf16_products.h"
#include "model/mixed_precision.h"
#include "model/model_test_util.h"
#include "test_util.h"

namespace lmt {
namespace {

using test::Variant;

class CpuMixedPrecision : public testing::TestWithParam<Variant> {};

TEST_P(CpuMixedPrecision, Bf16ComputeTracksTheF32CpuBackend) {
  const test::ScopedBf16Products bf16;
  SCOPED_TRACE(bf16.name());
  test::expect_bf16_tracks_f32("cpu", GetParam().name, GetParam().cfg);
}

TEST(CpuMixedPrecisionSupport, SaysWhyBf16CannotRunOrRunsIt) {
  test::ScopedEnv env("LMTRAIN_CPU_BF16", nullptr);
  const std::string why = CpuBackend().unsupported(DType::bf16);
  if (!why.empty()) {
    EXPECT_NE(why.find("AVX512-BF16 or AMX"), std::string::npos) << why;
    EXPECT_NE(why.find("train.precision: f32"), std::string::npos) << why;
  }
  EXPECT_EQ(CpuBackend().unsupported(DType::f32), "");
  test::ScopedEnv emulate("LMTRAIN_CPU_BF16", "emulate");
  EXPECT_EQ(CpuBackend().unsupported(DType::bf16), "");
  EXPECT_NE(CpuBackend().kernels().find("bf16 emulated"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Variants, CpuMixedPrecision, testing::ValuesIn(test::variants()),
                         [](const testing::TestParamInfo<Variant>& i) { return i.param.name; });

}  // namespace
}  // namespace lmt
