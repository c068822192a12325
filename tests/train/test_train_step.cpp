// The training step that train and bench share (train/train_step.h), on a model from build_model
// as both build it: its loss is the mean over every labelled token of the step however the step
// is split into micro-batches (labels ignored unevenly across them), a step without a labelled
// token is a UserError, and a step whose loss or gradient norm is not finite is a NonFiniteError
// naming the step. Steps queued one ahead (launch, then report) report exactly what steps run one
// by one report, on the CPU backend and on pjrt, whose queued programs run while the next is built.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cli/test_seed.h"
#include "core/rng.h"
#include "export/export_test_util.h"
#include "io/io_test_util.h"
#include "optim/schedule.h"
#include "train/model_builder.h"
#include "train/train_step.h"

namespace lmt {
namespace {

constexpr int64_t kT = 9;     // odd on purpose
constexpr int64_t kRows = 6;  // sequences in the step

RunConfig tiny_run(int64_t micro_batch, int64_t accum) {
  RunConfig cfg;
  cfg.model = test::tiny_config("llama");
  cfg.data.seq_len = kT;
  cfg.train.micro_batch_size = micro_batch;
  cfg.train.grad_accum_steps = accum;
  cfg.train.seed = 5;
  return cfg;
}

// kRows x kT fresh random tokens, one document a row; the first two rows have most labels
// ignored, so the micro-batches of a split step hold very different numbers of labelled tokens.
struct Tokens {
  std::vector<int32_t> ids, labels;
};
Tokens random_tokens(uint64_t seed, int64_t vocab) {
  Rng rng(seed, 1);
  Tokens t;
  for (int64_t i = 0; i < kRows * kT; ++i) {
    t.ids.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab))));
    t.labels.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab))));
    if (i < 2 * kT && i % kT != 3) t.labels.back() = Transformer::kIgnoreIndex;
  }
  return t;
}

// `steps` steps of `cfg` on the same tokens, each split into its micro-batches in row order;
// `queued`: as the trainer queues them, one launched ahead of the report read.
std::vector<StepReport> run_steps(const RunConfig& cfg, const Tokens& t, int steps,
                                  bool queued = false) {
  const BuiltModel built = build_model(cfg, {StartFrom::seed, false, ""});
  TrainStep step(*built.model, *built.optimizer, cfg);
  const int64_t B = cfg.train.micro_batch_size;
  Batch batch;
  int64_t row = 0;
  auto next = [&]() -> const Batch& {
    const int64_t at = (row % kRows) * kT;
    batch.ids.assign(t.ids.begin() + at, t.ids.begin() + at + B * kT);
    batch.labels.assign(t.labels.begin() + at, t.labels.begin() + at + B * kT);
    batch.doc_starts.assign(static_cast<size_t>(B), {0});
    row += B;
    return batch;
  };
  std::vector<StepReport> out;
  int launched = 0;
  for (int s = 0; s < steps; ++s) {
    if (!queued) {
      out.push_back(step.run(s, next));
      continue;
    }
    while (launched < steps && step.queued() < TrainStep::kMaxQueued) step.launch(launched++, next);
    out.push_back(step.report());
  }
  EXPECT_EQ(step.queued(), 0);
  return out;
}

TEST(TrainStep, LossIsTheMeanOverTheStepWhateverItsSplit) {
  const uint64_t seed = test::fresh_seed("TrainStep.LossIsTheMeanOverTheStepWhateverItsSplit");
  const Tokens t = random_tokens(seed, test::tiny_config("llama").vocab_size);
  const std::vector<StepReport> whole = run_steps(tiny_run(kRows, 1), t, 2);
  for (const auto& [B, accum] : {std::pair<int64_t, int64_t>{2, 3}, {3, 2}, {1, 6}}) {
    const std::vector<StepReport> split = run_steps(tiny_run(B, accum), t, 2);
    for (size_t s = 0; s < whole.size(); ++s) {
      SCOPED_TRACE("micro-batch " + std::to_string(B) + " x " + std::to_string(accum) + ", step " +
                   std::to_string(s));
      // f32 sums in another order: a few ulps of the loss and the norm.
      EXPECT_NEAR(split[s].loss, whole[s].loss, 1e-5 * whole[s].loss);
      EXPECT_NEAR(split[s].grad_norm, whole[s].grad_norm, 1e-4 * whole[s].grad_norm);
      EXPECT_EQ(split[s].tokens, kRows * kT);
      EXPECT_EQ(split[s].lr, lr_at(tiny_run(B, accum).train, static_cast<int64_t>(s)));
    }
  }
  EXPECT_GT(whole[0].loss, 0.0);
  EXPECT_GT(whole[0].grad_norm, 0.0);
}

TEST(TrainStep, QueuedStepsReportWhatStepsRunOneByOneReport) {
  const uint64_t seed = test::fresh_seed("TrainStep.QueuedStepsReportWhatStepsRunOneByOneReport");
  for (const char* backend : {"cpu", "pjrt"}) {
    SCOPED_TRACE(backend);
    RunConfig cfg = tiny_run(3, 2);
    cfg.train.backend = backend;
    const Tokens t = random_tokens(seed, cfg.model.vocab_size);
    const std::vector<StepReport> one = run_steps(cfg, t, 5), queued = run_steps(cfg, t, 5, true);
    ASSERT_EQ(queued.size(), one.size());
    for (size_t s = 0; s < one.size(); ++s) {  // the same programs on the same data: the same bits
      EXPECT_EQ(queued[s].loss, one[s].loss) << "step " << s;
      EXPECT_EQ(queued[s].grad_norm, one[s].grad_norm) << "step " << s;
      EXPECT_EQ(queued[s].lr, one[s].lr) << "step " << s;
    }
    EXPECT_NE(one[4].loss, one[0].loss);  // the steps trained
  }
}

TEST(TrainStep, NoLabelledTokenIsAUserError) {
  Tokens t = random_tokens(3, test::tiny_config("llama").vocab_size);
  for (int32_t& l : t.labels) l = Transformer::kIgnoreIndex;
  test::expect_user_error([&] { run_steps(tiny_run(kRows, 1), t, 1); },
                          {"data: a training step has no labelled tokens"});
}

TEST(TrainStep, ANonFiniteStepIsANonFiniteErrorNamingIt) {
  RunConfig cfg = tiny_run(3, 2);
  cfg.train.lr = 1e30;  // the first update overflows the weights; the next loss is not finite
  cfg.train.warmup_steps = 0;
  cfg.train.grad_clip = 0;
  const Tokens t = random_tokens(4, cfg.model.vocab_size);
  try {
    run_steps(cfg, t, 5, true);
    FAIL() << "five steps at lr 1e30 stayed finite";
  } catch (const NonFiniteError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("step ", 0), 0u) << what;
    EXPECT_NE(what.find("no checkpoint was written from this step"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace lmt
