// The long-context step fits one 80 GB device: Llama-3.2-1B's shape (configs/bench/llama-1b.yaml)
// at B1 T32768, bf16, activation checkpointing, compiled (not run) on XLA's CPU plugin, needs
// under 44 GiB of arguments plus temporaries by XLA's own buffer assignment (PyTorch's peak for
// that run on an H100 was 44.0 GiB). What it took before: 128.7 GiB with f32 logits-sized and
// every layer's products alive; 51.5 GiB while XLA:CPU fused the residual additions into every
// reader (Backend::keep); 37.9 GiB now.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "pjrt_test_util.h"
#include "train/bench.h"
#include "train/run_config.h"

namespace lmt {
namespace {

using test::PjrtTest;

TEST_F(PjrtTest, LongContext1BStepCompilesUnder44GiB) {
  const RunConfig cfg =
      load_run_config(std::string(LMT_SOURCE_DIR) + "/configs/bench/llama-1b.yaml",
                      {"train.backend=pjrt", "data.seq_len=32768", "train.micro_batch_size=1",
                       "train.activation_checkpointing=true", "train.precision=bf16"});
  const nlohmann::json j = run_bench(cfg, 0, /*compile_only=*/true);
  const nlohmann::json& m = j["pjrt"]["step_memory"];
  ASSERT_TRUE(m.is_object()) << j.dump();
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const double args = m["argument_bytes"].get<double>() / gib,
               temp = m["temp_bytes"].get<double>() / gib;
  std::printf("1B, T 32768, bf16, checkpointed: arguments %.2f GiB + temporaries %.2f GiB\n", args,
              temp);
  // The arguments are the f32 weights and AdamW's two moments (12 bytes a parameter) and the batch.
  EXPECT_NEAR(args, 12.0 * j["params"].get<double>() / gib, 0.01);
  EXPECT_LT(args + temp, 44.0);
}

// The cut cross-entropy's forward and backward compiled alone (lmtrain bench --head-loss
// --compile-only) for Llama-3.2-1B's head (vocab 128256, hidden 2048) at 32768 tokens, f32, on
// XLA's CPU plugin: its temporaries are the weight gradient it accumulates in f32 and a few tiles
// of [loss_chunk_tokens, vocab_tile] logits; the chunked loss needs at least a chunk's whole rows
// of logits more, the full loss every token's (16.8 GB of f32 logits).
TEST_F(PjrtTest, CutCrossEntropyAt32KNeedsAboutOneTilePlusItsGradients) {
  const std::vector<std::string> sets = {"train.backend=pjrt", "data.seq_len=32768",
                                         "train.micro_batch_size=1", "train.loss_chunk_tokens=1024"};
  const RunConfig cfg =
      load_run_config(std::string(LMT_SOURCE_DIR) + "/configs/bench/llama-1b.yaml", sets);
  auto temp = [&](const char* mode) {
    const nlohmann::json j = run_head_loss_bench(cfg, mode, 0, /*compile_only=*/true);
    EXPECT_TRUE(j["program_memory"].is_object()) << j.dump();
    const double t = j["program_memory"]["temp_bytes"].get<double>();
    std::printf("%s: temporaries %.3f GB\n", mode, t / 1e9);
    return t;
  };
  const double V = 128256, C = 2048, N = 32768;
  const double chunk = static_cast<double>(cfg.train.loss_chunk_tokens);
  const double tile = chunk * static_cast<double>(cfg.loss.vocab_tile) * 4;
  const double dw = V * C * 4;
  const double cut = temp("cut"), chunked = temp("chunked"), full = temp("full");
  EXPECT_LT(cut, dw + 8 * tile);
  EXPECT_GT(chunked, cut + chunk * V * 4);
  EXPECT_GT(full, N * V * 4);
}

}  // namespace
}  // namespace lmt
