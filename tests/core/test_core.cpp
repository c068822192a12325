// Core types: dtype conversions, shapes, the counter-based RNG.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace lmt {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(dtype_name(DType::i32), "i32");
  try {
    parse_dtype("f8", "export --dtype");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("export --dtype"), std::string::npos);
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(INFINITY))));
  // Relative error of a round trip is at most 2^-8 for normal numbers.
  Rng r(3);
  for (int i = 0; i < 10000; ++i) {
    float x = static_cast<float>(r.normal() * 100);
    float y = bf16_to_f32(f32_to_bf16(x));
    EXPECT_LE(std::abs(y - x), std::abs(x) * std::ldexp(1.0, -8));
  }
}

TEST(DType, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    const float f = f16_to_f32(x);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), x) << std::hex << h;
  }
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + std::ldexp(1.0f, -11))), 1.0f);  // tie to even
}

TEST(Tensor, HostTensorConverts) {
  HostTensor t(DType::f32, Shape{2, 3});
  for (int i = 0; i < 6; ++i) t.ptr<float>()[i] = 0.5f * i;
  HostTensor b = t.to(DType::bf16).to(DType::f64);
  EXPECT_EQ(b.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b.ptr<double>()[i], 0.5 * i);
  EXPECT_EQ(Shape({4, 5, 6}).numel(), 120);
  EXPECT_EQ(Shape({4, 5}).str(), "[4, 5]");
}

TEST(Rng, PhiloxKnownAnswer) {
  // Random123's known-answer test for philox4x32-10 with counter = 0 and key = 0.
  auto r = philox4x32(0, 0, 0);
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
}

TEST(Rng, IndependentOfThreadCount) {
  const int64_t n = 100003;
  std::vector<float> a(n), b(n);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  fill_normal(a.data(), n, 0.0, 1.0, 77, 5);
  omp_set_num_threads(2);
  fill_normal(b.data(), n, 0.0, 1.0, 77, 5);
  omp_set_num_threads(saved);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n * sizeof(float)));
  // Offsets address the same stream: elements [10, 20) equal a fill starting at 10.
  std::vector<float> c(10);
  fill_normal(c.data(), 10, 0.0, 1.0, 77, 5, 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(c[i], a[10 + i]);
}

TEST(Rng, NormalMoments) {
  const int64_t n = 200000;
  std::vector<double> x(n);
  fill_normal(x.data(), n, 1.5, 2.0, 9, 1);
  double m = 0, v = 0;
  for (double d : x) m += d;
  m /= n;
  for (double d : x) v += (d - m) * (d - m);
  v /= n;
  EXPECT_NEAR(m, 1.5, 0.02);
  EXPECT_NEAR(std::sqrt(v), 2.0, 0.02);
}

TEST(Rng, SequentialStateRestores) {
  Rng a(5, 2);
  for (int i = 0; i < 10; ++i) a.next_u64();
  Rng b(5, 2);
  b.set_counter(a.counter());
  EXPECT_EQ(a.next_u64(), b.next_u64());
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint64_t x = a.below(7);
    EXPECT_LT(x, 7u);
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 7u);
}

TEST(Errors, CheckNamesTheCondition) {
  try {
    LMT_CHECK(1 + 1 == 3, "arithmetic");
    FAIL();
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("1 + 1 == 3"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("arithmetic"), std::string::npos);
  }
}

}  // namespace
}  // namespace lmt
