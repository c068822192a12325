// The surfaces added for meshes, base configs, deep inputs and the divergence guard, tried as a
// hostile user would (issue 41): each bad input is one line "lmtrain: error: ..." naming the key,
// file or value, exit 2, at once; the divergence guard keeps the checkpoint from before a rise
// after a resume and in a run's first steps, and says so when there is none.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"

namespace {

namespace fs = std::filesystem;

class Reliability : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lmtrain_reliability_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // 300 documents of 30 random words: a loss that falls, then rises when train.lr is absurd.
    std::mt19937 rng(7);
    const char* words[] = {"alpha", "beta",  "gamma", "delta",   "river",  "stone",
                           "cloud", "north", "quiet", "amber",   "seven",  "orbit",
                           "lamp",  "field", "cover", "harbour", "violet", "copper"};
    std::ofstream corpus(dir_ / "corpus.txt");
    for (int d = 0; d < 300; ++d) {
      if (d) corpus << "%\n";
      for (int w = 0; w < 30; ++w) corpus << (w ? " " : "") << words[rng() % 18];
      corpus << "\n";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A tiny llama on the corpus (bytes), its run in dir_/run.
  std::string config(const std::string& extra = "") {
    const fs::path p = dir_ / "run.yaml";
    std::ofstream(p) << "model: {family: llama, vocab_size: 300, hidden_size: 64, "
                        "intermediate_size: 128, num_hidden_layers: 2, num_attention_heads: 4, "
                        "max_position_embeddings: 128}\n"
                        "data:\n  sources:\n    - path: "
                     << (dir_ / "corpus.txt").string()
                     << "\n  seq_len: 32\n  val_fraction: 0.0\n"
                        "train: {max_steps: 20, micro_batch_size: 4, save_every: 10, keep_last: 2, "
                        "lr: 0.003, out_dir: "
                     << (dir_ / "run").string() << "}\n"
                     << extra;
    return p.string();
  }

  std::vector<nlohmann::json> warnings() const {
    std::vector<nlohmann::json> w;
    std::ifstream f(dir_ / "run" / "metrics.jsonl");
    for (std::string line; std::getline(f, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("warning")) w.push_back(j);
    }
    return w;
  }

  fs::path dir_;
};

// The command fails at once with exit 2 and one error line, of bounded length, naming `needle`.
void expect_refused(const std::string& args, const std::string& needle) {
  const auto start = std::chrono::steady_clock::now();
  const Result r = run(args);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out.substr(0, 2000);
  const size_t at = r.out.find("lmtrain: error: ");
  ASSERT_NE(at, std::string::npos) << args << "\n" << r.out.substr(0, 2000);
  // One error line (a note the command printed to stdout before it may follow, unflushed).
  const std::string error = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_EQ(r.out.find("lmtrain: error: ", at + 1), std::string::npos) << args << "\n" << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << args << "\n" << r.out;
  EXPECT_LT(error.size(), 600u) << args;
  EXPECT_NE(error.find(needle), std::string::npos) << args << "\n" << error;
  EXPECT_LT(s, 5.0) << args << " took " << s << " s";
}

// Defect 1 and a weak spot: axes whose product wraps (2^32 x 2^32 = 0 in 64 bits: SIGFPE) or goes
// negative in the message.
TEST_F(Reliability, MeshAxesPastAnyMeshAreOneMessage) {
  const std::string cfg = config();
  for (const char* cmd : {"train", "bench"}) {
    expect_refused(std::string(cmd) + " --config " + cfg +
                       " --set parallel.data=4294967296 --set parallel.fsdp=4294967296",
                   "parallel: the mesh data 4294967296 x fsdp 4294967296 x tensor 1 is more than "
                   "1048576 devices");
    expect_refused(std::string(cmd) + " --config " + cfg +
                       " --set parallel.data=3037000500 --set parallel.fsdp=3037000500",
                   "is more than 1048576 devices");
  }
}

// Defect 2 and a weak spot: a device id in the thousands had XLA's CPU plugin make that many
// devices (a thread creation abort at 3000); 2^62 was reported as "the plugin has 1". A
// coordination timeout of 2^63-1 s ended the wait at once.
TEST_F(Reliability, DeviceIdsAndTheCoordinationTimeoutAreChecked) {
  const std::string cfg = config() + " --set train.backend=pjrt --set parallel.data=2";
  expect_refused("train --config " + cfg + " --set 'parallel.devices=[0, 3000]'",
                 "has no device with id 3000");
  expect_refused("train --config " + cfg + " --set 'parallel.devices=[0, 4611686018427387904]'",
                 "parallel.devices[1]: 4611686018427387904 is not a device id (0 to 1048575)");
  expect_refused(
      "train --config " + config() + " --set parallel.coordination_timeout=9223372036854775807",
      "parallel.coordination_timeout");
}

// Defect 3: a base_config of nested aliases (each level 9 times the one before) kept train busy
// for minutes in the check for repeated keys; as --config it was refused at once by luck (its
// first key unknown). Every YAML source goes through one bound now.
TEST_F(Reliability, NestedAliasesInAnyYamlSourceAreOneMessage) {
  std::ofstream bomb(dir_ / "bomb.yaml");
  bomb << "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    bomb << "a" << i << ": &a" << i << " [";
    for (int k = 0; k < 9; ++k) bomb << (k ? ", *a" : "*a") << i - 1;
    bomb << "]\n";
  }
  bomb.close();
  std::ofstream(dir_ / "top.yaml") << "base_config: bomb.yaml\n";
  expect_refused("train --config " + (dir_ / "top.yaml").string(),
                 "bomb.yaml: more than 100000 YAML nodes once its aliases are expanded");
  expect_refused("train --config " + (dir_ / "bomb.yaml").string(), "more than 100000 YAML nodes");
  // An alias inside the node it names (found by the base_config_chain fuzzer: a stack overflow).
  std::ofstream(dir_ / "cycle.yaml") << "train: &t {max_steps: 1, again: *t}\n";
  std::ofstream(dir_ / "top2.yaml") << "base_config: cycle.yaml\n";
  expect_refused("train --config " + (dir_ / "top2.yaml").string(),
                 "cycle.yaml: YAML nested deeper than 256 levels");
}

// Defect 4 and a weak spot: a JSON ids file nested 100,000 deep crashed (stack overflow) while
// its message was built; a deep prompt echoed 120 kB of brackets.
TEST_F(Reliability, DeepJsonIsOneShortMessage) {
  const std::string model = (dir_ / "model").string();
  ASSERT_EQ(run("init --family llama --tokenizer " LMT_SOURCE_DIR
                "/tests/data/tokenizers/llama3_style_bpe.json --set model.hidden_size=64 "
                "--set model.intermediate_size=128 --set model.num_hidden_layers=2 "
                "--set model.num_attention_heads=4 --set model.max_position_embeddings=128 "
                "--out " +
                model)
                .code,
            0);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::ofstream(dir_ / "deep.json") << deep;
  expect_refused("logits --model " + model + " --ids-file " + (dir_ / "deep.json").string() +
                     " --out " + (dir_ / "o.safetensors").string(),
                 "deep.json: JSON nested deeper than 512 levels");
  const std::string prompt = "[" + std::string(60000, '[') + std::string(60000, ']') + "]";
  std::ofstream(dir_ / "prompt.sh") << "exec " << LMT_BINARY << " generate --checkpoint " << model
                                    << " --prompt-ids '" << prompt << "'";
  const Result r = capture("bash " + (dir_ / "prompt.sh").string());
  EXPECT_EQ(r.code, 2) << r.out.substr(0, 500);
  EXPECT_LT(r.out.size(), 400u);
  EXPECT_NE(r.out.find("--prompt-ids: JSON nested deeper than 512 levels"), std::string::npos)
      << r.out.substr(0, 500);
  // A wide bad element is cut in the message.
  expect_refused(
      "generate --checkpoint " + model + " --prompt-ids '[1, \"" + std::string(5000, 'x') + "\"]'",
      "--prompt-ids: element 1");
}

// Defect 5: after a resume the guard started a fresh range from the first steps after it, so a
// rise at step 22 warned at step 24 and protected step 22's checkpoint (the good 20 pruned). The
// watch's range is saved with each checkpoint now: the rise warns at its first step and keeps the
// newest checkpoint whose next step was still in range.
TEST_F(Reliability, AfterAResumeTheGuardKeepsTheCheckpointFromBeforeTheRise) {
  const std::string cfg = config();
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  const Result r = run("train --config " + cfg +
                       " --resume --set train.max_steps=26 --set train.lr=30 "
                       "--set train.save_every=1");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<nlohmann::json> w = warnings();
  ASSERT_EQ(w.size(), 1u) << r.out;
  EXPECT_EQ(w[0]["step"], 22);  // step 21's loss is step 20's weights'; 21's update ruins them
  const std::string kept = w[0]["kept_checkpoint"];
  EXPECT_EQ(fs::path(kept).filename(), "step_0000020");
  EXPECT_TRUE(fs::exists(kept));  // past keep_last 2, for the warning
  EXPECT_NE(w[0]["message"].get<std::string>().find("kept: " + kept), std::string::npos);
}

// A weak spot: a divergence in a run's first steps (7.7 -> 630 at step 2) went unflagged, and a
// later warning said a checkpoint was kept when none existed.
TEST_F(Reliability, ADivergenceInTheFirstStepsIsFlaggedAndSaysNothingIsKept) {
  const Result r = run("train --config " + config() +
                       " --set train.lr=30 --set train.warmup_steps=0 --set train.max_steps=4");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<nlohmann::json> w = warnings();
  ASSERT_EQ(w.size(), 1u) << r.out;
  EXPECT_EQ(w[0]["step"], 2);
  EXPECT_EQ(w[0]["kept_checkpoint"], "");
  EXPECT_NE(w[0]["message"].get<std::string>().find("no checkpoint from before it exists"),
            std::string::npos)
      << w[0].dump();
}

// A model directory with a tokenizer, for generate and the GGUF export.
std::string tiny_model(const fs::path& dir) {
  const std::string model = (dir / "model").string();
  const Result r = run("init --family llama --tokenizer " LMT_SOURCE_DIR
                       "/tests/data/tokenizers/llama3_style_bpe.json --set model.hidden_size=64 "
                       "--set model.intermediate_size=128 --set model.num_hidden_layers=2 "
                       "--set model.num_attention_heads=4 --set model.max_position_embeddings=128 "
                       "--out " +
                       model);
  EXPECT_EQ(r.code, 0) << r.out;
  return model;
}

// Names under `dir` (recursively) holding ".tmp": a writer's leftovers.
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".tmp") != std::string::npos)
      out.push_back(e.path().string());
  return out;
}

