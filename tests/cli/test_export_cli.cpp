// `lmtrain init` and `lmtrain export` through the binary: an initialised model loads with
// load_hf_model and `lmtrain logits`; a checkpoint (or a run's newest) exports with its tokenizer
// and loads back bit-identical in f32; every user error is one message and exit code 2.
#include <gtest/gtest.h>

#include <set>

#include "cli/cli_util.h"
#include "data/tokenizer/tokenizer.h"
#include "export/export_test_util.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

const std::string kTiny =
    " --set model.hidden_size=48 --set model.num_hidden_layers=2 --set model.num_attention_heads=4"
    " --set model.num_key_value_heads=2 --set model.head_dim=12 --set model.intermediate_size=80"
    " --set model.vocab_size=97 --set model.max_position_embeddings=64";

// A user error: exit code 2 and one line "lmtrain: error: ..." holding every part.
void expect_one_error(const Result& r, std::initializer_list<std::string> parts) {
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.rfind("lmtrain: error: ", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  for (const std::string& p : parts) EXPECT_NE(r.out.find(p), std::string::npos) << r.out;
}

TEST(InitCli, MakesAModelThatLoadsAndRuns) {
  const auto families = test::exportable_families();
  const fs::path ids = test::temp_dir() / "init_ids.json";
  std::ofstream(ids) << "[5, 17, 3, 96, 0, 42, 8]";
  CpuBackend be;
  for (const std::string& family : families) {
    SCOPED_TRACE(family);
    const fs::path dir = test::fresh_dir("init_" + family);
    const std::string kv = family == "gpt2" ? " --set model.num_key_value_heads=0" : "";
    Result r = run("init --family " + family + kTiny + kv + " --seed 7 --out " + dir.string());
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("initialised a " + family + " model"), std::string::npos) << r.out;
    auto m = load_hf_model(dir.string(), &be);
    EXPECT_EQ(m->config().hidden_size, 48);
    EXPECT_EQ(m->config().vocab_size, 97);
    // The seed is the initialisation: the same seed gives the same model, another does not.
    Transformer same(&be, m->config());
    same.init_weights(7);
    const ParamInfo& p = m->params()[1];
    EXPECT_EQ(test::param_values(same, p), test::param_values(*m, p));
    r = run("logits --model " + dir.string() + " --ids-file " + ids.string() + " --out " +
            (test::temp_dir() / "init_logits.safetensors").string());
    ASSERT_EQ(r.code, 0) << r.out;
    const double loss = nlohmann::json::parse(r.out).at("loss").get<double>();
    EXPECT_NEAR(loss, std::log(97.0), 0.5);  // a fresh model is close to uniform
  }
}

TEST(InitCli, ShardsAndConvertsOnRequest) {
  const fs::path dir = test::fresh_dir("init_sharded");
  Result r = run("init --family mistral" + kTiny + " --dtype bf16 --max-shard-size 20kB --out " +
                 dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto index = test::read_json(dir / "model.safetensors.index.json");
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : index.at("weight_map").items()) shards.insert(shard);
  EXPECT_GT(shards.size(), 3u);
  for (const std::string& s : shards) EXPECT_TRUE(fs::exists(dir / s)) << s;
  CpuBackend be;
  auto m = load_hf_model(dir.string(), &be);
  EXPECT_EQ(m->config().sliding_window, 4096);
  EXPECT_EQ(test::read_json(dir / "config.json").at("torch_dtype"), "bfloat16");
}

// As in a training config, gpt2's MLP width follows hidden_size unless --set gives it.
TEST(InitCli, Gpt2MlpWidthFollowsHiddenSize) {
  const std::string shape =
      " --set model.hidden_size=64 --set model.num_attention_heads=4 --set "
      "model.num_hidden_layers=1"
      " --set model.vocab_size=100 --set model.max_position_embeddings=32";
  const fs::path a = test::fresh_dir("gpt2_ffn_a"), b = test::fresh_dir("gpt2_ffn_b");
  ASSERT_EQ(run("init --family gpt2" + shape + " --out " + a.string()).code, 0);
  ASSERT_EQ(
      run("init --family gpt2" + shape + " --set model.intermediate_size=96 --out " + b.string())
          .code,
      0);
  EXPECT_EQ(read_hf_model_config(a.string()).intermediate_size, 256);
  EXPECT_EQ(read_hf_model_config(b.string()).intermediate_size, 96);
}

