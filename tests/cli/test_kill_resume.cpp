// kill -9 at random moments: whatever lmtrain train or lmtrain prepare leaves behind, the next
// command a user would type (train --resume, or the same prepare again) must end in exactly the
// files of an uninterrupted run: every checkpoint and the token store byte for byte, every logged
// loss bit for bit, and no leftovers of the dead process. The kill times are drawn uniformly over
// the length of an uninterrupted run, so they land before the first step, between steps, inside
// checkpoint writes (about half of this run's time) and inside the store's build and swap.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/test_seed.h"
#include "test_util.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kChildTimeoutS = 120;  // far above any run here; a child past it is a hang

std::string slurp(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One lmtrain process, its stdout and stderr in `log`; killed and reaped if still running when it
// goes out of scope.
class Child {
 public:
  Child(const std::vector<std::string>& args, const fs::path& log) : log_(log) {
    std::vector<std::string> argv_s = {LMT_BINARY};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      ADD_FAILURE() << "posix_spawn " << argv[0] << ": " << std::strerror(rc);
      pid_ = -1;
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) kill();
  }

  // The exit code (128 + signal for a signal) if the process ends within `seconds`, else nullopt.
  std::optional<int> wait_for(double seconds) {
    if (pid_ <= 0) return -1;
    const Clock::time_point t0 = Clock::now();
    for (;;) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (seconds_since(t0) >= seconds) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void kill() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  std::string output() const { return slurp(log_); }

 private:
  pid_t pid_ = -1;
  fs::path log_;
};

// Runs to the end; a child past kChildTimeoutS is killed and fails the test.
int run_to_end(const std::vector<std::string>& args, const fs::path& log) {
  Child c(args, log);
  std::optional<int> code = c.wait_for(kChildTimeoutS);
  if (!code) {
    ADD_FAILURE() << "lmtrain hung (killed after " << kChildTimeoutS << " s):\n" << c.output();
    return -1;
  }
  EXPECT_EQ(*code, 0) << c.output();
  return *code;
}

// The files under `root`, as paths relative to it, sorted.
std::vector<std::string> files_under(const fs::path& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    out.push_back(fs::relative(e.path(), root).string() + (e.is_directory() ? "/" : ""));
  std::sort(out.begin(), out.end());
  return out;
}

// Every difference between two trees: a path in one only, or a file whose bytes differ. Files
// named in `skip` only need to exist; a manifest.json is compared without its wall-clock field.
std::vector<std::string> tree_diff(const fs::path& want, const fs::path& got,
                                   const std::vector<std::string>& skip = {}) {
  std::vector<std::string> diff;
  const std::vector<std::string> a = files_under(want), b = files_under(got);
  if (a != b) {
    for (const std::string& p : a)
      if (!std::binary_search(b.begin(), b.end(), p)) diff.push_back("missing: " + p);
    for (const std::string& p : b)
      if (!std::binary_search(a.begin(), a.end(), p)) diff.push_back("extra: " + p);
    return diff;
  }
  for (const std::string& p : a) {
    const std::string name = fs::path(p).filename().string();
    if (p.back() == '/' || std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    std::string x = slurp(want / p), y = slurp(got / p);
    if (name == "manifest.json") {
      auto jx = nlohmann::json::parse(x), jy = nlohmann::json::parse(y);
      jx.erase("prepare_seconds");
      jy.erase("prepare_seconds");
      x = jx.dump();
      y = jy.dump();
    }
    if (x != y) diff.push_back("differs: " + p);
  }
  return diff;
}

// The entries of `dir`, each directory with the number of files in it.
std::vector<std::string> top_level(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (e.is_directory())
      name +=
          " (" + std::to_string(std::distance(fs::directory_iterator(e.path()), {})) + " files)";
    out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(nothing)" : s;
}

class KillResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lmtrain_kill_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);  // kept for a look when the test fails
  }

  // Kill delays: uniform over an uninterrupted run's length `run_s`.
  std::vector<double> delays(std::mt19937& rng, double run_s, int n) {
    std::uniform_real_distribution<double> u(0.0, run_s);
    std::vector<double> d;
    for (int i = 0; i < n; ++i) d.push_back(u(rng));
    return d;
  }

  fs::path log(const std::string& what) {
    return dir_ / ("log_" + std::to_string(n_logs_++) + "_" + what);
  }

  fs::path dir_;
  int n_logs_ = 0;
};

// ---- train ----