// A weak spot: a file-size limit (ulimit -f) ended train, prepare and both exports with SIGXFSZ
// and no message. Now each is the error a full disk gives: one line naming the file, exit 2,
// nothing half-written left.
TEST_F(Reliability, AFileSizeLimitIsOneMessageNamingTheFile) {
  const std::string model = tiny_model(dir_);
  const std::string cfg = config();
  struct Case {
    std::string args;
    int kib;
    fs::path out;
  } cases[] = {
      {"prepare --config " + cfg + " --out " + (dir_ / "store").string(), 4, dir_},
      {"train --config " + cfg + " --set train.max_steps=2 --set train.save_every=2", 200,
       dir_ / "run"},
      {"export --checkpoint " + model + " --out " + (dir_ / "hf").string(), 100, dir_},
      {"export --checkpoint " + model + " --format gguf --out " + (dir_ / "m.gguf").string(), 100,
       dir_},
  };
  for (const Case& c : cases) {
    const Result r = capture("bash -c 'ulimit -f " + std::to_string(c.kib) + "; exec " +
                             LMT_BINARY + " " + c.args + "'");
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    const size_t at = r.out.find("lmtrain: error: ");
    ASSERT_NE(at, std::string::npos) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find("File too large", at), std::string::npos) << r.out;
    EXPECT_EQ(leftovers(c.out), std::vector<std::string>()) << c.args;
  }
}

