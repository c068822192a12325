// Validation per source: a run mixing two sources evaluates each one's validation samples on its
// own as well and logs them under the sources' names (metrics.jsonl "val_sources"). One source is
// "abab...", the other random words, so after training the first's loss must be far below the
// second's: each number comes from its own samples.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/rng.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

TEST(ValidationSources, EachSourceIsEvaluatedAndLoggedByName) {
  const fs::path dir =
      fs::temp_directory_path() / ("lmtrain_val_sources_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream easy(dir / "easy.txt"), hard(dir / "hard.txt");
    const char* words[] = {"qua", "zip", "lorn", "vex", "mud", "pike", "orb", "jolt", "fen", "wry"};
    Rng r(3);
    for (int d = 0; d < 60; ++d) {
      if (d) easy << "%\n", hard << "%\n";
      for (int k = 0; k < 20 + d; ++k) easy << "ab";  // distinct documents (the store dedups)
      easy << "\n";
      for (int w = 0; w < 12; ++w) hard << words[r.below(10)] << (w == 11 ? "\n" : " ");
    }
  }
  RunConfig c;
  c.model.vocab_size = 257;
  c.model.hidden_size = 32;
  c.model.intermediate_size = 48;
  c.model.num_hidden_layers = 1;
  c.model.num_attention_heads = 2;
  c.model.max_position_embeddings = 32;
  for (const char* name : {"easy.txt", "hard.txt"}) {
    SourceConfig s;
    s.path = (dir / name).string();
    c.data.sources.push_back(s);
  }
  c.data.sources[1].name = "random_words";
  c.data.seq_len = 32;
  c.data.val_fraction = 0.2;
  c.train.micro_batch_size = 4;
  c.train.max_steps = 60;
  c.train.warmup_steps = 5;
  c.train.lr = 1e-2;
  c.train.eval_every = 30;
  c.train.eval_steps = 2;
  c.train.out_dir = (dir / "run").string();
  c.logging.console = false;
  c.validate();
  train(c, false);

  std::ifstream f(dir / "run" / "metrics.jsonl");
  int evals = 0;
  nlohmann::json last;
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("val_loss")) continue;
    ++evals;
    ASSERT_TRUE(j.contains("val_sources")) << line;
    const auto& s = j["val_sources"];
    ASSERT_EQ(s.size(), 2u) << line;
    for (const char* name : {"easy", "random_words"}) {
      ASSERT_TRUE(s.contains(name)) << line;
      EXPECT_GT(s[name]["tokens"].get<int64_t>(), 0);
      EXPECT_NEAR(s[name]["ppl"].get<double>(), std::exp(s[name]["loss"].get<double>()),
                  1e-9 * s[name]["ppl"].get<double>());
    }
    last = j;
  }
  EXPECT_EQ(evals, 2);  // at step 30 and at the end
  const double easy = last["val_sources"]["easy"]["loss"],
               hard = last["val_sources"]["random_words"]["loss"];
  EXPECT_LT(easy, 0.5 * hard) << "easy " << easy << ", random words " << hard;
  // The overall validation loss lies between them (it mixes both sources' samples).
  EXPECT_GT(last["val_loss"].get<double>(), easy);
  EXPECT_LT(last["val_loss"].get<double>(), hard);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmt
