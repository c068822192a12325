// Learning: the demo exactly as the README runs it — `lmtrain tokenizer train` on the fortune
// cookies, `lmtrain prepare`, then training (configs/demo.yaml) — must end with a validation loss
// well below the unigram entropy of its validation tokens, i.e. the model learned structure
// beyond token frequencies. And LoRA SFT (configs/sft-lora.yaml) teaches the demo's model a task
// it cannot do, measured as exact answers to held-out questions. The demo run is the ctest
// fixture's (tests/demo_run.h), made once for these tests and the pjrt ones.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "demo_run.h"
#include "train/run_config.h"
#include "train/train_data.h"
#include "train/trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

TEST(Learning, DemoEndsWellBelowUnigramEntropy) {
  ASSERT_EQ(test::demo_run_missing(), "");
  const RunConfig cfg = load_run_config(test::demo_config(), test::demo_data_sets());
  const test::RunLosses run = test::read_losses(test::demo_run_dir());
  // Every step ran (the fixture logs each) and the run evaluated after its last step.
  ASSERT_EQ(static_cast<int64_t>(run.train.size()), cfg.train.max_steps);
  EXPECT_EQ(run.train.rbegin()->first, cfg.train.max_steps);
  ASSERT_TRUE(run.val.count(cfg.train.max_steps)) << "no evaluation at the last step";
  const double last_val_loss = run.val.at(cfg.train.max_steps);
  // The trainer's own number (TrainResult::val_unigram_entropy): the validation split's.
  const double entropy = open_train_data(cfg, false).validation->unigram_entropy();
  ASSERT_GT(last_val_loss, 0.0);
  std::printf("demo: unigram entropy %.4f nats/token, final val loss %.4f\n", entropy,
              last_val_loss);
  // A model that only learned token frequencies sits at the unigram entropy (about 6 nats for
  // this 2048-token vocabulary). Demand a loss at most three quarters of it.
  EXPECT_GT(entropy, 4.0);
  EXPECT_LT(last_val_loss, 0.75 * entropy);
}

// The demo run scores a task made from its own data at each evaluation (tests/run_demo.sh,
// eval.tasks): a fortune's first three words, then its rest in order or shuffled, four choices.
// Chance is 1/4; the trained model must beat it by more than three standard errors, and do
// better at the end than at its first evaluation.
TEST(Learning, TheDemoScoresATaskOfItsOwnDataDuringTraining) {
  ASSERT_EQ(test::demo_run_missing(), "");
  std::ifstream f(test::demo_run_dir() / "metrics.jsonl");
  std::vector<std::pair<int64_t, nlohmann::json>> scores;
  for (std::string line; std::getline(f, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("eval_tasks"))
      scores.emplace_back(j.at("step").get<int64_t>(), j.at("eval_tasks").at("demo_word_order"));
  }
  const RunConfig cfg = load_run_config(test::demo_config(), test::demo_data_sets());
  // Every evaluation (each eval_every steps, and the last step) scored the task.
  ASSERT_EQ(static_cast<int64_t>(scores.size()), cfg.train.max_steps / cfg.train.eval_every);
  for (const auto& [step, s] : scores)
    std::printf("demo_word_order at step %lld: acc %.3f ± %.3f, acc_norm %.3f\n",
                static_cast<long long>(step), s.at("acc").get<double>(),
                s.at("acc_stderr").get<double>(), s.at("acc_norm").get<double>());
  const nlohmann::json& last = scores.back().second;
  EXPECT_EQ(scores.back().first, cfg.train.max_steps);
  EXPECT_GT(last.at("acc").get<double>() - 0.25, 3 * last.at("acc_stderr").get<double>());
  EXPECT_GT(last.at("acc").get<double>(), scores.front().second.at("acc").get<double>());
}

// Runs argv (no shell: the prompt holds newlines) and returns its standard output.
std::string capture(const std::vector<std::string>& argv) {
  int fd[2];
  if (pipe(fd) != 0) return "";
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fd[1]);
  std::string out;
  char buf[4096];
  for (ssize_t k; (k = read(fd[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(k));
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << argv[1] << ": " << out;
  return out;
}

// The share of held-out questions (DIR/heldout.jsonl, the first n) whose greedy answer from
// `model` is exactly the expected words, then the end of the sequence: the plain chat template's
// prompt ends at "Assistant:", and the end-of-sequence token after the answer is in the loss, so
// a model that learned the task also stops.
double exact_match(const std::string& model, const fs::path& heldout, int n) {
  std::ifstream in(heldout);
  std::string line;
  int hits = 0, asked = 0;
  auto words = [](const std::string& s) {
    std::istringstream ws(s);
    return std::vector<std::string>(std::istream_iterator<std::string>(ws), {});
  };
  while (asked < n && std::getline(in, line)) {
    const auto q = nlohmann::json::parse(line);
    const std::string prompt = "User: " + q["prompt"].get<std::string>() + "\n\nAssistant:";
    const std::string out = capture({LMT_BINARY, "generate", "--checkpoint", model, "--temperature",
                                     "0", "--max-new-tokens", "8", "--json", "--prompt", prompt});
    const std::vector<std::string> want = words(q["answer"].get<std::string>());
    const std::vector<std::string> got =
        words(nlohmann::json::parse(out)["text"].get<std::string>());
    hits += got == want;
    ++asked;
  }
  return static_cast<double>(hits) / asked;
}

// How many of the first n held-out questions `model` answers greedily and then stops by itself
// within 128 new tokens: generate ends early only at the end-of-sequence token (a prompt and 128
// tokens are within the demo model's 256 positions), which the plain template puts in the loss.
int stops_by_itself(const std::string& model, const fs::path& heldout, int n) {
  std::ifstream in(heldout);
  std::string line;
  int stops = 0;
  for (int asked = 0; asked < n && std::getline(in, line); ++asked) {
    const auto q = nlohmann::json::parse(line);
    const std::string prompt = "User: " + q["prompt"].get<std::string>() + "\n\nAssistant:";
    const std::string out = capture({LMT_BINARY, "generate", "--checkpoint", model, "--temperature",
                                     "0", "--max-new-tokens", "128", "--json", "--prompt", prompt});
    stops += nlohmann::json::parse(out)["ids"].size() < 128;
  }
  return stops;
}

// LoRA SFT as configs/sft-lora.yaml runs it, on the demo's last checkpoint as the base (the
// config's init_from): reversing three words is beyond the base (about 0% of held-out questions
// answered exactly) and within reach of its adapters (most answered exactly), on word triples
// never seen in training.
TEST(Learning, LoraSftLearnsAHeldOutTask) {
  ASSERT_EQ(test::demo_run_missing(), "");
  const fs::path out = fs::temp_directory_path() / ("lmtrain_sft_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const std::string bin = LMT_BINARY, src = LMT_SOURCE_DIR;
  auto run = [](const std::string& cmd) { return std::system(cmd.c_str()); };
  ASSERT_EQ(run("python3 " + src + "/scripts/make_sft_task.py --out " + (out / "data").string()),
            0);
  const std::string sft = src + "/configs/sft-lora.yaml";
  // The config's base, runs/demo/checkpoints/step_N, in the fixture's run (read from the YAML:
  // loading the config checks that its own path exists).
  const std::string base =
      (test::demo_run_dir() / "checkpoints" /
       fs::path(YAML::LoadFile(sft)["train"]["init_from"].as<std::string>()).filename())
          .string();
  ASSERT_TRUE(fs::is_directory(base)) << base;
  const std::string sets = " --set data.sources.0.path=" + (out / "data" / "train.jsonl").string() +
                           " --set data.store=" + (out / "sft_store").string() +
                           " --set train.init_from=" + base +
                           " --set train.out_dir=" + (out / "sft").string();
  ASSERT_EQ(run(bin + " prepare --quiet --config " + sft + sets), 0);
  ASSERT_EQ(run(bin + " train --config " + sft + sets + " > /dev/null"), 0);

  const int n = 60;
  const double before = exact_match(base, out / "data" / "heldout.jsonl", n);
  const double after = exact_match((out / "sft").string(), out / "data" / "heldout.jsonl", n);
  std::printf("LoRA SFT: held-out exact match %.0f%% before, %.0f%% after (%d questions)\n",
              100 * before, 100 * after, n);
  EXPECT_LE(before, 0.05);
  EXPECT_GE(after, 0.75);
  const int stops = stops_by_itself((out / "sft").string(), out / "data" / "heldout.jsonl", 10);
  std::printf(
      "LoRA SFT: %d of 10 held-out answers end with the end-of-sequence token within 128 "
      "new tokens\n",
      stops);
  EXPECT_GE(stops, 9);
  fs::remove_all(out);
}

}  // namespace
}  // namespace lmt

namespace lmt {
namespace {

std::vector<nlohmann::json> warnings_of(const std::filesystem::path& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream f(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(f, line);)
    if (auto j = nlohmann::json::parse(line); j.contains("warning")) out.push_back(j);
  return out;
}

// The demo never warns of divergence; with train.lr 3 it warns within 20 steps (the loss goes
// 7.7 -> 20 at step 4; 4 steps are run), in metrics.jsonl and on the console, and the newest
// checkpoint from before the rise (step 2) survives keep_last 1.
TEST(Learning, ADivergingRunIsFlaggedAndItsLastGoodCheckpointKept) {
  ASSERT_EQ(test::demo_run_missing(), "");
  EXPECT_EQ(warnings_of(test::demo_run_dir()).size(), 0u);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lmtrain_diverge_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  RunConfig cfg = test::demo_run_config(
      dir, "lr3", {"train.lr=3", "train.max_steps=4", "train.save_every=2", "train.keep_last=1"});
  train(cfg, false);
  const std::vector<nlohmann::json> w = warnings_of(dir / "lr3");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0]["warning"], "divergence");
  EXPECT_LE(w[0]["step"].get<int64_t>(), 20);
  const std::string kept = w[0]["kept_checkpoint"].get<std::string>();
  ASSERT_FALSE(kept.empty());
  EXPECT_TRUE(std::filesystem::exists(kept));  // pruned by keep_last 1 but for the warning
  EXPECT_TRUE(std::filesystem::exists(dir / "lr3/checkpoints/step_0000004"));
  int dirs = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "lr3/checkpoints"))
    dirs += e.is_directory();
  EXPECT_EQ(dirs, 2);
  std::filesystem::remove_all(dir);
}