// A weak spot: `prepare --out DIR/` failed even on a fresh path ("exists and is not a token
// store", its temporary made inside DIR) and left DIR empty; `export --format gguf --out F/` met
// a raw filesystem error and left an empty directory.
TEST_F(Reliability, AnOutputPathWithATrailingSlash) {
  const Result p =
      run("prepare --config " + config() + " --out " + (dir_ / "store").string() + "/");
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_TRUE(fs::exists(dir_ / "store" / "manifest.json"));
  EXPECT_EQ(leftovers(dir_), std::vector<std::string>());
  const std::string model = tiny_model(dir_);
  expect_refused(
      "export --checkpoint " + model + " --format gguf --out " + (dir_ / "m.gguf").string() + "/",
      "m.gguf/' ends with '/', a directory's name: --format gguf writes one file");
  EXPECT_FALSE(fs::exists(dir_ / "m.gguf"));
}

// A weak spot: optimizer.eps of 1e-46 (0 in f32) passed and the run stopped at step 1 with a NaN
// loss (exit 3), no key named.
TEST_F(Reliability, AnEpsThatIsZeroInF32IsRefused) {
  expect_refused("train --config " + config() + " --set optimizer.eps=1e-46",
                 "optimizer.eps must be >= 1.18e-38");
}

// A weak spot: an unknown key in the second of two base_config files was reported at the first
// file's line (assigning the merge to the first base's root made that root the merge).
TEST_F(Reliability, AnUnknownKeyInTheSecondBaseNamesTheSecondBase) {
  std::ofstream(dir_ / "b1.yaml") << "train:\n  max_steps: 1\n";
  std::ofstream(dir_ / "b2.yaml") << "# the second base\n\ntrain:\n  micro_batch_size: 1\n"
                                     "  bogus_key: 3\n";
  std::ofstream(dir_ / "top.yaml") << "base_config: [b1.yaml, b2.yaml]\n";
  expect_refused(
      "train --config " + (dir_ / "top.yaml").string(),
      "top.yaml -> " + (dir_ / "b2.yaml").string() + ":5: unknown key 'train.bogus_key'");
}

