// Learning: the demo exactly as the README runs it — `lmtrain tokenizer train` on the fortune
// cookies, `lmtrain prepare`, then training (configs/demo.yaml) — must end with a validation loss
// well below the unigram entropy of its validation tokens, i.e. the model learned structure
// beyond token frequencies.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "train/run_config.h"
#include "train/trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

TEST(Learning, DemoEndsWellBelowUnigramEntropy) {
  const fs::path out = fs::temp_directory_path() / ("lmtrain_demo_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const std::string config = std::string(LMT_SOURCE_DIR) + "/configs/demo.yaml";
  const std::vector<std::string> sets = {"train.out_dir=" + out.string(), "train.sample_tokens=0",
                                         "data.tokenizer=" + (out / "tokenizer.json").string(),
                                         "data.store=" + (out / "store").string()};
  std::string set_args;
  for (const auto& s : sets) set_args += " --set " + s;
  const std::string bin = LMT_BINARY;
  ASSERT_EQ(std::system((bin + " tokenizer train --config " + config + set_args +
                         " --vocab-size 2048 --out " + (out / "tokenizer.json").string())
                            .c_str()),
            0);
  ASSERT_EQ(std::system((bin + " prepare --quiet --config " + config + set_args).c_str()), 0);
  RunConfig cfg = load_run_config(config, sets);
  TrainResult r = train(cfg, false);
  fs::remove_all(out);
  const double entropy = r.val_unigram_entropy;
  EXPECT_EQ(r.steps, cfg.train.max_steps);
  ASSERT_GT(r.last_val_loss, 0.0);
  std::printf("demo: unigram entropy %.4f nats/token, final val loss %.4f\n", entropy,
              r.last_val_loss);
  // A model that only learned token frequencies sits at the unigram entropy (about 6 nats for
  // this 2048-token vocabulary). Demand a loss at most three quarters of it.
  EXPECT_GT(entropy, 4.0);
  EXPECT_LT(r.last_val_loss, 0.75 * entropy);
}

}  // namespace
}  // namespace lmt
