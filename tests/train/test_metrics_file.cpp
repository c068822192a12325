// metrics.jsonl is never lost or silently cut short: --resume rewrites it through the atomic
// write_text_file (the old file stays whole until the new one is in place), and a write that fails
// (here: a file size limit, as a full disk would) stops the run with a message naming the file.
// Eval lines carry per-source losses when given, in metrics.jsonl and TensorBoard alike.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "io/io_test_util.h"
#include "io/text_file.h"
#include "train/metrics.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TextFile, ReplacesWholeAndLeavesNoTemporaryFile) {
  const fs::path dir = test::temp_dir() / "text_file";
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_text_file((dir / "a.txt").string(), "old\n");
  write_text_file((dir / "a.txt").string(), "new contents\n");
  EXPECT_EQ(read_all(dir / "a.txt"), "new contents\n");
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  test::expect_user_error([&] { write_text_file((dir / "no" / "b.txt").string(), "x"); },
                          {"cannot write '" + (dir / "no" / "b.txt").string() + "'"});
}

TEST(MetricsFile, ResumeKeepsTheLinesUpToTheStep) {
  const fs::path dir = test::temp_dir() / "metrics_resume";
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    Metrics m(dir.string(), LoggingConfig{.console = false}, -1);
    for (int64_t s = 1; s <= 5; ++s) m.log_step(StepMetrics{.step = s, .loss = 1.0});
  }
  Metrics m(dir.string(), LoggingConfig{.console = false}, 3);
  m.log_step(StepMetrics{.step = 4, .loss = 2.0});
  std::istringstream lines(read_all(dir / "metrics.jsonl"));
  std::vector<int64_t> steps;
  for (std::string l; std::getline(lines, l);) steps.push_back(nlohmann::json::parse(l)["step"]);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(MetricsFile, AFailedWriteIsAUserErrorNamingTheFile) {
  const fs::path dir = test::temp_dir() / "metrics_full";
  fs::remove_all(dir);
  fs::create_directories(dir);
  Metrics m(dir.string(), LoggingConfig{.console = false}, -1);
  const std::string msg = test::user_error_when_the_disk_is_full(2048, [&] {
    for (int64_t s = 1; s <= 1000; ++s) m.log_step(StepMetrics{.step = s, .loss = 1.0});
  });
  EXPECT_NE(msg.find("logging.jsonl: cannot write '" + (dir / "metrics.jsonl").string() + "'"),
            std::string::npos)
      << msg;
}

TEST(MetricsFile, EvalLinesCarryPerSourceLossesInJsonlAndTensorBoard) {
  const fs::path dir = test::temp_dir() / "metrics_sources";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string tb;
  {
    Metrics m(dir.string(), LoggingConfig{.console = false, .tensorboard = true}, -1);
    tb = m.tensorboard_path();
    m.log_step(StepMetrics{.step = 1, .loss = 2.0, .mfu = 0.25});
    m.log_eval(1, 1.5, 96, {{"wiki", 1.25, 64}, {"code", 2.0, 32}});
    m.log_eval(2, 1.5, 96);
  }
  std::istringstream lines(read_all(dir / "metrics.jsonl"));
  std::vector<nlohmann::json> j;
  for (std::string l; std::getline(lines, l);) j.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["mfu"], 0.25);
  EXPECT_EQ(j[1]["val_sources"]["wiki"]["loss"], 1.25);
  EXPECT_DOUBLE_EQ(j[1]["val_sources"]["wiki"]["ppl"].get<double>(), std::exp(1.25));
  EXPECT_EQ(j[1]["val_sources"]["code"]["tokens"], 32);
  EXPECT_FALSE(j[2].contains("val_sources"));
  ASSERT_EQ(fs::path(tb).parent_path(), dir / "tb");
  const std::string events = read_all(tb);  // TensorBoard reads them: the reference tier
  for (const char* tag : {"train/loss", "train/mfu", "val/loss", "val/ppl", "val/wiki/loss",
                          "val/wiki/ppl", "val/code/loss", "val/code/ppl"})
    EXPECT_NE(events.find(tag), std::string::npos) << tag;
}

// Task scores (eval.tasks): an eval_tasks line in metrics.jsonl with each metric and its standard
// error where it has one, eval/<task>/<metric> scalars in TensorBoard; nothing for no scores.
TEST(MetricsFile, TaskScoresGoToTheFileAndTensorBoard) {
  const fs::path dir = test::temp_dir() / "metrics_tasks";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string tb;
  {
    Metrics m(dir.string(), LoggingConfig{.console = false, .tensorboard = true}, -1);
    tb = m.tensorboard_path();
    m.log_tasks(100, {{"arc", "acc", 0.5, 0.05}, {"arc", "acc_norm", 0.55, 0.049},
                      {"wiki", "word_perplexity", 31.5, std::nullopt}});
    m.log_tasks(200, {});
  }
  std::istringstream lines(read_all(dir / "metrics.jsonl"));
  std::vector<nlohmann::json> j;
  for (std::string l; std::getline(lines, l);) j.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["step"], 100);
  EXPECT_EQ(j[0]["eval_tasks"]["arc"]["acc"], 0.5);
  EXPECT_EQ(j[0]["eval_tasks"]["arc"]["acc_stderr"], 0.05);
  EXPECT_EQ(j[0]["eval_tasks"]["wiki"]["word_perplexity"], 31.5);
  EXPECT_FALSE(j[0]["eval_tasks"]["wiki"].contains("word_perplexity_stderr"));
  const std::string events = read_all(tb);
  for (const char* tag : {"eval/arc/acc", "eval/arc/acc_norm", "eval/wiki/word_perplexity"})
    EXPECT_NE(events.find(tag), std::string::npos) << tag;
}

TEST(MetricsFile, AnUncreatableTensorBoardDirectoryNamesTheKeyAndThePath) {
  const fs::path dir = test::temp_dir() / "metrics_tb_blocked";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "tb") << "a file where the directory goes";
  test::expect_user_error(
      [&] { Metrics m(dir.string(), LoggingConfig{.console = false, .tensorboard = true}, -1); },
      {"logging.tensorboard: cannot create the directory '" + (dir / "tb").string() + "'"});
}

}  // namespace
}  // namespace lmt