// A weak spot: a resumed run took its W&B run id from an offline-run directory's name without
// the check logging.wandb.id gets (W&B refuses / \\ # ? % : in ids).
TEST_F(Reliability, AResumedRunChecksTheWandbRunIdItContinues) {
  const std::string cfg = config("logging:\n  wandb:\n    project: p\n");
  ASSERT_EQ(run("train --config " + cfg + " --set train.max_steps=10").code, 0);
  fs::create_directories(dir_ / "run" / "wandb" / "offline-run-29991231_235959-a:b");
  expect_refused("train --config " + cfg + " --resume --set train.max_steps=12",
                 "names the run id 'a:b', which W&B refuses");
}

// A weak spot: a token store's manifest.json was covered by no checksum (its document count or
// seq_len changed passed `check`, and train ran on it), and an extra file in an export passed
// `check` unnamed. The manifest now carries its own checksum; check names what it did not cover.
TEST_F(Reliability, CheckCoversAStoresManifestAndNamesWhatItDoesNotCover) {
  const std::string store = (dir_ / "store").string();
  ASSERT_EQ(run("prepare --config " + config() + " --out " + store).code, 0);
  EXPECT_EQ(run("check " + store).code, 0);
  std::ofstream(fs::path(store) / "notes.txt") << "mine";
  const Result extra = run("check " + store);
  EXPECT_EQ(extra.code, 0) << extra.out;
  EXPECT_NE(extra.out.find("(not covered by its checksums: notes.txt)"), std::string::npos)
      << extra.out;
  for (const char* key : {"seq_len", "documents"}) {
    const fs::path m = fs::path(store) / "manifest.json";
    std::ifstream in(m);
    nlohmann::json j = nlohmann::json::parse(in);
    in.close();
    const nlohmann::json saved = j;
    if (std::string(key) == "seq_len")
      j["seq_len"] = 64;
    else
      j["sources"][0]["train"]["documents"] = j["sources"][0]["train"]["documents"].get<int>() + 1;
    std::ofstream(m) << j.dump(2);
    const Result r = run("check " + store);
    EXPECT_EQ(r.code, 2) << key << "\n" << r.out;
    EXPECT_NE(r.out.find("manifest.json: changed since prepare wrote it"), std::string::npos)
        << key << "\n"
        << r.out;
    expect_refused("train --config " + config() + " --set data.store=" + store,
                   "manifest.json: changed since prepare wrote it");
    std::ofstream(m) << saved.dump(2);
  }
  const std::string model = tiny_model(dir_), out = (dir_ / "hf").string();
  ASSERT_EQ(run("export --checkpoint " + model + " --out " + out).code, 0);
  std::ofstream(fs::path(out) / "README.md") << "a model card";
  const Result r = run("check " + out);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(not covered by its checksums: README.md)"), std::string::npos) << r.out;
}

}  // namespace
