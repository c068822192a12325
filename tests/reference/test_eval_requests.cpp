// lmtrain eval's answers to lm-evaluation-harness's three kinds of request, against the harness's
// own Hugging Face backend (HFLM, transformers in f32) computed at test time
// (scripts/harness_requests.py) on a random model lmtrain writes, fresh random requests each run:
// loglikelihoods (1e-4 relative) and greedy flags, with contexts that end in spaces (moved to
// the continuation), empty contexts (the prefix token), contexts longer than the model (cut
// from the left); rolling loglikelihoods of texts of several windows; greedy generations cut at
// their stop sequences.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/rng.h"
#include "data/tokenizer/tokenizer.h"
#include "eval/harness_lm.h"
#include "reference_util.h"
#include "train/checkpoint.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

const char* const kWords[] = {"river", "stone", "cloud", "north",  "amber", "seven", "orbit",
                              "lamp",  "Q:",    "A:",    "\n",     "1",     "22",    "plus",
                              "the",   "of",    " ",     "meadow", "x",     "?"};

std::string words(Rng& rng, int64_t n) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kWords[rng.below(sizeof(kWords) / sizeof(kWords[0]))];
  }
  return s;
}

TEST(EvalRequests, AnswersAsTheHarnessDoes) {
  const uint32_t seed = test::fresh_seed("EvalRequests.AnswersAsTheHarnessDoes");
  const fs::path dir = fs::temp_directory_path() / ("lmt_eval_requests_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model = (dir / "model").string();
  const Result init = capture(
      std::string(LMT_BINARY) + " init --family llama --seed " + std::to_string(seed) +
      " --tokenizer " + LMT_SOURCE_DIR + "/tests/data/tokenizers/llama3_style_bpe.json" +
      " --set model.hidden_size=64 --set model.intermediate_size=128 --set "
      "model.num_hidden_layers=2 --set model.num_attention_heads=4 --set "
      "model.num_key_value_heads=2 --set model.max_position_embeddings=48 --out " + model);
  ASSERT_EQ(init.code, 0) << init.out;

  Rng rng(seed, 7);
  nlohmann::json req = {{"loglikelihood", nlohmann::json::array()},
                        {"rolling", nlohmann::json::array()},
                        {"generate", nlohmann::json::array()}};
  std::vector<eval::LoglikelihoodRequest> ll;
  for (int i = 0; i < 14; ++i) {
    std::string context = i % 5 == 0 ? "" : words(rng, 1 + rng.below(i % 3 == 0 ? 60 : 8));
    if (i % 4 == 1 && !context.empty()) context += "  ";  // trailing spaces move to the continuation
    const std::string cont = (i % 2 ? " " : "") + words(rng, 1 + rng.below(4));
    ll.push_back({context, cont});
    req["loglikelihood"].push_back({context, cont});
  }
  std::vector<std::string> texts;
  for (int i = 0; i < 4; ++i) {
    texts.push_back(words(rng, 3 + rng.below(i == 0 ? 5 : 70)));
    req["rolling"].push_back(texts.back());
  }
  std::vector<eval::GenerationRequest> gen;
  for (int i = 0; i < 4; ++i) {
    eval::GenerationRequest g{words(rng, 2 + rng.below(i == 3 ? 60 : 6)),
                              {i % 2 ? "\n" : "the", "Q:"}, 4 + rng.below(6)};
    gen.push_back(g);
    req["generate"].push_back({g.context, g.until, g.max_gen_toks});
  }
  const fs::path req_path = dir / "requests.json", out_path = dir / "harness.json";
  std::ofstream(req_path) << req.dump();
  ASSERT_NO_FATAL_FAILURE(test::run_reference_script(
      "scripts/harness_requests.py",
      model + " " + req_path.string() + " " + out_path.string()));
  std::ifstream in(out_path);
  const nlohmann::json ref = nlohmann::json::parse(in);

  auto be = make_backend("cpu");
  std::unique_ptr<Transformer> m = load_model_for_inference(model, "", be.get());
  std::unique_ptr<Tokenizer> tok = load_tokenizer(model);
  eval::HarnessLM lm(*m, *tok, 3);
  EXPECT_EQ(lm.max_length(), ref["max_length"].get<int64_t>());

  for (size_t i = 0; i < ll.size(); ++i)
    if (!ll[i].context.empty()) {
      const auto [c, x] = lm.encode_pair(ll[i].context, ll[i].continuation);
      EXPECT_EQ(nlohmann::json(c), ref["tokens"][i][0]) << "request " << i;
      EXPECT_EQ(nlohmann::json(x), ref["tokens"][i][1]) << "request " << i;
    }
  const std::vector<eval::LoglikelihoodResult> got = lm.loglikelihood(ll);
  EXPECT_GT(lm.truncated(), 0);  // the long contexts
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = ref["loglikelihood"][i][0].get<double>();
    const double rel = std::abs(got[i].logprob - want) / std::max(1.0, std::abs(want));
    worst = std::max(worst, rel);
    EXPECT_LT(rel, 1e-4) << "request " << i << ": " << got[i].logprob << " vs " << want;
    EXPECT_EQ(got[i].greedy, ref["loglikelihood"][i][1].get<bool>()) << "request " << i;
  }
  const std::vector<double> roll = lm.loglikelihood_rolling(texts);
  for (size_t i = 0; i < roll.size(); ++i) {
    const double want = ref["rolling"][i].get<double>();
    const double rel = std::abs(roll[i] - want) / std::max(1.0, std::abs(want));
    worst = std::max(worst, rel);
    EXPECT_LT(rel, 1e-4) << "text " << i << ": " << roll[i] << " vs " << want;
  }
  const std::vector<std::string> out = lm.generate_until(gen);
  for (size_t i = 0; i < out.size(); ++i)
    EXPECT_EQ(out[i], ref["generate"][i].get<std::string>()) << "generation " << i;
  std::printf("largest relative difference of a loglikelihood: %.3g\n", worst);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmt
