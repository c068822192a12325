// The host side of a run across processes (train/run_processes.h), with two ranks as two threads
// of this process meeting in a directory store: the rows each rank feeds partition the global
// batch (on the CPU backend, each rank's step over its own rows, scaled by the labelled tokens of
// the whole batch, gives losses that add up to the one-process step's), and rank 0 alone writes,
// the other taking its result or stopping with its error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "cli/test_seed.h"
#include "core/error.h"
#include "core/rng.h"
#include "export/export_test_util.h"
#include "train/model_builder.h"
#include "train/run_processes.h"
#include "train/train_step.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSeqLen = 7;      // odd on purpose
constexpr int64_t kGlobalRows = 6;  // the global batch

class RunProcessesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lmt_run_processes_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // f(processes) on ranks 0 and 1 of 2, each on a thread of its own; their results in rank order.
  template <class R>
  std::vector<R> on_two_ranks(const std::function<R(RunProcesses&)>& f) {
    auto rank = [&](int r) {
      RunProcesses processes(ProcessGroup{r, 2, "test"}, dir_.string(), std::chrono::seconds(30));
      return f(processes);
    };
    std::future<R> one = std::async(std::launch::async, rank, 1);
    R zero = rank(0);
    return {std::move(zero), one.get()};
  }

  fs::path dir_;
};

RunConfig tiny_global_run() {
  RunConfig cfg;
  cfg.model = test::tiny_config("llama");
  cfg.data.seq_len = kSeqLen;
  cfg.train.micro_batch_size = kGlobalRows;
  cfg.train.seed = 3;
  return cfg;
}

// kGlobalRows x kSeqLen fresh random tokens, one document a row; the first two rows (rank 0's) have
// most of their labels ignored, so the ranks hold very different numbers of labelled tokens.
Batch random_global_batch(uint64_t seed, int64_t vocab) {
  Rng rng(seed, 1);
  Batch b;
  for (int64_t i = 0; i < kGlobalRows * kSeqLen; ++i) {
    b.ids.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab))));
    b.labels.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab))));
    if (i < 2 * kSeqLen && i % kSeqLen != 2) b.labels.back() = Transformer::kIgnoreIndex;
  }
  b.doc_starts.assign(kGlobalRows, {0});
  return b;
}

// Rows [first, first + rows) of b.
Batch rank_rows(const Batch& b, int64_t first, int64_t rows) {
  Batch part;
  part.ids.assign(b.ids.begin() + first * kSeqLen, b.ids.begin() + (first + rows) * kSeqLen);
  part.labels.assign(b.labels.begin() + first * kSeqLen,
                     b.labels.begin() + (first + rows) * kSeqLen);
  part.doc_starts.assign(static_cast<size_t>(rows), {0});
  return part;
}

// The first step of the tiny run on `batch` (this rank's rows when `processes` is given).
StepReport first_step_of(const Batch& batch, RunProcesses* processes) {
  const RunConfig cfg = tiny_global_run();
  const BuiltModel built = build_model(cfg, {StartFrom::seed, false, ""});
  TrainStep step(*built.model, *built.optimizer, cfg, processes);
  return step.run(0, [&]() -> const Batch& { return batch; });
}

TEST_F(RunProcessesTest, TheRanksRowsPartitionTheGlobalBatch) {
  const uint64_t seed = test::fresh_seed("RunProcesses.TheRanksRowsPartitionTheGlobalBatch");
  const Batch global = random_global_batch(seed, test::tiny_config("llama").vocab_size);
  const StepReport whole = first_step_of(global, nullptr);
  const std::vector<StepReport> parts = on_two_ranks<StepReport>([&](RunProcesses& p) {
    EXPECT_EQ(p.rows(kGlobalRows), kGlobalRows / 2);
    EXPECT_EQ(p.first_row(kGlobalRows), p.group().rank * kGlobalRows / 2);
    return first_step_of(rank_rows(global, p.first_row(kGlobalRows), p.rows(kGlobalRows)), &p);
  });
  // Each rank's loss is its rows' loss sum over every rank's labelled tokens: the two add up to
  // the whole batch's mean (f32 sums in another order: a few ulps). A rank that divided by its
  // own tokens, or fed other rows, would be far off: rank 0 holds 9 labelled tokens (its first
  // two rows 1 each), rank 1 21.
  EXPECT_NEAR(parts[0].loss + parts[1].loss, whole.loss, 1e-5 * whole.loss);
  EXPECT_GT(parts[0].loss, 0.0);
  EXPECT_GT(parts[1].loss, parts[0].loss);  // rank 1 holds most of the labelled tokens
  for (const StepReport& r : parts)
    EXPECT_EQ(r.tokens, kGlobalRows * kSeqLen);  // the global batch's
}

