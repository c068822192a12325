// `lmtrain generate`'s options for comparing with another implementation: --json prints the prompt
// and new ids (what generate_ids gives), --prompt-ids feeds ids as they are, --ignore-eos runs
// past end-of-sequence. A gpt2 model rigged so that one token always wins (final LayerNorm weight
// 0, its bias that token's embedding, made the longest) shows the end-of-sequence stop for sure.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "data/tokenizer/tokenizer.h"
#include "export/export_test_util.h"
#include "io/hf_export.h"
#include "test_util.h"
#include "train/generation.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kVocab = 257;  // the bytes tokenizer: 256 bytes, end-of-text 256

ModelConfig bytes_gpt2() {
  ModelConfig c = test::tiny_config("gpt2");
  c.vocab_size = kVocab;
  c.bos_token_id = -1;
  c.eos_token_id = load_tokenizer("bytes")->eos_id();
  return c;
}

float* param(Transformer& m, const std::string& name) {
  for (const ParamInfo& p : m.params())
    if (p.name == name) return static_cast<float*>(m.params_data()) + p.offset;
  ADD_FAILURE() << "no parameter " << name;
  return nullptr;
}

// Makes `winner` the argmax after any input: the last hidden state is ln_f's bias = w, the tied
// head gives token v the logit e_v . w, and e_winner = w is 50 times longer than any other row.
void rig(Transformer& m, int32_t winner) {
  const int64_t H = m.config().hidden_size;
  float* wte = param(m, "transformer.wte.weight");
  float* w = param(m, "transformer.ln_f.weight");
  float* b = param(m, "transformer.ln_f.bias");
  for (int64_t i = 0; i < H; ++i) {
    wte[winner * H + i] *= 50;
    w[i] = 0;
    b[i] = wte[winner * H + i];
  }
}

// A model directory that generate reads as a bytes-tokenizer checkpoint.
fs::path save(const Transformer& m, const std::string& name) {
  const fs::path dir = test::fresh_dir(name);
  HfExportOptions o;
  o.dtype = DType::f32;
  save_hf_model(dir.string(), m, o);
  std::ofstream(dir / "state.json") << R"({"tokenizer": "bytes"})";
  test::reseal_checksums(dir);  // a directory with a state.json is a checkpoint: all listed
  return dir;
}

nlohmann::json generate_json(const fs::path& dir, const std::string& args) {
  const Result r = run("generate --model " + dir.string() + " --temperature 0 --json " + args);
  EXPECT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j.is_discarded() ? nlohmann::json::object() : j;
}

std::vector<int32_t> ids_of(const nlohmann::json& j, const char* key) {
  return j.contains(key) ? j[key].get<std::vector<int32_t>>() : std::vector<int32_t>{};
}

TEST(GenerateCli, JsonIdsAreWhatGenerationGives) {
  CpuBackend be;
  Transformer m(&be, bytes_gpt2());
  m.init_weights(test::random_seed());
  const fs::path dir = save(m, "gen_plain");
  const std::vector<int32_t> prompt = {104, 105, 32, 7, 200};
  GenerateOptions g;
  g.max_new_tokens = 9;
  g.sampling.temperature = 0;
  const std::vector<int32_t> want = generate_ids(m, prompt, g);
  ASSERT_EQ(want.size(), 9u);  // stop_id -1: no stop

  const auto j = generate_json(dir,
                               "--prompt-ids '[104, 105, 32, 7, 200]' --max-new-tokens 9 "
                               "--ignore-eos");
  EXPECT_EQ(ids_of(j, "prompt_ids"), prompt);
  EXPECT_EQ(ids_of(j, "ids"), want);
  EXPECT_TRUE(j.contains("text") && j["text"].is_string()) << j.dump();
  // A text prompt is encoded (no BOS for bytes) and continues the same way.
  const auto t = generate_json(dir, "--prompt 'hi' --max-new-tokens 9 --ignore-eos");
  EXPECT_EQ(ids_of(t, "prompt_ids"), (std::vector<int32_t>{104, 105}));
  const auto p = generate_json(dir, "--prompt-ids '[104, 105]' --max-new-tokens 9 --ignore-eos");
  EXPECT_EQ(ids_of(t, "ids"), ids_of(p, "ids"));
  // Without --json: the text.
  const Result r = run("generate --model " + dir.string() +
                       " --prompt-ids '[104, 105]' "
                       "--temperature 0 --max-new-tokens 3");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("hi", 0), 0u) << r.out;
}

