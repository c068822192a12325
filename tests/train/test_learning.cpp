// Learning: the demo (configs/demo.yaml, fortune cookies, byte vocabulary) trained end to end must
// end with a validation loss well below the unigram entropy of its validation text, i.e. the model
// learned structure beyond byte frequencies. Runs the real demo config, as the README does.
#include <gtest/gtest.h>

#include <filesystem>

#include "train/run_config.h"
#include "train/trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

TEST(Learning, DemoEndsWellBelowUnigramEntropy) {
  const fs::path out = fs::temp_directory_path() / ("lmtrain_demo_" + std::to_string(::getpid()));
  fs::remove_all(out);
  RunConfig cfg = load_run_config(std::string(LMT_SOURCE_DIR) + "/configs/demo.yaml",
                                  {"train.out_dir=" + out.string(), "train.sample_tokens=0"});
  TrainResult r = train(cfg, false);
  const double entropy = r.val_unigram_entropy;
  fs::remove_all(out);
  EXPECT_EQ(r.steps, cfg.train.max_steps);
  ASSERT_GT(r.last_val_loss, 0.0);
  std::printf("demo: unigram entropy %.4f nats/token, final val loss %.4f\n", entropy,
              r.last_val_loss);
  // English bytes carry about 3 nats of unigram entropy; a model that only learned frequencies
  // sits there. Demand a loss at most three quarters of it.
  EXPECT_GT(entropy, 2.5);
  EXPECT_LT(r.last_val_loss, 0.75 * entropy);
}

}  // namespace
}  // namespace lmt