// A model big enough that one step and one checkpoint take milliseconds, small enough that the
// whole run takes well under a second: 18 steps, a checkpoint every 2 (the last 3 kept, so old
// ones are deleted too), an evaluation every 4, every step logged.
std::string write_train_config(const fs::path& dir) {
  {
    std::ofstream f(dir / "data.txt");
    for (int i = 0; i < 300; ++i) f << "line " << i << " of a small corpus for the kill tests\n";
  }
  const fs::path p = dir / "run.yaml";
  std::ofstream f(p);
  f << "model:\n  vocab_size: 257\n  hidden_size: 128\n  intermediate_size: 256\n"
       "  num_hidden_layers: 2\n  num_attention_heads: 2\n  max_position_embeddings: 64\n"
       "data:\n  sources:\n    - path: "
    << (dir / "data.txt").string()
    << "\n      split: line\n  seq_len: 32\n  val_fraction: 0.1\n"
       "train:\n  max_steps: 18\n  micro_batch_size: 4\n  threads: 1\n  save_every: 2\n"
       "  keep_last: 3\n  eval_every: 4\n  eval_steps: 1\n  log_every: 1\n  out_dir: "
    << (dir / "out").string() << "\n";
  return p.string();
}

// metrics.jsonl less its wall-clock and memory fields: what must match bit for bit.
std::vector<std::string> logged_values(const fs::path& out) {
  std::vector<std::string> lines;
  std::ifstream f(out / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    lines.push_back(lmt::test::without_run_dependent_metrics(nlohmann::json::parse(line)).dump());
  }
  return lines;
}

// What a kill interrupted, read from what it left in the run directory.
std::string left_behind(const fs::path& out) {
  if (!fs::exists(out)) return "nothing (killed before it made the run directory)";
  std::vector<std::string> ckpts, partial;
  const fs::path root = out / "checkpoints";
  if (fs::exists(root))
    for (const auto& e : fs::directory_iterator(root)) {
      const std::string n = e.path().filename().string();
      (n.rfind(".tmp-", 0) == 0 ? partial : ckpts).push_back(n);
    }
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename().string().find(".tmp-") != std::string::npos)
      partial.push_back(e.path().filename().string());
  std::sort(ckpts.begin(), ckpts.end());
  const size_t steps = fs::exists(out / "metrics.jsonl") ? logged_values(out).size() : 0;
  return std::to_string(steps) + " metrics lines; checkpoints " + join(ckpts) +
         (partial.empty() ? "" : "; unfinished " + join(partial));
}

TEST_F(KillResume, TrainResumedAfterKillsMatchesAnUninterruptedRun) {
  const std::string cfg = write_train_config(dir_);
  auto args = [&](bool resume) {
    std::vector<std::string> a = {"train", "--config", cfg};
    if (resume) a.push_back("--resume");
    return a;
  };
  // Every run writes to the config's out_dir (checkpoints hold the config, out_dir included);
  // the reference is moved aside.
  const fs::path out = dir_ / "out", ref = dir_ / "ref";
  const Clock::time_point t0 = Clock::now();
  ASSERT_EQ(run_to_end(args(false), log("ref")), 0);
  const double run_s = seconds_since(t0);
  fs::rename(out, ref);
  const std::vector<std::string> ref_values = logged_values(ref);
  ASSERT_EQ(ref_values.size(), 18u + 5u);  // a line per step, per evaluation and the last one
  std::printf("uninterrupted train: %.3f s\n", run_s);

  std::mt19937 rng(lmt::test::fresh_seed("kill_resume.train"));
  // The user's next command after a kill: --resume, or the first command again when --resume
  // says no checkpoint was written yet. The exit code, or nullopt if killed after `limit` s.
  struct Outcome {
    std::optional<int> code;
    std::string output;
  };
  auto next_command = [&](bool first, double limit) -> Outcome {
    if (!first) {
      Child c(args(true), log("resume"));
      std::optional<int> code = c.wait_for(limit);
      if (!code || *code != 2 ||
          c.output().find("--resume: no complete checkpoint") == std::string::npos)
        return {code, c.output()};
      std::printf("    --resume: no checkpoint yet, so the first command again\n");
    }
    Child c(args(false), log("train"));
    std::optional<int> code = c.wait_for(limit);
    return {code, c.output()};  // a child still running is killed here
  };

  for (int trial = 0; trial < 4; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    fs::remove_all(out);
    const std::vector<double> kill_after = delays(rng, run_s, 1 + static_cast<int>(rng() % 3));
    bool first = true;
    for (double d : kill_after) {
      const Outcome o = next_command(first, d);
      first = false;
      if (o.code) {
        std::printf("  trial %d: finished (exit %d) before the kill at %.3f s\n", trial, *o.code,
                    d);
        ASSERT_EQ(*o.code, 0) << o.output;
        continue;
      }
      std::printf("  trial %d: killed at %.3f s: %s\n", trial, d, left_behind(out).c_str());
    }
    const Clock::time_point t1 = Clock::now();
    const Outcome o = next_command(first, kChildTimeoutS);
    std::printf("  trial %d: ran to the end in %.3f s\n", trial, seconds_since(t1));
    ASSERT_TRUE(o.code.has_value()) << "lmtrain hung (killed after " << kChildTimeoutS << " s)";
    ASSERT_EQ(*o.code, 0) << o.output;
    EXPECT_EQ(join(tree_diff(ref, out, {".lock", "metrics.jsonl"})), "(nothing)");
    EXPECT_EQ(logged_values(out), ref_values);
  }
}