TEST(InitCli, TakesTheTokenizersSizes) {
  const std::string tok = std::string(LMT_TEST_DATA) + "/tokenizers/llama3_style_bpe.json";
  const fs::path dir = test::fresh_dir("init_tok");
  Result r =
      run("init --family llama --set model.hidden_size=32 --set model.num_attention_heads=2"
          " --set model.num_hidden_layers=1 --set model.intermediate_size=40 --tokenizer " +
          tok + " --out " + dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto cfg = test::read_json(dir / "config.json");
  auto t = load_tokenizer(tok);
  EXPECT_EQ(cfg.at("vocab_size"), t->vocab_size());
  EXPECT_EQ(cfg.at("bos_token_id"), t->bos_id());
  EXPECT_EQ(cfg.at("eos_token_id"), t->eos_id());
  EXPECT_TRUE(fs::exists(dir / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir / "tokenizer_config.json"));
  r = run("init --family llama --set model.vocab_size=100 --tokenizer " + tok + " --out " +
          test::fresh_dir("init_tok_small").string());
  expect_one_error(r, {"model.vocab_size (100)", "tokenizer"});
}

// A run directory with two checkpoints of one model (the newest at step 20), trained on `tok`.
fs::path make_run(Transformer& model, const std::string& tok) {
  const fs::path run_dir = test::fresh_dir("run");
  CheckpointState s;
  s.tokenizer = tok;
  s.loader = nlohmann::json::object();
  for (int64_t step : {10, 20}) {
    s.step = step;
    model.init_weights(test::random_seed());
    save_checkpoint(run_dir.string(), model, {}, s, "model: {}\n", 0);
  }
  return run_dir;
}

TEST(ExportCli, ExportsARunsNewestCheckpoint) {
  CpuBackend be;
  const std::string tok = std::string(LMT_TEST_DATA) + "/tokenizers/llama2_style_bpe.json";
  ModelConfig cfg = test::tiny_config("llama");
  cfg.vocab_size = load_tokenizer(tok)->vocab_size();
  Transformer m(&be, cfg);
  const fs::path run_dir = make_run(m, tok);  // m holds step 20's weights
  const fs::path out = test::fresh_dir("export_run");
  Result r =
      run("export --checkpoint " + run_dir.string() + " --out " + out.string() + " --dtype f32");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step_0000020"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokenizer.json"), std::string::npos) << r.out;
  EXPECT_EQ(
      test::list_dir(out),
      (std::vector<std::string>{"checksums.json", "config.json", "generation_config.json",
                                "model.safetensors", "tokenizer.json", "tokenizer_config.json"}));
  auto back = load_hf_model(out.string(), &be);
  for (const ParamInfo& p : m.params())
    EXPECT_EQ(test::param_values(m, p), test::param_values(*back, p)) << p.name;

  // `info` on the checkpoint counts its weights, not the optimizer state beside them.
  const fs::path newest = run_dir / "checkpoints" / "step_0000020";
  r = run("info --json --model " + run_dir.string());  // a run: its newest checkpoint
  ASSERT_EQ(r.code, 0) << r.out;
  const auto info = nlohmann::json::parse(r.out);
  EXPECT_EQ(info["model"], newest.string());
  EXPECT_EQ(info["weights_on_disk"]["bytes"], m.num_params() * 4);
  EXPECT_EQ(info["parameters"]["total"], m.num_params());

  // A checkpoint directory itself, as bf16 (the default), sharded, over the previous export.
  const fs::path ckpt = run_dir / "checkpoints" / "step_0000010";
  r = run("export --checkpoint " + ckpt.string() + " --out " + out.string() +
          " --max-shard-size 30kB");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(out / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  const auto index = test::read_json(out / "model.safetensors.index.json");
  const std::string first = index.at("weight_map").begin()->get<std::string>();
  EXPECT_NE(first.find("-of-"), std::string::npos) << first;
  const SafetensorsFile st = SafetensorsFile::open((out / first).string());
  EXPECT_EQ(st.meta(st.names()[0]).file_dtype, "BF16");
  EXPECT_EQ(load_hf_model(out.string(), &be)->config().vocab_size, cfg.vocab_size);
}

