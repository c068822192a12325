// `lmtrain info`: parameter counts of real configs (Llama-2-7B, Llama-3.2-1B, GPT-2 124M), the
// training-step memory lines against param_layout and activation_bytes, weights on disk, and the
// errors. Real configs are written as Hugging Face ships them (config.json only, no weights).
#include <gtest/gtest.h>

#include <chrono>

#include "cli/cli_util.h"
#include "export/export_test_util.h"
#include "io/hf_export.h"
#include "optim/optimizer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

fs::path config_dir(const std::string& name, const nlohmann::json& cfg) {
  const fs::path dir = test::fresh_dir(name);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << cfg.dump(2);
  return dir;
}

nlohmann::json info_json(const fs::path& dir, const std::string& extra = "") {
  Result r = run("info --json --model " + dir.string() + extra);
  EXPECT_EQ(r.code, 0) << r.out;
  return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

const nlohmann::json kLlama2_7B = {{"architectures", {"LlamaForCausalLM"}},
                                   {"model_type", "llama"},
                                   {"hidden_size", 4096},
                                   {"intermediate_size", 11008},
                                   {"num_attention_heads", 32},
                                   {"num_hidden_layers", 32},
                                   {"num_key_value_heads", 32},
                                   {"vocab_size", 32000},
                                   {"max_position_embeddings", 4096},
                                   {"rms_norm_eps", 1e-5},
                                   {"rope_theta", 10000.0},
                                   {"tie_word_embeddings", false},
                                   {"hidden_act", "silu"},
                                   {"torch_dtype", "float16"},
                                   {"bos_token_id", 1},
                                   {"eos_token_id", 2}};

const nlohmann::json kLlama32_1B = {{"architectures", {"LlamaForCausalLM"}},
                                    {"model_type", "llama"},
                                    {"hidden_size", 2048},
                                    {"intermediate_size", 8192},
                                    {"num_attention_heads", 32},
                                    {"num_hidden_layers", 16},
                                    {"num_key_value_heads", 8},
                                    {"head_dim", 64},
                                    {"vocab_size", 128256},
                                    {"max_position_embeddings", 131072},
                                    {"rms_norm_eps", 1e-5},
                                    {"rope_theta", 500000.0},
                                    {"rope_scaling",
                                     {{"factor", 32.0},
                                      {"high_freq_factor", 4.0},
                                      {"low_freq_factor", 1.0},
                                      {"original_max_position_embeddings", 8192},
                                      {"rope_type", "llama3"}}},
                                    {"tie_word_embeddings", true},
                                    {"hidden_act", "silu"},
                                    {"torch_dtype", "bfloat16"},
                                    {"bos_token_id", 128000},
                                    {"eos_token_id", 128001}};

TEST(InfoCli, CountsTheParametersOfRealConfigs) {
  auto j = info_json(config_dir("llama2_7b", kLlama2_7B));
  EXPECT_EQ(j["family"], "llama");
  EXPECT_EQ(j["parameters"]["total"], 6738415616);
  EXPECT_EQ(j["parameters"]["embedding"], 32000 * 4096);
  EXPECT_EQ(j["parameters"]["non_embedding"], 6738415616 - 32000 * 4096);
  EXPECT_EQ(j["weights_on_disk"]["files"], 0);

  j = info_json(config_dir("llama32_1b", kLlama32_1B));
  EXPECT_EQ(j["parameters"]["total"], 1235814400);  // the tied head counted once
  EXPECT_EQ(j["parameters"]["embedding"], 128256 * 2048);
  EXPECT_EQ(j["training_step"]["seq_len"], 2048);  // min(context, 2048)
}

TEST(InfoCli, CountsGpt2) {
  const nlohmann::json gpt2 = {{"architectures", {"GPT2LMHeadModel"}},
                               {"model_type", "gpt2"},
                               {"vocab_size", 50257},
                               {"n_embd", 768},
                               {"n_layer", 12},
                               {"n_head", 12},
                               {"n_positions", 1024},
                               {"n_ctx", 1024},
                               {"n_inner", nullptr},
                               {"activation_function", "gelu_new"},
                               {"layer_norm_epsilon", 1e-5},
                               {"tie_word_embeddings", true},
                               {"bos_token_id", 50256},
                               {"eos_token_id", 50256}};
  const fs::path dir = config_dir("gpt2_124m", gpt2);
  Result r = run("info --json --model " + dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["family"], "gpt2");
  EXPECT_EQ(j["parameters"]["total"], 124439808);  // wte 50257x768 (tied) + wpe 1024x768 + blocks
  EXPECT_EQ(j["parameters"]["embedding"], (50257 + 1024) * 768);
}

TEST(InfoCli, MemoryLinesAreTheModelsBuffers) {
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& family : test::exportable_families()) {
    SCOPED_TRACE(family);
    ModelConfig cfg = test::tiny_config(family);
    cfg.max_position_embeddings = 4096;
    const fs::path dir = config_dir("mem_" + family, model_config_to_hf(cfg));
    for (const bool ckpt : {false, true}) {
      const auto j = info_json(dir, std::string(" --micro-batch 3 --seq-len 37") +
                                        (ckpt ? " --activation-checkpointing" : ""));
      int64_t flat = 0;
      param_layout(cfg, &flat);
      const auto& m = j["training_step"];
      EXPECT_EQ(m["micro_batch"], 3);
      EXPECT_EQ(m["seq_len"], 37);
      for (const char* k : {"weights", "gradients", "adamw_m", "adamw_v"})
        EXPECT_EQ(m[k].get<int64_t>(), flat * 4) << k;
      EXPECT_EQ(m["activations"].get<uint64_t>(),
                ActivationPlan::bytes(cfg, DType::f32, 3, 37, {ckpt, 0, 1024}));
      EXPECT_EQ(m["total"].get<uint64_t>(), 4 * flat * 4 + m["activations"].get<uint64_t>());
    }
    // bf16 compute: the f32 weights and gradients each gain a bf16 copy (Transformer's compute
    // copies); the moments stay f32; activations are bf16, their saved statistics f32.
    const auto j = info_json(dir, " --micro-batch 3 --seq-len 37 --precision bf16");
    int64_t flat = 0;
    param_layout(cfg, &flat);
    const auto& m = j["training_step"];
    EXPECT_EQ(m["precision"], "bf16");
    EXPECT_EQ(m["weights"].get<int64_t>(), flat * 6);
    EXPECT_EQ(m["gradients"].get<int64_t>(), flat * 6);
    EXPECT_EQ(m["adamw_m"].get<int64_t>(), flat * 4);
    const uint64_t f32_acts = ActivationPlan::bytes(cfg, DType::f32, 3, 37, {false, 0, 1024});
    EXPECT_EQ(m["activations"].get<uint64_t>(),
              ActivationPlan::bytes(cfg, DType::bf16, 3, 37, {false, 0, 1024}));
    EXPECT_LT(m["activations"].get<uint64_t>(), f32_acts * 6 / 10);
    EXPECT_GT(m["activations"].get<uint64_t>(), f32_acts / 2);
  }
  // A 70B config is arithmetic only: nothing is allocated.
  nlohmann::json big = kLlama2_7B;
  big["hidden_size"] = 8192;
  big["intermediate_size"] = 28672;
  big["num_hidden_layers"] = 80;
  big["num_attention_heads"] = 64;
  big["num_key_value_heads"] = 8;
  const auto j = info_json(config_dir("llama2_70b", big));
  EXPECT_EQ(j["parameters"]["total"], 68976648192);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// --optimizer: AdamW's moments as two lines, another optimizer's state as one (optimizer_bytes),
// in the total; muon with an adapter is refused.
TEST(InfoCli, OptimizerStateFollowsTheOptimizer) {
  ModelConfig cfg = test::tiny_config("llama");
  cfg.max_position_embeddings = 64;
  const fs::path dir = config_dir("opt_llama", model_config_to_hf(cfg));
  int64_t flat = 0;
  const std::vector<ParamInfo> params = param_layout(cfg, &flat);
  for (const char* name : {"adamw", "lion", "sgd", "muon"}) {
    SCOPED_TRACE(name);
    const auto m = info_json(dir, std::string(" --optimizer ") + name)["training_step"];
    EXPECT_EQ(m["optimizer"], name);
    OptimizerSpec spec;
    spec.name = name;
    const uint64_t want = optimizer_bytes(spec, params, flat);
    if (std::string(name) == "adamw") {
      EXPECT_EQ(m["adamw_m"].get<uint64_t>() + m["adamw_v"].get<uint64_t>(), want);
      EXPECT_FALSE(m.contains("optimizer_state"));
    } else {
      EXPECT_EQ(m["optimizer_state"].get<uint64_t>(), want);
      EXPECT_FALSE(m.contains("adamw_m"));
    }
    EXPECT_EQ(m["total"].get<uint64_t>(), m["weights"].get<uint64_t>() +
                                              m["gradients"].get<uint64_t>() + want +
                                              m["activations"].get<uint64_t>());
  }
  Result r = run("info --model " + dir.string() + " --optimizer lion");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(f32, Lion)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Lion m"), std::string::npos) << r.out;
  r = run("info --model " + dir.string() + " --optimizer adafactor");
  EXPECT_EQ(r.code, 2) << r.out;
}

// --activation-bits 1 on gpt2 with ReLU and ReLU^2: the arena activation_bytes plans, one layer's
// set smaller by its [N, F] pre-activation (less ReLU's 1-bit mask); refused on a gated MLP.
TEST(InfoCli, ActivationBitsShrinkEachLayersSet) {
  for (const char* act : {"relu", "relu2"}) {
    SCOPED_TRACE(act);
    ModelConfig cfg = test::tiny_config("gpt2");
    cfg.hidden_act = act;
    cfg.max_position_embeddings = 4096;
    const fs::path dir = config_dir(std::string("bits_") + act, model_config_to_hf(cfg));
    const auto full = info_json(dir, " --micro-batch 3 --seq-len 37")["training_step"];
    const auto bits =
        info_json(dir, " --micro-batch 3 --seq-len 37 --activation-bits 1")["training_step"];
    EXPECT_EQ(bits["activation_bits"], 1);
    EXPECT_EQ(bits["activations"].get<uint64_t>(),
              ActivationPlan::bytes(cfg, DType::f32, 3, 37, {false, 1, 1024}));
    const auto r64 = [](uint64_t x) { return (x + 63) / 64 * 64; };
    const uint64_t pre = r64(3 * 37 * cfg.intermediate_size * 4);
    const uint64_t mask =
        std::string(act) == "relu" ? r64((3 * 37 * cfg.intermediate_size + 31) / 32 * 4) : 0;
    EXPECT_EQ(full["mlp_pre_activation_per_layer"].get<uint64_t>(), pre);
    EXPECT_EQ(bits["mlp_pre_activation_per_layer"].get<uint64_t>(), mask);
    EXPECT_EQ(full["activations_per_layer"].get<uint64_t>() -
                  bits["activations_per_layer"].get<uint64_t>(),
              pre - mask);
    EXPECT_EQ(full["activations"].get<uint64_t>() - bits["activations"].get<uint64_t>(),
              cfg.num_hidden_layers * (pre - mask));
    const auto ckpt = info_json(dir,
                                " --micro-batch 3 --seq-len 37 --activation-bits 1 "
                                "--activation-checkpointing")["training_step"];
    EXPECT_EQ(ckpt["layer_sets"], 1);
    EXPECT_EQ(ckpt["activations"].get<uint64_t>(),
              ActivationPlan::bytes(cfg, DType::f32, 3, 37, {true, 1, 1024}));
    Result r = run("info --model " + dir.string() + " --activation-bits 1");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("activation_bits 1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(std::string(act) == "relu" ? "1-bit sign mask" : "comes from its output"),
              std::string::npos)
        << r.out;
  }
  Result r =
      run("info --model " + config_dir("bits_llama", kLlama2_7B).string() + " --activation-bits 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--activation-bits 1 needs model.hidden_act relu or relu2"),
            std::string::npos)
      << r.out;
}