TEST(GenerateCli, StopsAtEndOfTextUnlessIgnoreEos) {
  CpuBackend be;
  Transformer m(&be, bytes_gpt2());
  m.init_weights(test::random_seed());
  const int32_t eos = static_cast<int32_t>(m.config().eos_token_id);
  rig(m, eos);
  const fs::path dir = save(m, "gen_eos");
  auto j = generate_json(dir, "--prompt-ids '[65, 66]' --max-new-tokens 6");
  EXPECT_EQ(ids_of(j, "prompt_ids"), (std::vector<int32_t>{65, 66}));
  EXPECT_EQ(ids_of(j, "ids"), std::vector<int32_t>{});
  j = generate_json(dir, "--prompt-ids '[65, 66]' --max-new-tokens 6 --ignore-eos");
  EXPECT_EQ(ids_of(j, "ids"), std::vector<int32_t>(6, eos));
  // Past the model's positions (64) it stops: 60 + 4.
  std::string long_prompt = "[";
  for (int i = 0; i < 60; ++i) long_prompt += (i ? ", " : "") + std::to_string(40 + i);
  j = generate_json(dir, "--prompt-ids '" + long_prompt + "]' --max-new-tokens 10 --ignore-eos");
  EXPECT_EQ(ids_of(j, "ids").size(), 4u);
}

// Bytes that end inside a UTF-8 character still give one JSON line: U+FFFD stands for them.
TEST(GenerateCli, JsonSurvivesTokensThatSplitACharacter) {
  CpuBackend be;
  Transformer m(&be, bytes_gpt2());
  m.init_weights(test::random_seed());
  rig(m, 0xC3);  // a lead byte, never completed
  const fs::path dir = save(m, "gen_utf8");
  const auto j = generate_json(dir, "--prompt-ids '[65]' --max-new-tokens 3");
  EXPECT_EQ(ids_of(j, "ids"), std::vector<int32_t>(3, 0xC3));
  EXPECT_NE(j.value("text", "").find("\xEF\xBF\xBD"), std::string::npos) << j.dump();
}

TEST(GenerateCli, PromptErrorsAreOneMessageAndExitCode2) {
  CpuBackend be;
  Transformer m(&be, bytes_gpt2());
  m.init_weights(1);
  const fs::path dir = save(m, "gen_errors");
  const std::string base = "generate --model " + dir.string();
  auto expect_error = [&](const std::string& args, const std::string& part) {
    const Result r = run(base + " " + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(part), std::string::npos) << args << "\n" << r.out;
  };
  expect_error("", "--prompt-ids");
  expect_error("--prompt x --prompt-ids '[1]'", "excludes");
  expect_error("--prompt-ids '[1, 257]'", "--prompt-ids: element 1 (257)");
  expect_error("--prompt-ids '[1, -1]'", "--prompt-ids: element 1 (-1)");
  expect_error("--prompt-ids '[1, 2.5]'", "--prompt-ids: element 1 (2.5)");
  expect_error("--prompt-ids '[]'", "non-empty JSON array");
  expect_error("--prompt-ids '1, 2'", "--prompt-ids: not valid JSON");
}

TEST(GenerateCli, HelpNamesTheComparisonOptions) {
  const Result r = run("generate --help");
  for (const char* flag : {"--prompt-ids", "--ignore-eos", "--json"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace lmt
