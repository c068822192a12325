// The run's schedule of evaluations and checkpoints (train/run_schedule.h): the intervals, the
// final step's checkpoint before its evaluation, and intervals of 0 meaning never.
#include <gtest/gtest.h>

#include "train/run_schedule.h"

namespace lmt {
namespace {

TEST(RunSchedule, IntervalsWithinTheRunEvaluateBeforeTheyCheckpoint) {
  const RunSchedule s{100, 20, 30};
  for (int64_t step = 1; step < 100; ++step) {
    SCOPED_TRACE(step);
    const RunSchedule::Point p = s.at(step);
    EXPECT_EQ(p.evaluate, step % 20 == 0);
    EXPECT_EQ(p.save, step % 30 == 0);
    EXPECT_FALSE(p.save_first);
    EXPECT_EQ(p.any(), step % 20 == 0 || step % 30 == 0);
  }
  const RunSchedule::Point both = s.at(60);
  EXPECT_TRUE(both.evaluate && both.save && !both.save_first);
}

TEST(RunSchedule, TheLastStepCheckpointsThenEvaluatesWhateverTheIntervals) {
  for (const RunSchedule s : {RunSchedule{100, 20, 30}, RunSchedule{100, 0, 0},
                              RunSchedule{7, 3, 0}, RunSchedule{1, 1, 1}}) {
    SCOPED_TRACE(s.max_steps);
    const RunSchedule::Point p = s.at(s.max_steps);
    EXPECT_TRUE(p.save);
    EXPECT_TRUE(p.evaluate);
    EXPECT_TRUE(p.save_first);
  }
}

TEST(RunSchedule, IntervalsOfZeroAreNever) {
  const RunSchedule s{50, 0, 0};
  for (int64_t step = 0; step < 50; ++step) EXPECT_FALSE(s.at(step).any()) << step;
}

}  // namespace
}  // namespace lmt