// What a kill can leave that no random kill is sure to hit: a checkpoint being deleted (keep_last)
// or written, and a config.yaml or metrics.jsonl being rewritten, all after the last step. A
// --resume that has no step left to run must still clear them (they used to stay for good, and
// the half-deleted checkpoint was a step_N missing its files).
TEST_F(KillResume, ResumeAfterTheLastStepClearsWhatAKillLeft) {
  const std::string cfg = write_train_config(dir_);
  const fs::path out = dir_ / "out";
  ASSERT_EQ(run_to_end({"train", "--config", cfg}, log("train")), 0);
  const std::vector<std::string> finished = files_under(out);
  fs::create_directories(out / "checkpoints" / ".tmp-deleted-step_0000010-999999999");
  std::ofstream(out / "checkpoints" / ".tmp-deleted-step_0000010-999999999" / "config.json")
      << "{}";
  fs::create_directories(out / "checkpoints" / ".tmp-step_0000018-999999999");
  std::ofstream(out / "config.yaml.tmp-999999999") << "model: {}\n";
  std::ofstream(out / "metrics.jsonl.tmp-999999999") << "{}\n";
  ASSERT_EQ(run_to_end({"train", "--config", cfg, "--resume"}, log("resume")), 0);
  EXPECT_EQ(files_under(out), finished);
}

// ---- prepare ----

// Two sources, one through a BPE tokenizer, about 13 MB in all: prepare takes a good part of a
// second here.
std::string write_prepare_config(const fs::path& dir) {
  {
    std::mt19937 rng(7);  // the corpus need not vary; the kill times do
    const char* words[] = {"alpha",  "beta",  "gamma", "delta", "token", "store", "kill",
                           "resume", "shard", "model", "the",   "of",    "and"};
    std::ofstream f(dir / "docs.jsonl");
    for (int i = 0; i < 80000; ++i) {
      f << "{\"text\": \"" << i;
      for (int w = 5 + static_cast<int>(rng() % 36); w > 0; --w) f << ' ' << words[rng() % 13];
      f << "\"}\n";
    }
    std::ofstream t(dir / "lines.txt");
    for (int i = 0; i < 60000; ++i) t << "line " << i << " of the second source\n";
  }
  const fs::path p = dir / "prep.yaml";
  std::ofstream f(p);
  f << "model:\n  vocab_size: 1024\n  hidden_size: 16\n  intermediate_size: 24\n"
       "  num_hidden_layers: 1\n  num_attention_heads: 2\n  max_position_embeddings: 64\n"
       "data:\n  sources:\n    - path: "
    << (dir / "docs.jsonl").string()
    << "\n      format: jsonl\n    - path: " << (dir / "lines.txt").string()
    << "\n      split: line\n      weight: 2\n  tokenizer: " << LMT_TEST_DATA
    << "/tokenizers/bytelevel_bpe.json\n  seq_len: 32\n  val_fraction: 0.1\n";
  return p.string();
}

TEST_F(KillResume, PrepareRerunAfterKillsMatchesAnUninterruptedRun) {
  const std::string cfg = write_prepare_config(dir_);
  auto args = [&](const fs::path& store) {
    return std::vector<std::string>{"prepare", "--quiet", "--config", cfg, "--out", store.string()};
  };
  const fs::path ref = dir_ / "ref" / "store";
  const Clock::time_point t0 = Clock::now();
  ASSERT_EQ(run_to_end(args(ref), log("ref")), 0);
  const double run_s = seconds_since(t0);
  std::printf("uninterrupted prepare: %.3f s\n", run_s);

  std::mt19937 rng(lmt::test::fresh_seed("kill_resume.prepare"));
  const fs::path store = dir_ / "trials" / "store";
  for (int trial = 0; trial < 4; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    // Even trials build the store from nothing; odd ones replace the one the last trial made,
    // so kills also land in the swap of an old store for a new one.
    if (trial % 2 == 0) fs::remove_all(store.parent_path());
    fs::create_directories(store.parent_path());
    for (double d : delays(rng, run_s, 1 + static_cast<int>(rng() % 3))) {
      Child c(args(store), log("prepare"));
      if (std::optional<int> code = c.wait_for(d)) {
        std::printf("  trial %d: finished (exit %d) before the kill at %.3f s\n", trial, *code, d);
        ASSERT_EQ(*code, 0) << c.output();
        continue;
      }
      c.kill();
      std::printf("  trial %d: killed at %.3f s: left %s\n", trial, d,
                  join(top_level(store.parent_path())).c_str());
    }
    ASSERT_EQ(run_to_end(args(store), log("prepare")), 0);
    // Only the store: no STORE.tmp-PID or STORE.old-PID of a killed process.
    EXPECT_EQ(top_level(store.parent_path()), top_level(ref.parent_path()));
    EXPECT_EQ(join(tree_diff(ref, store)), "(nothing)");
  }
}

}  // namespace