TEST(ExportCli, ConvertsAHuggingFaceDirectory) {
  const fs::path dir = test::fresh_dir("hf_sharded");
  Result r = run("init --family llama" + kTiny + " --dtype bf16 --max-shard-size 10kB --out " +
                 dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  CpuBackend be;
  auto bf16 = load_hf_model(dir.string(), &be);
  // Sharded bf16 in, one f32 file out, written over the source (its files stay mapped).
  r = run("export --checkpoint " + dir.string() + " --out " + dir.string() + " --dtype f32");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(test::list_dir(dir),
            (std::vector<std::string>{"checksums.json", "config.json", "model.safetensors"}));
  auto f32 = load_hf_model(dir.string(), &be);
  for (const ParamInfo& p : bf16->params())
    EXPECT_EQ(test::param_values(*bf16, p), test::param_values(*f32, p)) << p.name;
}

// Export reads a directory as load_hf_model does: the original gpt2 files' bare names (and their
// attn.bias mask buffers) come out under lmtrain's names, the same model.
TEST(ExportCli, ConvertsABareGpt2Directory) {
  const std::string src = std::string(LMT_TEST_DATA) + "/hf/gpt2";
  const fs::path bare = test::fresh_dir("gpt2_bare_export");
  const fs::path out = test::fresh_dir("gpt2_bare_export_out");
  fs::create_directories(bare);
  fs::copy_file(src + "/config.json", bare / "config.json");
  SafetensorsFile f = SafetensorsFile::open(src + "/model.safetensors");
  SafetensorsWriter w;
  for (const std::string& n : f.names())
    w.add_copy(n.substr(std::string("transformer.").size()), f.read_as(n, DType::f32));
  w.add_copy("h.0.attn.bias", HostTensor(DType::f32, Shape{1, 1, 4, 4}));
  w.write((bare / "model.safetensors").string());
  Result r =
      run("export --checkpoint " + bare.string() + " --out " + out.string() + " --dtype f32");
  ASSERT_EQ(r.code, 0) << r.out;
  CpuBackend be;
  auto a = load_hf_model(src, &be), b = load_hf_model(out.string(), &be);
  for (const ParamInfo& p : a->params())
    EXPECT_EQ(test::param_values(*a, p), test::param_values(*b, p)) << p.name;
  EXPECT_TRUE(SafetensorsFile::open((out / "model.safetensors").string())
                  .contains("transformer.h.0.attn.c_attn.weight"));
}

TEST(ExportCli, UserErrorsAreOneMessageAndExitCode2) {
  const fs::path missing = test::temp_dir() / "no_such_run";
  expect_one_error(run("export --checkpoint " + missing.string() + " --out " +
                       (test::temp_dir() / "x").string()),
                   {"--checkpoint", "does not exist"});
  const fs::path empty_run = test::fresh_dir("empty_run");
  fs::create_directories(empty_run);
  expect_one_error(run("export --checkpoint " + empty_run.string() + " --out x"),
                   {"neither a checkpoint"});
  expect_one_error(run("export --checkpoint " + missing.string() + " --out x --dtype int8"),
                   {"--dtype", "'int8'"});
  expect_one_error(run("export --checkpoint " + missing.string() + " --out x --max-shard-size 5PB"),
                   {"--max-shard-size", "'5PB'"});
  const fs::path out = test::fresh_dir("cli_err");
  expect_one_error(run("init --family llama" + kTiny + " --dtype fp8 --out " + out.string()),
                   {"--dtype", "'fp8'"});
  expect_one_error(
      run("init --family llama" + kTiny + " --max-shard-size 5XB --out " + out.string()),
      {"--max-shard-size", "'5XB'"});
  expect_one_error(run("init --family llama --set model.hiden_size=64 --out " + out.string()),
                   {"model.hiden_size", "--set 'model.hiden_size=64'"});
  expect_one_error(run("init --family llama --set train.lr=1 --out " + out.string()), {"train"});
  expect_one_error(run("init --family llama --set model.hidden_size=-4 --out " + out.string()),
                   {"model.hidden_size"});
  expect_one_error(run("init --family gpt5 --out " + out.string()), {"'gpt5'", "llama"});
  EXPECT_FALSE(fs::exists(out));
  fs::create_directories(out);
  std::ofstream(out / "README.md") << "keep me";
  expect_one_error(run("init --family llama" + kTiny + " --out " + out.string()),
                   {out.string(), "not empty"});
  EXPECT_EQ(test::list_dir(out), std::vector<std::string>{"README.md"});
}

// --format gguf: one file, replaced atomically; what llama.cpp would compute otherwise, or cannot
// tokenize with, is refused by name and leaves nothing behind (what the file holds is checked
// against transformers and llama.cpp's reader in tests/reference/test_gguf.py).
TEST(ExportCli, GgufIsOneFileAndRefusesWhatLlamaCppCannotRun) {
  const std::string tok = std::string(LMT_TEST_DATA) + "/tokenizers/";
  const fs::path dir = test::fresh_dir("gguf_src");
  Result r = run("init --family llama" + kTiny + " --set model.vocab_size=1000 --tokenizer " + tok +
                 "llama3_style_bpe.json --out " + dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path out = test::fresh_dir("gguf_out") / "m.gguf";
  for (const char* dtype : {"f32", "q8_0"}) {
    r = run("export --checkpoint " + dir.string() + " --format gguf --dtype " + dtype + " --out " +
            out.string());
    ASSERT_EQ(r.code, 0) << r.out;
    std::ifstream f(out, std::ios::binary);
    char magic[4];
    f.read(magic, 4);
    EXPECT_EQ(std::string(magic, 4), "GGUF");
    EXPECT_EQ(test::list_dir(out.parent_path()), std::vector<std::string>{"m.gguf"});
  }
  expect_one_error(run("export --checkpoint " + dir.string() + " --format onnx --out x"),
                   {"--format", "'onnx'"});
  expect_one_error(run("export --checkpoint " + dir.string() + " --format gguf --dtype q4 --out x"),
                   {"--dtype", "'q4'", "q8_0"});
  expect_one_error(run("export --checkpoint " + dir.string() + " --dtype q8_0 --out x"),
                   {"--dtype", "'q8_0'"});
  // A Metaspace BPE tokenizer.json: llama.cpp takes byte-level ones and SentencePiece models.
  const fs::path meta = test::fresh_dir("gguf_meta");
  r = run("init --family llama" + kTiny + " --set model.vocab_size=1000 --tokenizer " + tok +
          "metaspace_bpe.json --out " + meta.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const fs::path refused = test::fresh_dir("gguf_refused") / "m.gguf";
  expect_one_error(
      run("export --checkpoint " + meta.string() + " --format gguf --out " + refused.string()),
      {"--format gguf", (meta / "tokenizer.json").string(), "byte-level"});
  // An activation llama.cpp's llama does not have.
  const fs::path relu = test::fresh_dir("gguf_relu");
  r = run("init --family llama" + kTiny + " --set model.hidden_act=relu --tokenizer " + tok +
          "bytelevel_bpe.json --set model.vocab_size=1000 --out " + relu.string());
  ASSERT_EQ(r.code, 0) << r.out;
  expect_one_error(
      run("export --checkpoint " + relu.string() + " --format gguf --out " + refused.string()),
      {"--format gguf", "silu", "relu", "hidden_act"});
  EXPECT_FALSE(fs::exists(refused.parent_path()) && !fs::is_empty(refused.parent_path()));
}

// A setting the family's config.json cannot express would make transformers compute another
// model from the export: refused, naming it. gemma3's config.json may carry attention soft-capping,
// but transformers' Gemma3 ignores it, and so does lmtrain reading it.
TEST(ExportCli, RefusesSettingsTheFamilysConfigCannotExpress) {
  const fs::path out = test::fresh_dir("cli_lost");
  expect_one_error(
      run("init --family llama" + kTiny + " --set model.sliding_window=8 --out " + out.string()),
      {"llama config.json cannot express", "model.sliding_window = 8"});
  expect_one_error(run("init --family qwen2" + kTiny + " --set model.final_logit_softcapping=5 " +
                       "--out " + out.string()),
                   {"model.final_logit_softcapping = 5"});
  expect_one_error(run("init --family gemma3" + kTiny + " --set model.attn_logit_softcapping=5 " +
                       "--out " + out.string()),
                   {"gemma3 config.json", "model.attn_logit_softcapping = 5"});
  EXPECT_FALSE(fs::exists(out));
  ASSERT_EQ(run("init --family gemma3" + kTiny + " --set model.final_logit_softcapping=5 --out " +
                out.string())
                .code,
            0);
  nlohmann::json j = test::read_json(out / "config.json");
  EXPECT_EQ(j.at("final_logit_softcapping"), 5.0);
  EXPECT_TRUE(j.at("attn_logit_softcapping").is_null());
  j["attn_logit_softcapping"] = 5.0;
  EXPECT_EQ(model_config_from_hf(j, "config.json").attn_logit_softcapping, 0.0);
}

}  // namespace
}  // namespace lmt
