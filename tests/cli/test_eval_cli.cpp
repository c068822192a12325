// `lmtrain eval` from the command line: its results file and records, held-out text against the
// model's own loss on the same tokens, and bad input (one message, exit 2, nothing written).
// Its numbers against lm-evaluation-harness: tests/reference/test_eval.py and
// test_eval_requests.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/cli_util.h"
#include "data/tokenizer/tokenizer.h"
#include "hf/hf_test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

// A small random llama with a byte-level BPE tokenizer, written once for these tests.
std::string model_dir() {
  static const std::string dir = [] {
    const std::string d = (test::temp_dir() / "eval_cli_model").string();
    fs::remove_all(d);
    const Result r = run("init --family llama --seed 5 --tokenizer " +
                         std::string(LMT_SOURCE_DIR) +
                         "/tests/data/tokenizers/llama3_style_bpe.json --set model.hidden_size=32 "
                         "--set model.intermediate_size=64 --set model.num_hidden_layers=2 --set "
                         "model.num_attention_heads=2 --set model.num_key_value_heads=1 --set "
                         "model.max_position_embeddings=24 --out " + d);
    EXPECT_EQ(r.code, 0) << r.out;
    return d;
  }();
  return dir;
}

fs::path write(const std::string& name, const std::string& text) {
  const fs::path p = test::temp_dir() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

fs::path mc_task() {
  write("eval_cli_docs.jsonl",
        "{\"q\": \"one two\", \"choices\": [\"three\", \"four\"], \"label\": 0}\n"
        "{\"q\": \"red green\", \"choices\": [\"blue\", \"cat\"], \"label\": 0}\n"
        "{\"q\": \"a b\", \"choices\": [\"c\", \"z\"], \"label\": 1}\n");
  return write("eval_cli_mc.yaml",
               "task: cli_mc\n"
               "type: multiple_choice\n"
               "data: eval_cli_docs.jsonl\n"
               "text: \"{{q}}\"\n"
               "choices: \"{{choices}}\"\n"
               "target: label\n");
}

TEST(EvalCli, WritesTheHarnessLayoutAndRecords) {
  const fs::path out = test::temp_dir() / "eval_cli_out" / "results.json";
  fs::remove_all(out.parent_path());
  const Result r = run("eval --model " + model_dir() + " --tasks " + mc_task().string() +
                       " --out " + out.string() + " --log-samples --batch 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("|cli_mc"), std::string::npos) << r.out;  // the console table
  std::ifstream f(out);
  const nlohmann::json j = nlohmann::json::parse(f);
  const nlohmann::json& res = j.at("results").at("cli_mc");
  for (const char* k : {"acc,none", "acc_stderr,none", "acc_norm,none", "acc_norm_stderr,none"})
    EXPECT_TRUE(res.contains(k)) << k << ": " << res.dump();
  EXPECT_EQ(j.at("n-samples").at("cli_mc").at("effective"), 3);
  EXPECT_EQ(j.at("n-shot").at("cli_mc"), 0);
  EXPECT_EQ(j.at("higher_is_better").at("cli_mc").at("acc"), true);
  EXPECT_EQ(j.at("lmtrain").at("truncated_requests").at("cli_mc"), 0);
  std::ifstream s(out.parent_path() / "samples_cli_mc.jsonl");
  int lines = 0;
  double acc = 0;
  for (std::string line; std::getline(s, line); ++lines) {
    const nlohmann::json rec = nlohmann::json::parse(line);
    EXPECT_EQ(rec.at("doc_id"), lines);
    EXPECT_EQ(rec.at("arguments").size(), 2u);
    EXPECT_EQ(rec.at("doc_hash").get<std::string>().size(), 64u);
    acc += rec.at("acc").get<double>();
  }
  EXPECT_EQ(lines, 3);
  EXPECT_DOUBLE_EQ(res.at("acc,none").get<double>(), acc / 3);
}

// Held-out text: each document's loss is the model's cross-entropy over the same tokens (the
// tokenizer's, an end-of-text after each text, none before), documents longer than the model's
// 24 positions scored in rolling windows; here checked on documents that fit, against the
// model's own batch loss.
TEST(EvalCli, HeldOutTextIsTheModelsLossOnTheSameTokens) {
  const fs::path data = write("eval_cli_heldout.txt",
                              "the cat sat\n%\nred green blue\n%\nnorth south east west\n");
  const fs::path cfg = write("eval_cli_data.yaml",
                             "data:\n  sources:\n    - path: " + data.string() +
                                 "\n      format: text\n      split: delimiter\n"
                                 "      delimiter: \"%\"\n  val_fraction: 0\n");
  const fs::path out = test::temp_dir() / "eval_cli_heldout.json";
  const Result r = run("eval --model " + model_dir() + " --data " + cfg.string() + " --out " +
                       out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream f(out);
  const nlohmann::json h = nlohmann::json::parse(f).at("heldout").at(data.string());
  EXPECT_EQ(h.at("documents"), 3);

  auto be = make_backend("cpu");
  std::unique_ptr<Transformer> m = load_model_for_inference(model_dir(), "", be.get());
  std::unique_ptr<Tokenizer> tok = load_tokenizer(model_dir());
  double nll = 0;
  int64_t tokens = 0, bytes = 0;
  for (const std::string text : {"the cat sat", "red green blue", "north south east west"}) {
    // The text's tokens, then EOS; conditioned on BOS (the prefix token) when the tokenizer
    // puts none before a text itself.
    std::vector<int32_t> ids = tok->encode_with_special(text);
    if (tok->special_suffix().empty()) ids.push_back(tok->eos_id());
    if (ids.front() != tok->bos_id()) ids.insert(ids.begin(), tok->bos_id());
    const auto T = static_cast<int64_t>(ids.size()) - 1;
    std::vector<int32_t> in(ids.begin(), ids.end() - 1), labels(ids.begin() + 1, ids.end());
    const LossSum l = batch_loss(*m, in.data(), labels.data(), 1, T);
    nll += l.sum;
    tokens += l.tokens;
    bytes += static_cast<int64_t>(std::string(text).size());
  }
  EXPECT_EQ(h.at("tokens").get<int64_t>(), tokens);
  EXPECT_EQ(h.at("bytes").get<int64_t>(), bytes);
  EXPECT_NEAR(h.at("loss").get<double>(), nll / static_cast<double>(tokens), 1e-5);
  EXPECT_NEAR(h.at("bits_per_byte").get<double>(),
              nll / std::log(2.0) / static_cast<double>(bytes), 1e-5);
}

// The same held-out documents read from a token store (its validation split) and from the config
// that made it score the same: pretraining text, and chats whose loss is the assistant's turns
// only (the tokens scored are the store's loss tokens).
TEST(EvalCli, HeldOutTextFromAStoreEqualsItsConfigs) {
  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "text");
    const std::string name = chat ? "chat" : "text";
    std::string text;
    for (int i = 0; i < 40; ++i) {
      const std::string words = "document " + std::to_string(i) + " holds the words " +
                                std::to_string(i * 7919 % 1000) + " and more";
      text += chat ? "{\"messages\": [{\"role\": \"user\", \"content\": \"say " +
                         std::to_string(i) + "\"}, {\"role\": \"assistant\", \"content\": \"" +
                         words + "\"}]}\n"
                   : (i ? "%\n" : "") + words + "\n";
    }
    const fs::path data = write("eval_cli_store_" + name + (chat ? ".jsonl" : ".txt"), text);
    const fs::path store = test::temp_dir() / ("eval_cli_store_" + name);
    fs::remove_all(store);
    const std::string source =
        chat ? "      format: jsonl\n      schema: chat\n      chat_template: chatml\n"
             : "      format: text\n      split: delimiter\n      delimiter: \"%\"\n";
    const fs::path cfg = write("eval_cli_store_" + name + ".yaml",
                               "data:\n  sources:\n    - path: " + data.string() + "\n" + source +
                                   "  val_fraction: 0.3\n  seq_len: 16\n  tokenizer: " +
                                   model_dir() + "\n  store: " + store.string() + "\n");
    const Result p = run("prepare --quiet --config " + cfg.string());
    ASSERT_EQ(p.code, 0) << p.out;
    nlohmann::json h[2];
    for (int k = 0; k < 2; ++k) {
      const fs::path out = test::temp_dir() / ("eval_cli_store_" + name + std::to_string(k));
      const Result r = run("eval --model " + model_dir() + " --data " +
                           (k ? store.string() : cfg.string()) + " --out " + out.string());
      ASSERT_EQ(r.code, 0) << r.out;
      std::ifstream f(out);
      h[k] = nlohmann::json::parse(f).at("heldout").at(data.string());
    }
    std::ifstream mf(store / "manifest.json");
    const nlohmann::json val = nlohmann::json::parse(mf).at("sources").at(0).at("validation");
    EXPECT_GT(h[0].at("documents").get<int64_t>(), 3);
    EXPECT_LT(h[0].at("documents").get<int64_t>(), 40);
    EXPECT_EQ(h[0].at("documents"), val.at("documents"));
    EXPECT_EQ(h[0].at("tokens"), val.at("loss_tokens"));
    for (const char* key : {"documents", "tokens", "bytes"}) EXPECT_EQ(h[0].at(key), h[1].at(key));
    EXPECT_NEAR(h[0].at("loss").get<double>(), h[1].at("loss").get<double>(), 1e-9);
  }
}

TEST(EvalCli, BadInputIsOneMessageAndNothingWritten) {
  const fs::path out = test::temp_dir() / "eval_cli_bad" / "results.json";
  fs::remove_all(out.parent_path());
  const std::string model = " --model " + model_dir();
  const fs::path no_field = write("eval_cli_nofield.yaml",
                                  "task: nofield\ntype: multiple_choice\n"
                                  "data: eval_cli_docs.jsonl\ntext: \"{{question}}\"\n"
                                  "choices: \"{{choices}}\"\ntarget: label\n");
  const fs::path broken = write("eval_cli_broken.yaml", "task: broken\ntype: [multiple\n");
  mc_task();
  const std::string to = " --out " + out.string();
  struct Case {
    std::string args, says;
  } cases[] = {
      {model + to, "give --tasks"},
      {model + " --tasks " + mc_task().string() + " --log-samples", "--log-samples"},
      {model + " --tasks " + mc_task().string() + " --set train.lr=1" + to, "--set train.lr"},
      {model + " --tasks " + (test::temp_dir() / "no_such_task.yaml").string() + to,
       "no_such_task"},
      {model + " --tasks " + broken.string() + to, "eval_cli_broken.yaml:"},
      {model + " --tasks " + no_field.string() + to, "question"},
      {" --model " + (test::temp_dir() / "no_model").string() + " --tasks " +
           mc_task().string() + to,
       "no_model"},
  };
  for (const Case& c : cases) {
    const Result r = run("eval" + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("terminate"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
}

}  // namespace
}  // namespace lmt
