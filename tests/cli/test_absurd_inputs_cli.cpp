// Absurd inputs meet one message, at once: a config.json or YAML shape too large to address (a
// million layers, a 2^62-token vocabulary) or too large for this machine, a huge run config, an
// adapter whose rank is absurd, and a byte size past any disk. Each is refused by every command
// with exit code 2 and one line "lmtrain: error: ...", in well under the seconds a build of the
// model would take, and never as "internal error: std::bad_alloc".
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_util.h"

namespace {

namespace fs = std::filesystem;

class AbsurdInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lmtrain_absurd_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "data.txt") << "one document\n%\nanother one\n";
    std::ofstream(dir_ / "ids.json") << "[1, 2, 3]";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A Llama config.json directory (no weights) with `key` set to `value`.
  std::string model_dir(const std::string& name, const std::string& key, int64_t value) {
    nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                        {"model_type", "llama"},
                        {"hidden_size", 64},
                        {"intermediate_size", 128},
                        {"num_attention_heads", 4},
                        {"num_hidden_layers", 2},
                        {"vocab_size", 300},
                        {"max_position_embeddings", 128}};
    j[key] = value;
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    std::ofstream(d / "config.json") << j.dump(2);
    return d.string();
  }

  // A training config whose model sets `key` to `value`.
  std::string train_config(const std::string& key, int64_t value) {
    std::map<std::string, int64_t> model = {
        {"vocab_size", 300},      {"hidden_size", 64},        {"intermediate_size", 128},
        {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"max_position_embeddings", 128}};
    model[key] = value;
    const fs::path p = dir_ / ("run_" + key + ".yaml");
    std::ofstream f(p);
    f << "model:\n";
    for (const auto& [k, v] : model) f << "  " << k << ": " << v << "\n";
    f << "data:\n  sources:\n    - path: " << (dir_ / "data.txt").string()
      << "\n  seq_len: 8\n  val_fraction: 0.0\ntrain:\n  max_steps: 1\n"
         "  micro_batch_size: 1\n  out_dir: "
      << (dir_ / "out").string() << "\n";
    return p.string();
  }

  // Every command that reads a model shape, on one whose `key` is `value`.
  std::vector<std::string> every_command(const std::string& key, int64_t value) {
    const std::string dir = model_dir("model_" + key, key, value);
    const std::string out = (dir_ / "written").string();
    return {
        "train --config " + train_config(key, value),
        "init --family llama --out " + out + " --set model." + key + "=" + std::to_string(value),
        "info --model " + dir,
        "generate --model " + dir + " --prompt-ids '[1]'",
        "logits --model " + dir + " --ids-file " + (dir_ / "ids.json").string() + " --out " + out +
            ".safetensors",
        "export --checkpoint " + dir + " --out " + out};
  }

  fs::path dir_;
};

// The command fails at once with exit 2 and one line naming `needle`.
void expect_refused(const std::string& args, const std::string& needle) {
  const auto start = std::chrono::steady_clock::now();
  const Result r = run(args);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
  EXPECT_EQ(r.out.rfind("lmtrain: error: ", 0), 0u) << args << "\n" << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << args << ": not one line\n" << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << args << "\n" << r.out;
  EXPECT_LT(s, 3.0) << args << " took " << s << " s";
}

TEST_F(AbsurdInputs, AMillionLayersAreRefusedByEveryCommand) {
  for (const std::string& cmd : every_command("num_hidden_layers", 1000000))
    expect_refused(cmd, "num_hidden_layers");
}

TEST_F(AbsurdInputs, AVocabularyOf2To62IsRefusedByEveryCommand) {
  for (const std::string& cmd : every_command("vocab_size", int64_t{1} << 62))
    expect_refused(cmd, "vocab_size");
}

TEST_F(AbsurdInputs, AParameterCountPast64BitsNamesTheKeys) {
  // The width (12 x 2^27: whole heads for 4 or 12 of them) is addressable; a layer's attention
  // matrices (4 x hidden_size^2) are not.
  for (const std::string& cmd : every_command("hidden_size", int64_t{12} << 27))
    expect_refused(cmd, "parameters");
}

TEST_F(AbsurdInputs, AModelLargerThanTheMachineIsOneMessageBeforeAnyAllocation) {
  // 4096 layers of width 16384: ~15 T parameters, 55 TiB of f32 weights.
  nlohmann::json j = {{"model_type", "llama"},         {"hidden_size", 16384},
                      {"intermediate_size", 53248},    {"num_attention_heads", 128},
                      {"num_hidden_layers", 4096},     {"vocab_size", 32000},
                      {"max_position_embeddings", 128}};
  const fs::path d = dir_ / "big";
  fs::create_directories(d);
  std::ofstream(d / "config.json") << j.dump();
  const std::string out = (dir_ / "written").string();
  for (const std::string& cmd :
       {"generate --model " + d.string() + " --prompt-ids '[1]'",
        "logits --model " + d.string() + " --ids-file " + (dir_ / "ids.json").string() + " --out " +
            out + ".safetensors",
        "init --family llama --out " + out +
            " --set model.num_hidden_layers=4096 --set model.hidden_size=16384 --set "
            "model.intermediate_size=53248 --set model.num_attention_heads=128"})
    expect_refused(cmd, "of memory");
  EXPECT_FALSE(fs::exists(out));
  // info counts it without building it.
  const Result info = run("info --model " + d.string());
  EXPECT_EQ(info.code, 0) << info.out;
}

TEST_F(AbsurdInputs, AHugeRunConfigIsRefusedBeforeItIsParsed) {
  const fs::path p = dir_ / "huge.yaml";
  {
    std::ofstream f(p);
    f << "model:\n  hidden_size: 64\n# ";
    f << std::string(5 << 20, 'x') << "\n";
  }
  expect_refused("train --config " + p.string(), "MiB");
}

TEST_F(AbsurdInputs, AnAdapterOfAbsurdRankIsRefusedBeforeItsBuffers) {
  const std::string model = (dir_ / "base").string();
  const Result init = run("init --family llama --out " + model +
                          " --set model.hidden_size=32 --set model.intermediate_size=64 --set "
                          "model.num_hidden_layers=1 --set model.num_attention_heads=2 --set "
                          "model.vocab_size=300");
  ASSERT_EQ(init.code, 0) << init.out;
  const fs::path adapter = dir_ / "adapter";
  fs::create_directories(adapter);
  std::ofstream(adapter / "adapter_config.json") << nlohmann::json{
      {"peft_type", "LORA"},
      {"r", int64_t{1} << 40},
      {"lora_alpha", 16},
      {"target_modules", {"q_proj"}}}.dump();
  expect_refused("info --model " + model + " --adapter " + adapter.string(),
                 "adapter_config.json: lora.rank");
  expect_refused("logits --model " + model + " --adapter " + adapter.string() + " --ids-file " +
                     (dir_ / "ids.json").string() + " --out " + (dir_ / "l.safetensors").string(),
                 "rank");
}

TEST_F(AbsurdInputs, AShardSizePastAnyDiskIsTooLarge) {
  expect_refused("init --family llama --out " + (dir_ / "m").string() +
                     " --max-shard-size 99999999999999999999999GB",
                 "too large");
}

}  // namespace
