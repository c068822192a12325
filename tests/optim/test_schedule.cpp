// Learning-rate schedules at their key points, monotonicity, floors, errors.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "optim/schedule.h"
#include "train/run_config.h"

namespace lmt {
namespace {

ScheduleConfig config(const std::string& name, int64_t warmup = 10, int64_t max_steps = 110) {
  return ScheduleConfig{name, 1.0, 0.1, warmup, max_steps, 0.2};
}

TEST(Schedule, WarmupIsLinearAndReachesLr) {
  for (const char* name : {"constant", "cosine", "linear", "wsd"}) {
    ScheduleConfig c = config(name);
    EXPECT_DOUBLE_EQ(lr_at(c, 0), 1.0 / 11) << name;
    EXPECT_DOUBLE_EQ(lr_at(c, 4), 5.0 / 11) << name;
    EXPECT_DOUBLE_EQ(lr_at(c, 9), 10.0 / 11) << name;
    EXPECT_DOUBLE_EQ(lr_at(c, 10), 1.0) << name;
    for (int64_t s = 1; s <= 10; ++s) EXPECT_GT(lr_at(c, s), lr_at(c, s - 1)) << name;
    c.warmup_steps = 0;
    EXPECT_DOUBLE_EQ(lr_at(c, 0), 1.0) << name;
  }
}

TEST(Schedule, CosineAndLinearDecayToMinLr) {
  ScheduleConfig cos = config("cosine"), lin = config("linear");
  EXPECT_NEAR(lr_at(cos, 60), 0.55, 1e-12);  // halfway: (lr + min_lr) / 2
  EXPECT_NEAR(lr_at(cos, 35), 0.1 + 0.9 * (1 + std::sqrt(0.5)) / 2, 1e-12);  // a quarter
  EXPECT_NEAR(lr_at(lin, 60), 0.55, 1e-12);
  EXPECT_NEAR(lr_at(lin, 35), 0.775, 1e-12);
  for (auto* c : {&cos, &lin}) {
    EXPECT_NEAR(lr_at(*c, 110), 0.1, 1e-12);
    EXPECT_NEAR(lr_at(*c, 500), 0.1, 1e-12);
    EXPECT_GT(lr_at(*c, 109), 0.1);
    for (int64_t s = 11; s < 200; ++s) {
      EXPECT_LE(lr_at(*c, s), lr_at(*c, s - 1)) << c->schedule << " step " << s;
      EXPECT_GE(lr_at(*c, s), 0.1) << c->schedule << " step " << s;
    }
  }
}

TEST(Schedule, ConstantStaysAtLr) {
  ScheduleConfig c = config("constant");
  for (int64_t s : {10, 50, 109, 110, 1000}) EXPECT_DOUBLE_EQ(lr_at(c, s), 1.0);
}

TEST(Schedule, WsdHoldsThenDecaysOverTheLastFraction) {
  ScheduleConfig c = config("wsd", 10, 100);  // decay over the last 20 steps: from step 80
  for (int64_t s = 10; s <= 80; ++s) EXPECT_DOUBLE_EQ(lr_at(c, s), 1.0) << s;
  EXPECT_NEAR(lr_at(c, 90), 0.55, 1e-12);
  EXPECT_NEAR(lr_at(c, 81), 1.0 - 0.9 / 20, 1e-12);
  EXPECT_NEAR(lr_at(c, 100), 0.1, 1e-12);
  EXPECT_NEAR(lr_at(c, 150), 0.1, 1e-12);
  for (int64_t s = 11; s < 120; ++s) {
    EXPECT_LE(lr_at(c, s), lr_at(c, s - 1));
    EXPECT_GE(lr_at(c, s), 0.1);
  }
  c.decay_fraction = 0.0;
  EXPECT_DOUBLE_EQ(lr_at(c, 99), 1.0);
  c.decay_fraction = 1.0;  // the decay cannot start before warmup ends
  EXPECT_DOUBLE_EQ(lr_at(c, 10), 1.0);
  EXPECT_NEAR(lr_at(c, 55), 0.55, 1e-12);
}

TEST(Schedule, UnknownNameNamesTheKey) {
  try {
    lr_at(config("exponential"), 0);
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("train.schedule"), std::string::npos) << e.what();
  }
}

TEST(Schedule, AcceptsTrainConfig) {
  TrainConfig t;
  t.schedule = "linear";
  t.lr = 2.0;
  t.min_lr = 0.0;
  t.warmup_steps = 0;
  t.max_steps = 4;
  EXPECT_DOUBLE_EQ(lr_at(t, 0), 2.0);
  EXPECT_DOUBLE_EQ(lr_at(t, 1), 1.5);
  EXPECT_DOUBLE_EQ(lr_at(t, 3), 0.5);
}

}  // namespace
}  // namespace lmt