TEST_F(RunProcessesTest, LabelledTokensAreSummedOverTheRanks) {
  const std::vector<int64_t> sums = on_two_ranks<int64_t>([](RunProcesses& p) {
    int64_t last = 0;
    for (int step = 0; step < 5; ++step)
      last = p.sum("labelled tokens", 10 * p.group().rank + step);
    return last;
  });
  EXPECT_EQ(sums, (std::vector<int64_t>{18, 18}));  // the last: 4 + (10 + 4)
  // Keys every rank has read are removed as the exchanges go on: at most the last two sums'.
  size_t kept = 0;
  for (const auto& run : fs::directory_iterator(dir_))
    if (fs::is_directory(run.path() / "kv"))
      for ([[maybe_unused]] const auto& key : fs::directory_iterator(run.path() / "kv")) ++kept;
  EXPECT_LE(kept, 4u);
}

TEST_F(RunProcessesTest, RankZeroWritesAndTheOthersTakeItsResult) {
  std::atomic<int> writes{0};
  const std::vector<std::string> got = on_two_ranks<std::string>([&](RunProcesses& p) {
    EXPECT_EQ(p.writer(), p.group().rank == 0);
    return p.by_writer("checkpoint at step 2", [&] {
      ++writes;
      return std::string("checkpoints/step_0000002 written by rank ") +
             std::to_string(p.group().rank);
    });
  });
  EXPECT_EQ(writes.load(), 1);
  EXPECT_EQ(got, (std::vector<std::string>(2, "checkpoints/step_0000002 written by rank 0")));
}

TEST_F(RunProcessesTest, ARankZeroThatFailsToWriteStopsTheOthersWithItsError) {
  const std::vector<std::string> errors = on_two_ranks<std::string>([](RunProcesses& p) {
    try {
      p.by_writer("checkpoint at step 2", []() -> std::string {
        throw UserError("checkpoint: cannot write 'out/checkpoints': No space left on device");
      });
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  });
  EXPECT_EQ(errors[0], "checkpoint: cannot write 'out/checkpoints': No space left on device");
  EXPECT_EQ(errors[1],
            "parallel: rank 0 failed at the checkpoint at step 2, so rank 1 of 2 stops: "
            "checkpoint: cannot write 'out/checkpoints': No space left on device");
}

// After a stop signal, a rank waiting for another that stopped at another step gives up after
// kStopGrace (here rank 1 never comes to the exchange, and stays alive meanwhile).
TEST_F(RunProcessesTest, AfterAStopSignalARankGivesUpOnOneThatStoppedAtAnotherStep) {
  const std::vector<std::string> got = on_two_ranks<std::string>([](RunProcesses& p) {
    if (p.group().rank == 1) {
      std::this_thread::sleep_for(RunProcesses::kStopGrace + std::chrono::seconds(3));
      return std::string("rank 1 stayed away");
    }
    p.give_up_when([] { return true; });
    const auto start = std::chrono::steady_clock::now();
    try {
      p.sum("labelled tokens of step 12", 5);
    } catch (const UserError& e) {
      const double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_GE(took, 5.0);
      EXPECT_LT(took, 7.0);
      return std::string(e.what());
    }
    return std::string("no error");
  });
  EXPECT_NE(got[0].find("parallel: rank 0 of 2 stopped waiting for key 'lmt/0/labelled tokens of "
                        "step 12/rank 1': a stop signal arrived, and rank 1 has not come to this "
                        "exchange within 5 s: the ranks stopped at different steps"),
            std::string::npos)
      << got[0];
}

TEST(RunProcesses, OneProcessNeedsNoStore) {
  RunProcesses p(ProcessGroup{}, "", std::chrono::seconds(1));
  EXPECT_EQ(p.store(), nullptr);
  EXPECT_TRUE(p.writer());
  EXPECT_EQ(p.sum("labelled tokens", 7), 7);
  EXPECT_EQ(p.by_writer("checkpoint", [] { return std::string("done"); }), "done");
  EXPECT_EQ(p.rows(6), 6);
  EXPECT_EQ(p.first_row(6), 0);
}

}  // namespace
}  // namespace lmt
