// `lmtrain eval --set train.backend=pjrt` (XLA's CPU plugin) against the CPU backend on the same
// model and task: every choice's loglikelihood within 1e-5 relative, the same greedy flags and
// metrics, the same generations (made on a CPU copy of the model) and the same held-out loss.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_util.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

TEST(EvalPjrt, ScoresAsTheCpuBackendDoes) {
  const fs::path dir = fs::temp_directory_path() / ("lmt_eval_pjrt_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model = (dir / "model").string();
  const Result init = run("init --family llama --seed 9 --tokenizer " +
                          std::string(LMT_SOURCE_DIR) +
                          "/tests/data/tokenizers/llama3_style_bpe.json --set model.hidden_size=32 "
                          "--set model.intermediate_size=64 --set model.num_hidden_layers=2 --set "
                          "model.num_attention_heads=2 --set model.num_key_value_heads=1 --set "
                          "model.max_position_embeddings=40 --out " + model);
  ASSERT_EQ(init.code, 0) << init.out;
  std::ofstream(dir / "docs.jsonl")
      << "{\"q\": \"one two\", \"choices\": [\"three\", \"four five\", \"x\"], \"label\": 0, "
         "\"a\": \"three\"}\n"
         "{\"q\": \"red green\", \"choices\": [\"blue\", \"cat\", \"the sea\"], \"label\": 0, "
         "\"a\": \"blue\"}\n"
         "{\"q\": \"a b\", \"choices\": [\"c\", \"z\", \"y w\"], \"label\": 1, \"a\": \"c\"}\n"
         "{\"q\": \"north south\", \"choices\": [\"east\", \"up\", \"in\"], \"label\": 0, "
         "\"a\": \"east\"}\n";
  std::ofstream(dir / "mc.yaml") << "task: pjrt_mc\ntype: multiple_choice\ndata: docs.jsonl\n"
                                    "text: \"{{q}}\"\nchoices: \"{{choices}}\"\ntarget: label\n"
                                    "num_fewshot: 2\n";
  std::ofstream(dir / "gen.yaml") << "task: pjrt_gen\ntype: generate_until\ndata: docs.jsonl\n"
                                     "text: \"{{q}}\"\ntarget: a\nuntil: [\"\\n\"]\n"
                                     "max_gen_toks: 5\n";
  std::ofstream(dir / "data.yaml") << "data:\n  sources:\n    - path: " << (dir / "docs.jsonl").string()
                                   << "\n      format: jsonl\n      field: q\n  val_fraction: 0\n";
  nlohmann::json results[2];
  std::vector<nlohmann::json> samples[2];
  for (int k = 0; k < 2; ++k) {
    const fs::path out = dir / (k ? "pjrt" : "cpu") / "results.json";
    const Result r =
        run("eval --model " + model + " --tasks " + (dir / "mc.yaml").string() + "," +
            (dir / "gen.yaml").string() + " --data " + (dir / "data.yaml").string() +
            " --batch 3 --log-samples --out " + out.string() +
            (k ? " --set train.backend=pjrt" : ""));
    ASSERT_EQ(r.code, 0) << r.out;
    std::ifstream f(out);
    results[k] = nlohmann::json::parse(f);
    std::ifstream s(out.parent_path() / "samples_pjrt_mc.jsonl");
    for (std::string line; std::getline(s, line);) samples[k].push_back(nlohmann::json::parse(line));
    std::ifstream g(out.parent_path() / "samples_pjrt_gen.jsonl");
    for (std::string line; std::getline(g, line);) samples[k].push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(samples[0].size(), 8u);
  ASSERT_EQ(samples[1].size(), samples[0].size());
  double worst = 0;
  for (size_t i = 0; i < samples[0].size(); ++i) {
    const nlohmann::json &a = samples[0][i].at("filtered_resps"), &b = samples[1][i].at("filtered_resps");
    ASSERT_EQ(a.size(), b.size());
    for (size_t c = 0; c < a.size(); ++c) {
      if (a[c].is_string()) {  // a generation
        EXPECT_EQ(a[c], b[c]) << "document " << i;
        continue;
      }
      const double x = std::stod(a[c][0].get<std::string>()), y = std::stod(b[c][0].get<std::string>());
      worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(x)));
      EXPECT_EQ(a[c][1], b[c][1]) << "document " << i << " choice " << c;
    }
  }
  EXPECT_LT(worst, 1e-5);
  for (const char* m : {"acc,none", "acc_norm,none"})
    EXPECT_EQ(results[0]["results"]["pjrt_mc"][m], results[1]["results"]["pjrt_mc"][m]) << m;
  EXPECT_EQ(results[0]["results"]["pjrt_gen"]["exact_match,none"],
            results[1]["results"]["pjrt_gen"]["exact_match,none"]);
  const std::string src = (dir / "docs.jsonl").string();
  EXPECT_NEAR(results[0]["heldout"][src]["loss"].get<double>(),
              results[1]["heldout"][src]["loss"].get<double>(), 1e-5);
  std::printf("largest relative difference of a loglikelihood, pjrt against cpu: %.3g\n", worst);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmt
