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
  // The first loss is a range: a second step's loss many times it has diverged at once.
  LossWatch early;
  EXPECT_FALSE(early.add(1, 7.7));
  const auto at_two = early.add(2, 630);
  ASSERT_TRUE(at_two);
  EXPECT_EQ(at_two->step, 2);
  EXPECT_EQ(at_two->from_step, 1);
}

// The range travels in a checkpoint: a watch restored from another's state warns at the first
// risen loss after a resume, where a fresh one would take that loss as its range.
TEST(LossWatch, ARestoredWatchGoesOnAsTheOneItWasSavedFrom) {
  LossWatch w;
  for (int64_t s = 1; s <= 20; ++s) EXPECT_FALSE(w.add(s, 5.0 - 0.01 * static_cast<double>(s)));
  LossWatch resumed, fresh;
  resumed.restore(nlohmann::json::parse(w.state().dump()));
  EXPECT_EQ(resumed.state(), w.state());
  const auto warned = resumed.add(21, 40);
  ASSERT_TRUE(warned);
  EXPECT_EQ(warned->from_step, 1);
  EXPECT_EQ(warned->to_step, 20);
  EXPECT_FALSE(fresh.add(21, 40));
  // Mid-episode: a saved episode does not warn again at its next risen loss.
  LossWatch mid;
  mid.restore(resumed.state());
  EXPECT_FALSE(mid.add(22, 45));
  EXPECT_THROW(mid.restore(nlohmann::json::parse(R"({"recent": [[1]], "out": false})")),
               nlohmann::json::exception);
}

}  // namespace
}  // namespace lmt
