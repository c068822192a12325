// train.init_from: fine-tuning from a Hugging Face directory (tests/data/hf/llama, vocab 256). The
// first step's loss is the loss the directory's model gives, through Transformer::forward_loss,
// on the same batch (so the weights really were loaded); the shape comes from config.json and a
// YAML model key that disagrees is an error naming it; a missing directory is an error; a resumed
// run continues from its checkpoint without reading the weights again. A config built in code
// imports the directory itself (import_init_from, the check of every model key), once. The
// tokenizer is transformers' byte-level BPE fixture cut to its 256 byte tokens (id 0
// <|endoftext|>), so every id fits the model's 256 embeddings.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../io/io_test_util.h"
#include "backend/backend.h"
#include "data/loader.h"
#include "io/hf_model.h"
#include "model/transformer.h"
#include "train/init_from.h"
#include "train/run_config.h"
#include "train/train_data.h"
#include "train/trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

class InitFrom : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lmtrain_init_from_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "hf");
    const fs::path fixture = fs::path(LMT_TEST_DATA) / "hf" / "llama";
    for (const char* f : {"config.json", "model.safetensors"})
      fs::copy_file(fixture / f, dir_ / "hf" / f);
    std::ifstream in(fs::path(LMT_TEST_DATA) / "tokenizers" / "bytelevel_bpe.json");
    auto tok = nlohmann::json::parse(in);
    nlohmann::json vocab = nlohmann::json::object();
    for (const auto& [piece, id] : tok["model"]["vocab"].items())
      if (id.get<int>() < 256) vocab[piece] = id;  // drops 'Ń' (byte 0xAD) and every merge
    tok["model"]["vocab"] = vocab;
    tok["model"]["merges"] = nlohmann::json::array();
    std::ofstream(dir_ / "hf" / "tokenizer.json") << tok.dump();
    std::ofstream docs(dir_ / "docs.txt");
    const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "far"};
    for (int d = 0; d < 30; ++d) {
      if (d) docs << "%\n";
      for (int w = 0; w < 9; ++w) docs << words[(d * 7 + w * 3) % 10] << (w == 8 ? "\n" : " ");
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A config file: `model` and `extra` are YAML lines added to the model and train sections.
  std::string yaml(const std::string& out, const std::string& init_from, int64_t max_steps,
                   const std::string& model = "", const std::string& data_extra = "") {
    const std::string path = (dir_ / (out + ".yaml")).string();
    std::ofstream(path) << (model.empty() ? "" : "model:\n" + model) << "data:\n"
                        << "  sources: [{path: '" << (dir_ / "docs.txt").string() << "'}]\n"
                        << "  seq_len: 16\n  val_fraction: 0.1\n"
                        << data_extra << "train:\n"
                        << "  init_from: '" << init_from << "'\n"
                        << "  micro_batch_size: 2\n  max_steps: " << max_steps << "\n"
                        << "  warmup_steps: 0\n  lr: 0.01\n  min_lr: 0.001\n  eval_every: 0\n"
                        << "  save_every: 2\n  keep_last: 0\n  log_every: 1\n  threads: 1\n"
                        << "  out_dir: '" << (dir_ / out).string() << "'\n"
                        << "logging:\n  console: false\n";
    return path;
  }

  std::vector<double> step_losses(const std::string& out) {
    std::ifstream f(dir_ / out / "metrics.jsonl");
    std::vector<double> losses;
    for (std::string l; std::getline(f, l);) {
      auto j = nlohmann::json::parse(l);
      if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
    }
    return losses;
  }

  std::string hf() const { return (dir_ / "hf").string(); }
  fs::path dir_;
};

TEST_F(InitFrom, FirstStepLossIsTheLoadedModels) {
  RunConfig cfg = load_run_config(yaml("a", hf(), 2), {});
  EXPECT_EQ(cfg.model.vocab_size, 256);  // the shape comes from config.json
  EXPECT_EQ(cfg.model.hidden_size, 32);
  EXPECT_EQ(cfg.model.num_key_value_heads, 2);
  EXPECT_EQ(cfg.model.intermediate_size, 96);
  EXPECT_EQ(cfg.data.tokenizer, hf());  // data.tokenizer unset: the directory's tokenizer.json
  cfg.logging.console = true;
  testing::internal::CaptureStdout();
  const TrainResult r = train(cfg, false);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(r.steps, 2);
  EXPECT_NE(out.find("init: weights of Hugging Face model '" + hf() + "'"), std::string::npos)
      << out;

  // The same first batch through the directory's model and through a fresh initialisation.
  TrainData data = open_train_data(cfg, true);
  EXPECT_FALSE(data.prepared_now);
  Loader loader(*data.train, 2, static_cast<uint64_t>(cfg.train.seed));
  const Batch& b = loader.next();
  auto be = make_backend("cpu");
  auto loaded = load_hf_model(hf(), be.get());
  const LossSum s = batch_loss(*loaded, b.ids.data(), b.labels.data(), 2, 16);
  const double want = s.sum / static_cast<double>(s.tokens);
  const std::vector<double> got = step_losses("a");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NEAR(got[0], want, 1e-6 * want);
  Transformer fresh(be.get(), cfg.model);
  fresh.init_weights(static_cast<uint64_t>(cfg.train.seed));
  const LossSum f = batch_loss(fresh, b.ids.data(), b.labels.data(), 2, 16);
  EXPECT_GT(std::abs(f.sum / static_cast<double>(f.tokens) - want), 1e-4 * want);  // can fail
}