TEST(InfoCli, WeightsOnDiskOfAnExport) {
  const fs::path dir = test::fresh_dir("info_disk");
  Result r =
      run("init --family llama --set model.hidden_size=32 --set model.num_attention_heads=2"
          " --set model.num_hidden_layers=1 --set model.intermediate_size=40"
          " --set model.vocab_size=50 --dtype bf16 --max-shard-size 4kB --out " +
          dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = info_json(dir);
  EXPECT_EQ(j["weights_on_disk"]["bytes"], j["parameters"]["total"].get<int64_t>() * 2);
  EXPECT_GT(j["weights_on_disk"]["files"], 1);
  EXPECT_EQ(j["weights_on_disk"]["dtypes"], nlohmann::json({"BF16"}));
  r = run("info --model " + dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* line : {"parameters:", "on disk:", "weights", "gradients", "AdamW m", "AdamW v",
                           "activations", "total"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
}

TEST(InfoCli, Errors) {
  Result r = run("info --model " + (test::temp_dir() / "nowhere").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;
  r = run("info --model " + config_dir("short_ctx", kLlama2_7B).string() + " --seq-len 5000");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--seq-len (5000) must be <= max_position_embeddings (4096)"),
            std::string::npos)
      << r.out;
  nlohmann::json bad = kLlama2_7B;
  bad["model_type"] = "mamba";
  r = run("info --model " + config_dir("bad_type", bad).string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("mamba"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lmt
