// Transformer::forward_token_scores against transformers at test time (label reference): for a
// random llama and a random gemma2 (its final logits soft-capped), scripts/make_hf_fixtures.py
// --token-scores draws a config and weights from a fresh seed and computes in float32, as
// lm-evaluation-harness's HF backend does, log_softmax of the logits at each next token and
// whether that token is the argmax, for two sequences and a packed row (positions restarting at
// each document). Ours in f32 on the CPU backend: logprobs within 1e-5, flags identical except
// where transformers' top two logits are within 1e-6.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "model/transformer.h"
#include "reference_util.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

// One reference `ref` of the model in `dir`; returns the largest |logprob - transformers'|.
double compare_scores(const std::string& dir, const std::string& ref, int* flags_skipped) {
  const std::string what = dir + " ref_" + ref;
  std::ifstream in(dir + "/ref_" + ref + ".json");
  EXPECT_TRUE(in.good()) << what;
  if (!in.good()) return 0;
  const auto js = nlohmann::json::parse(in);
  const auto ids64 = js.at("input_ids").get<std::vector<int64_t>>();
  const std::vector<int32_t> ids(ids64.begin(), ids64.end());
  const auto T = static_cast<int64_t>(ids.size());
  std::vector<int32_t> labels(ids.size(), Transformer::kIgnoreIndex);
  for (int64_t t = 0; t + 1 < T; ++t) labels[t] = ids[t + 1];
  std::vector<int32_t> pos, doc_start;
  Transformer::Packing packing;
  if (js.contains("positions")) {
    pos = js.at("positions").get<std::vector<int32_t>>();
    for (int64_t t = 0; t < T; ++t) doc_start.push_back(static_cast<int32_t>(t) - pos[t]);
    packing = {pos.data(), doc_start.data()};
  }
  CpuBackend be;
  std::unique_ptr<Transformer> m = load_hf_model(dir, &be, DType::f32);
  const Transformer::TokenScores got =
      m->forward_token_scores(ids.data(), labels.data(), 1, T, pos.empty() ? nullptr : &packing);
  const SafetensorsFile f = SafetensorsFile::open(dir + "/ref_" + ref + "_scores.safetensors");
  const HostTensor lp = f.read_as("logprob", DType::f64), gap = f.read_as("gap", DType::f64);
  const HostTensor greedy = f.read_as("greedy", DType::i32);
  EXPECT_EQ(lp.shape(), (Shape{T - 1})) << what;
  if (lp.shape() != Shape{T - 1}) return 0;
  double worst = 0;
  for (int64_t t = 0; t + 1 < T; ++t) {
    const double err = std::abs(got.logprob[t] - lp.ptr<double>()[t]);
    worst = std::max(worst, err);
    EXPECT_LE(err, 1e-5) << what << ": position " << t;
    if (gap.ptr<double>()[t] > 1e-6)
      EXPECT_EQ(got.greedy[t], greedy.ptr<int32_t>()[t]) << what << ": position " << t;
    else
      ++*flags_skipped;
  }
  EXPECT_EQ(got.logprob[T - 1], 0.0) << what;  // the last position has no label
  return worst;
}

TEST(TokenScoresReference, MatchTransformersLogSoftmaxAndArgmax) {
  std::string out = (fs::temp_directory_path() / "lmt_scores_ref_XXXXXX").string();
  ASSERT_TRUE(mkdtemp(out.data())) << "mkdtemp";
  const uint32_t seed = test::fresh_seed("TokenScoresReference.MatchTransformers");
  const std::string log = test::run_reference_script(
      "scripts/make_hf_fixtures.py", "--out '" + out + "' --seed " + std::to_string(seed) +
                                         " --random-config --packed --token-scores"
                                         " --family llama --family gemma2");
  std::printf("%s", log.c_str());
  ASSERT_FALSE(testing::Test::HasFailure());
  for (const char* family : {"llama", "gemma2"}) {
    int skipped = 0;
    double worst = 0;
    for (const char* ref : {"a", "b", "p"})
      worst = std::max(worst, compare_scores(out + "/" + family, ref, &skipped));
    std::printf(
        "[token_scores_reference] %s f32: max |logprob - transformers'| %.3g, flags "
        "skipped (top two within 1e-6) %d\n",
        family, worst, skipped);
  }
  if (!testing::Test::HasFailure())
    fs::remove_all(out);
  else
    std::printf("kept %s\n", out.c_str());
}

}  // namespace
}  // namespace lmt
