// Weighted mixing: counts follow the weights exactly (largest remainder), every draw is a sample
// of its own source, upsampled sources repeat every sample equally often, and the order is a pure
// function of (seed, epoch, sizes, weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "data/mixture.h"

namespace lmt {
namespace {

TEST(Mixture, CountsFollowWeightsAndSumToTheTotal) {
  std::mt19937_64 gen(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    const int S = 1 + static_cast<int>(gen() % 5);
    std::vector<int64_t> sizes(S);
    std::vector<double> weights(S);
    for (int i = 0; i < S; ++i) {
      sizes[i] = static_cast<int64_t>(gen() % 50);
      weights[i] = 0.1 + static_cast<double>(gen() % 100) / 10.0;
    }
    const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
    std::vector<int64_t> c = mixture_counts(sizes, weights);
    EXPECT_EQ(std::accumulate(c.begin(), c.end(), int64_t{0}), total);
    double wsum = 0;
    for (int i = 0; i < S; ++i) wsum += sizes[i] > 0 ? weights[i] : 0;
    for (int i = 0; i < S; ++i) {
      if (sizes[i] == 0) {
        EXPECT_EQ(c[i], 0);
        continue;
      }
      EXPECT_LE(std::abs(static_cast<double>(c[i]) - total * weights[i] / wsum), 1.0);
    }
  }
}

TEST(Mixture, EqualWeightsOneSourceIsAPermutation) {
  std::vector<int64_t> sizes{37};
  std::vector<double> w{1.0};
  std::vector<int64_t> o = epoch_order(5, 0, sizes, w);
  std::sort(o.begin(), o.end());
  for (int64_t i = 0; i < 37; ++i) EXPECT_EQ(o[i], i);
  EXPECT_NE(epoch_order(5, 0, sizes, w), epoch_order(5, 1, sizes, w));
  EXPECT_NE(epoch_order(5, 0, sizes, w), epoch_order(6, 0, sizes, w));
  EXPECT_EQ(epoch_order(5, 3, sizes, w), epoch_order(5, 3, sizes, w));
}

TEST(Mixture, DrawsStayInTheirSourceAndUpsampleEvenly) {
  // Source 0: 10 samples, weight 3; source 1: 50 samples, weight 1. Epoch = 60 draws:
  // 45 from source 0 (each sample 4 or 5 times), 15 from source 1 (distinct samples).
  std::vector<int64_t> sizes{10, 50};
  std::vector<double> w{3.0, 1.0};
  std::vector<int64_t> o = epoch_order(11, 2, sizes, w);
  ASSERT_EQ(o.size(), 60u);
  std::map<int64_t, int> seen;
  int from0 = 0;
  for (int64_t id : o) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 60);
    ++seen[id];
    from0 += id < 10;
  }
  EXPECT_EQ(from0, 45);
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_GE(seen[i], 4);
    EXPECT_LE(seen[i], 5);
  }
  for (int64_t i = 10; i < 60; ++i) EXPECT_LE(seen[i], 1);
}

}  // namespace
}  // namespace lmt
