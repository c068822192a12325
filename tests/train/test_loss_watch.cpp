// The divergence watch on random loss curves: a decreasing, noisy curve never warns; a rise out of
// the recent range warns once per episode, at its first step.
#include <gtest/gtest.h>

#include <random>

#include "train/loss_watch.h"

namespace lmt {
namespace {

TEST(LossWatch, WarnsOncePerRiseAndNeverOnANoisyDescent) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<double> noise(0, 0.08);
  for (int trial = 0; trial < 20; ++trial) {
    LossWatch w;
    double loss = 7.6;
    for (int64_t s = 1; s <= 600; ++s) {
      loss = 2 + (loss - 2) * 0.995;
      EXPECT_FALSE(w.add(s, loss + noise(rng))) << "step " << s;
    }
    // A rise to three times the loss: one warning, at its first step, naming the range.
    const auto first = w.add(601, 3 * loss);
    ASSERT_TRUE(first);
    EXPECT_EQ(first->step, 601);
    EXPECT_EQ(first->to_step, 600);
    EXPECT_NEAR(first->median, loss, 0.3);
    for (int64_t s = 602; s < 620; ++s) EXPECT_FALSE(w.add(s, 3 * loss));
    // Back in range ends the episode; the next rise warns again.
    EXPECT_FALSE(w.add(620, loss));
    EXPECT_TRUE(w.add(621, 4 * loss));
  }
  LossWatch early;  // fewer than kMinSteps losses are no range
  EXPECT_FALSE(early.add(1, 1));
  EXPECT_FALSE(early.add(2, 100));
}

}  // namespace
}  // namespace lmt