// Each loss of the loss section trains the demo: a short run (60 steps) of the plain
// cross-entropy, label smoothing 0.1, z-loss 1e-4 and focal (gamma 2) on the same data and order,
// each ending with a plain evaluation cross-entropy within 3% of the plain run's; the cut
// cross-entropy computes the plain loss, so its run equals the plain one to rounding. The
// training lines of a loss that is not plain carry its plain cross-entropy beside it.
TEST(Learning, EachLossLearnsTheDemoWithinThreePercentOfThePlainLoss) {
  ASSERT_EQ(test::demo_run_missing(), "");
  const fs::path dir = fs::temp_directory_path() / ("lmtrain_losses_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto run = [&](const std::string& name, std::vector<std::string> sets) {
    sets.insert(sets.end(), {"train.max_steps=60", "train.eval_every=60", "train.log_every=20",
                             "train.peak_tflops=1"});  // no GEMM measured for MFU
    const TrainResult r = train(test::demo_run_config(dir, name, sets), false);
    std::printf("%s: val cross-entropy %.4f, last loss %.4f\n", name.c_str(), r.last_val_loss,
                r.last_loss);
    return r;
  };
  const TrainResult plain = run("plain", {});
  ASSERT_GT(plain.last_val_loss, 0);
  const struct {
    const char* name;
    std::vector<std::string> sets;
  } losses[] = {{"label_smoothing", {"loss.label_smoothing=0.1"}},
                {"z_loss", {"loss.z_loss=1e-4"}},
                {"focal", {"loss.name=focal", "loss.focal_gamma=2"}}};
  for (const auto& l : losses) {
    SCOPED_TRACE(l.name);
    const TrainResult r = run(l.name, l.sets);
    EXPECT_NEAR(r.last_val_loss, plain.last_val_loss, 0.03 * plain.last_val_loss);
    EXPECT_NE(r.last_val_loss, plain.last_val_loss);  // the objective did change the training
    std::ifstream f(dir / l.name / "metrics.jsonl");
    int with_ce = 0;
    for (std::string line; std::getline(f, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) with_ce += j.contains("ce") && j["ce"].get<double>() > 0;
    }
    EXPECT_EQ(with_ce, 3) << "every training line carries the plain cross-entropy";
  }
  const TrainResult cut = run("cut", {"loss.impl=cut", "loss.vocab_tile=300"});
  EXPECT_NEAR(cut.last_val_loss, plain.last_val_loss, 1e-4 * plain.last_val_loss);
  EXPECT_NEAR(cut.last_loss, plain.last_loss, 1e-4 * plain.last_loss);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmt
