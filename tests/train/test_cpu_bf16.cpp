// Mixed precision on the CPU backend (train.precision: bf16) over whole runs: the demo
// (configs/demo.yaml on the fortune cookies, as the README runs it) for its first 200 steps ends
// within 2% of the f32 run's loss (the fixture's, tests/demo_run.h), and a bf16 run resumed from
// its checkpoint repeats the uninterrupted run's losses exactly. Where the CPU lacks bf16 matrix
// instructions the products are emulated (LMTRAIN_CPU_BF16=emulate: the same numbers); without
// that, `lmtrain train` refuses bf16 in one message (tests/cli).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "bf16_products.h"
#include "demo_run.h"
#include "test_util.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

class CpuBf16Training : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("lmtrain_cpu_bf16_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    ASSERT_EQ(test::demo_run_missing(), "");
    bf16_ = std::make_unique<test::ScopedBf16Products>();
    std::printf("bf16 products: %s\n", bf16_->name());
  }

  // The demo's config with the fixture's data, in bf16, logging every step, no evaluation or
  // sample.
  static RunConfig demo(const std::string& run, std::vector<std::string> sets) {
    sets.insert(sets.begin(), "train.precision=bf16");  // later sets win
    return test::demo_run_config(dir_, run, sets);
  }
  static std::map<int64_t, double> losses(const std::string& run) {
    return test::read_losses(dir_ / run).train;
  }

  static fs::path dir_;
  std::unique_ptr<test::ScopedBf16Products> bf16_;
};
fs::path CpuBf16Training::dir_;

// The fixture's f32 CPU run of the demo against the same run in bf16, stopped after its first 200
// steps (the cosine schedule follows max_steps: the 600-step run's first 200 steps).
TEST_F(CpuBf16Training, DemoEndsWithin2PercentOfF32After200Steps) {
  const int64_t steps = 200;
  train(demo("demo_bf16", {"train.save_every=0"}), false, steps);
  std::map<int64_t, double> f32 = test::read_losses(test::demo_run_dir()).train;
  f32.erase(f32.upper_bound(steps), f32.end());
  const auto bf16 = losses("demo_bf16");
  ASSERT_EQ(bf16.size(), 200u);
  ASSERT_EQ(f32.size(), 200u);
  const double final_f32 = f32.rbegin()->second, final_bf16 = bf16.rbegin()->second;
  std::printf("demo, 200 steps: loss cpu f32 %.4f, cpu bf16 %.4f (%+.2f%%)\n", final_f32,
              final_bf16, 100 * (final_bf16 - final_f32) / final_f32);
  EXPECT_LT(std::fabs(final_bf16 - final_f32), 0.02 * final_f32);
  EXPECT_LT(final_bf16, f32.begin()->second - 1.0);  // and it learned
}

// The checkpoint holds the f32 master weights and moments; the bf16 copy is remade from them, so
// a resumed run repeats the uninterrupted one bit for bit (micro-batches accumulated in f32).
TEST_F(CpuBf16Training, ResumesExactly) {
  const std::vector<std::string> small = {
      "model.hidden_size=32",        "model.intermediate_size=64",  "model.num_hidden_layers=2",
      "model.num_attention_heads=2", "model.num_key_value_heads=1", "train.micro_batch_size=4",
      "train.grad_accum_steps=2",    "train.warmup_steps=2",        "train.save_every=3"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), small.begin(), small.end());  // later sets win
    return extra;
  };
  train(demo("bf16_whole", with({"train.max_steps=6"})), false);
  train(demo("bf16_resumed", with({"train.max_steps=3"})), false);
  EXPECT_EQ(train(demo("bf16_resumed", with({"train.max_steps=6"})), true).first_step, 3);
  const auto want = losses("bf16_whole"), got = losses("bf16_resumed");
  ASSERT_EQ(want.size(), 6u);
  for (int64_t step = 1; step <= 6; ++step) {
    ASSERT_TRUE(got.count(step)) << "step " << step;
    EXPECT_EQ(got.at(step), want.at(step)) << "step " << step;
  }
}

}  // namespace
}  // namespace lmt
