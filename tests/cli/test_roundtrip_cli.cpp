// The whole Hugging Face round trip through the binary, as a user runs it: init a model with a
// tokenizer, fine-tune it with train.init_from, export the checkpoint, and read the export back:
// its logits equal the checkpoint's bit for bit (f32), differ from the initial model's (the
// weights were trained, not just copied), and generate works from the export with its tokenizer.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "export/export_test_util.h"
#include "io/safetensors.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

struct Logits {
  double loss = 0;
  std::vector<float> values;
};

Logits logits_of(const fs::path& model, const fs::path& ids, const fs::path& out) {
  Result r = run("logits --model " + model.string() + " --ids-file " + ids.string() + " --out " +
                 out.string());
  EXPECT_EQ(r.code, 0) << r.out;
  Logits l;
  if (r.code != 0) return l;
  l.loss = nlohmann::json::parse(r.out).at("loss").get<double>();
  const HostTensor t = SafetensorsFile::open(out.string()).read("logits");
  l.values.assign(t.ptr<float>(), t.ptr<float>() + t.numel());
  return l;
}

TEST(HfRoundTrip, InitFineTuneExportReload) {
  const std::string tokenizer = std::string(LMT_TEST_DATA) + "/tokenizers/bytelevel_bpe.json";
  const fs::path base = test::fresh_dir("roundtrip");
  fs::create_directories(base);
  std::ofstream(base / "data.txt")
      << "the cat sat on the mat\nthe dog ran in the park\na bird sang in the tree\n"
         "the sun is warm today\nwe read a book at night\nthe river runs to the sea\n";
  std::ofstream(base / "ids.json") << "[5, 17, 3, 96, 0, 42, 8, 11, 250]";
  for (const char* family : {"qwen2", "gemma2"}) {
    SCOPED_TRACE(family);
    const fs::path init = base / (std::string(family) + "_init");
    const fs::path run_dir = base / (std::string(family) + "_run");
    const fs::path exported = base / (std::string(family) + "_export");
    Result r = run(std::string("init --family ") + family +
                   " --set model.hidden_size=32 --set model.num_hidden_layers=2"
                   " --set model.num_attention_heads=4 --set model.num_key_value_heads=2"
                   " --set model.head_dim=8 --set model.intermediate_size=64"
                   " --set model.max_position_embeddings=64" +
                   // qwen2's config.json has no window (transformers' use_sliding_window is off).
                   (std::string(family) == "gemma2" ? " --set model.sliding_window=4" : "") +
                   " --seed 3 --tokenizer " + tokenizer + " --out " + init.string());
    ASSERT_EQ(r.code, 0) << r.out;
    const fs::path cfg = base / (std::string(family) + ".yaml");
    std::ofstream(cfg) << "data:\n  sources:\n    - path: " << (base / "data.txt").string()
                       << "\n      split: line\n  seq_len: 16\n  val_fraction: 0.0\n"
                       << "train:\n  init_from: " << init.string()
                       << "\n  max_steps: 3\n  micro_batch_size: 2\n  lr: 1.0e-2\n"
                          "  warmup_steps: 0\n  eval_every: 0\n  eval_steps: 0\n  log_every: 1\n"
                          "  out_dir: "
                       << run_dir.string() << "\n";
    r = run("train --config " + cfg.string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("init: weights of Hugging Face model"), std::string::npos) << r.out;
    r = run("export --checkpoint " + run_dir.string() + " --out " + exported.string() +
            " --dtype f32");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(fs::exists(exported / "tokenizer.json"));

    const Logits before = logits_of(init, base / "ids.json", base / "l0.safetensors");
    const Logits trained = logits_of(run_dir / "checkpoints" / "step_0000003", base / "ids.json",
                                     base / "l1.safetensors");
    const Logits reloaded = logits_of(exported, base / "ids.json", base / "l2.safetensors");
    ASSERT_FALSE(trained.values.empty());
    EXPECT_EQ(reloaded.values, trained.values);
    EXPECT_EQ(reloaded.loss, trained.loss);
    double diff = 0;
    for (size_t i = 0; i < before.values.size() && i < trained.values.size(); ++i)
      diff = std::max(diff, double(std::abs(before.values[i] - trained.values[i])));
    EXPECT_GT(diff, 1e-4);

    r = run("generate --model " + exported.string() + " --prompt 'the cat' --max-new-tokens 4");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.rfind("the cat", 0), 0u) << r.out;
  }
}

}  // namespace
}  // namespace lmt