// A config built in code goes through the same import as a loaded one, every model key it holds
// checked against config.json; training refuses one that skipped it (a bug in the calling code,
// not a user's error), rather than importing a second time.
TEST_F(InitFrom, AConfigBuiltInCodeIsImportedByItsAuthor) {
  RunConfig cfg;
  cfg.model.vocab_size = 256;
  cfg.data.sources.resize(1);
  cfg.data.sources[0].path = (dir_ / "docs.txt").string();
  cfg.data.seq_len = 16;
  cfg.data.val_fraction = 0.1;
  cfg.train.init_from = hf();
  cfg.train.micro_batch_size = 2;
  cfg.train.max_steps = 1;
  cfg.train.eval_every = 0;
  cfg.train.out_dir = (dir_ / "code").string();
  cfg.logging.console = false;
  test::expect_user_error([&] { import_init_from(cfg); },
                          {"train: model.", " here but ", " in " + hf() + "/config.json"});
  EXPECT_EQ(cfg.imported_init_from, "");
  cfg.model = read_hf_model_config(hf());
  cfg.data.tokenizer = hf();
  RunConfig skipped = cfg;
  import_init_from(cfg);
  EXPECT_EQ(cfg.imported_init_from, hf());
  EXPECT_EQ(train(cfg, false).steps, 1);
  skipped.train.out_dir = (dir_ / "skipped").string();
  EXPECT_THROW(train(skipped, false), InternalError);
}

TEST_F(InitFrom, ModelKeysMustAgreeWithConfigJson) {
  // Keys that agree (num_key_value_heads and head_dim as config.json states them) are fine.
  RunConfig ok = load_run_config(
      yaml("b", hf(), 2, "  hidden_size: 32\n  num_key_value_heads: 2\n  head_dim: 8\n"), {});
  EXPECT_EQ(ok.model.num_hidden_layers, 2);
  const std::string path = yaml("c", hf(), 2, "  hidden_size: 64\n");
  test::expect_user_error(
      [&] { load_run_config(path, {}); },
      {path + ": model.hidden_size is 64 here but 32 in " + hf() + "/config.json"});
  // 0 = as many key/value heads as query heads (4), but the directory has 2.
  test::expect_user_error(
      [&] { load_run_config(yaml("d", hf(), 2, "  num_key_value_heads: 0\n"), {}); },
      {"model.num_key_value_heads is 0 (= 4) here but 2 in"});
  // An override counts as set too.
  test::expect_user_error([&] { load_run_config(yaml("e", hf(), 2), {"model.rope_theta=500000"}); },
                          {"model.rope_theta is 500000 here but 10000 in"});
}

TEST_F(InitFrom, MissingOrIncompleteDirectoryIsAnError) {
  const std::string missing = (dir_ / "nowhere").string();
  test::expect_user_error([&] { load_run_config(yaml("f", missing, 2), {}); },
                          {"train.init_from", missing, "not a directory"});
  fs::create_directories(dir_ / "empty");
  test::expect_user_error([&] { load_run_config(yaml("g", (dir_ / "empty").string(), 2), {}); },
                          {"train.init_from", "config.json", "not found"});
  // No tokenizer in the directory and data.tokenizer set empty: say so.
  const std::string bare = (fs::path(LMT_TEST_DATA) / "hf" / "llama").string();
  test::expect_user_error([&] { load_run_config(yaml("h", bare, 2, "", "  tokenizer: ''\n"), {}); },
                          {"data.tokenizer", bare, "tokenizer.json"});
  // Weights missing: the run stops before any step, naming the file.
  fs::create_directories(dir_ / "noweights");
  fs::copy_file(dir_ / "hf" / "config.json", dir_ / "noweights" / "config.json");
  RunConfig cfg =
      load_run_config(yaml("i", (dir_ / "noweights").string(), 2, "",
                           "  tokenizer: '" + (dir_ / "hf" / "tokenizer.json").string() + "'\n"),
                      {});
  test::expect_user_error([&] { train(cfg, false); }, {"model.safetensors"});
}

TEST_F(InitFrom, ResumeContinuesFromTheCheckpointNotTheDirectory) {
  train(load_run_config(yaml("whole", hf(), 4), {}), false);
  const std::string path = yaml("split", hf(), 4);
  const TrainResult first = train(load_run_config(path, {}), false, /*stop_after=*/2);
  EXPECT_EQ(first.steps, 2);
  // Weights gone from the directory: resuming must not need them (config.json gives the shape).
  fs::remove(dir_ / "hf" / "model.safetensors");
  RunConfig cfg = load_run_config(path, {});
  cfg.logging.console = true;
  testing::internal::CaptureStdout();
  const TrainResult second = train(cfg, true);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(second.steps, 4);
  EXPECT_NE(out.find("not reloaded: resuming from"), std::string::npos) << out;
  EXPECT_EQ(step_losses("whole"), step_losses("split"));  // bit-identical: the same weights
}

// The directory may be gone altogether when a run resumes: the checkpoint has its config.json and
// a copy of its tokenizer.
TEST_F(InitFrom, ResumeNeedsNotTheDirectoryAtAll) {
  train(load_run_config(yaml("whole", hf(), 4), {}), false);
  const std::string path = yaml("split", hf(), 4);
  train(load_run_config(path, {}), false, /*stop_after=*/2);
  fs::remove_all(dir_ / "hf");
  const TrainResult second = train(load_run_config(path, {}), true);
  EXPECT_EQ(second.steps, 4);
  EXPECT_EQ(step_losses("whole"), step_losses("split"));
  // Without checkpoints to resume from, a missing directory stays an error.
  test::expect_user_error([&] { load_run_config(yaml("fresh", hf(), 4), {}); },
                          {"train.init_from", "is not a directory"});
}

}  // namespace
}  // namespace lmt
