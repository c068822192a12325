// One run across two processes (issue 22's bootstrap), with the real lmtrain binary: two ranks
// started by mpirun (or, where it is not installed, given OpenMPI's variables by hand) meet in
// parallel.coordination_dir and create their PJRT clients. The test plugin stands in for the CUDA
// plugin: it takes node_id and num_nodes, records them and the callbacks it got, and exchanges
// keys through lmtrain's store as the CUDA plugin does. Also: a rank killed while the other waits
// for its key (the survivor names the rank and the key, exit 2, timed), and XLA's own CPU plugin,
// which cannot run across processes (one message, exit 2).
//
// `lmtrain bench --compile-only` is the command: it makes the PJRT backend as `train` does
// (backend_options), and needs no data and no run directory of its own.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "backend/pjrt/runtime/plugin.h"
#include "pjrt_test_util.h"

extern char** environ;

namespace lmt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::read_file;

class Multiprocess : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lmt_multiprocess_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "run.yaml")
        << "model: {family: llama, vocab_size: 260, hidden_size: 32, intermediate_size: 64,\n"
           "        num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1,\n"
           "        max_position_embeddings: 64}\n"
           "data: {sources: [{path: "
        << (dir_ / "corpus.jsonl").string()
        << ", format: jsonl}], tokenizer: bytes, seq_len: 32}\n"
           "parallel: {data: 2}\n"
           "train: {backend: pjrt, micro_batch_size: 2, out_dir: "
        << (dir_ / "out").string() << "}\n";
    // 300 documents of a few sentences: some for evaluation (data.val_fraction), the rest for
    // training.
    std::ofstream corpus(dir_ / "corpus.jsonl");
    for (int d = 0; d < 300; ++d)
      corpus << "{\"text\": \"Document " << d << " says that " << d * 7 % 13
             << " ships sailed north, and " << d * 11 % 17 << " came back before the winter.\"}\n";
    corpus.close();
    // Rank r's output in out.r, its exit code in rc.r, the programs the test plugin records (when
    // asked to) in <LMT_TEST_PLUGIN_RECORD>.r.
    std::ofstream(dir_ / "rank.sh")
        << "r=$OMPI_COMM_WORLD_RANK\n"
           "[ -n \"$LMT_TEST_PLUGIN_RECORD\" ] && export "
           "LMT_TEST_PLUGIN_RECORD=$LMT_TEST_PLUGIN_RECORD.$r\n"
           "\"$@\" > "
        << dir_.string() << "/out.$r 2>&1\necho $? > " << dir_.string() << "/rc.$r\n";
    mpirun_ = std::system("command -v mpirun > /dev/null 2>&1") == 0;
    std::printf("launcher: %s\n",
                mpirun_ ? "mpirun" : "none installed; OpenMPI's variables by hand");
  }
  void TearDown() override {
    if (launcher_ > 0) {
      kill(launcher_, SIGKILL);
      waitpid(launcher_, nullptr, 0);
    }
    for (int node : {0, 1})  // a rank the test plugin holds, where a test failed before its kill
      if (const std::string pid = read_file(records() / ("node_" + std::to_string(node) + ".pid"));
          !pid.empty())
        kill(std::stoi(pid), SIGKILL);
    fs::remove_all(dir_);
  }

  fs::path records() const { return dir_ / "records"; }

  // `lmtrain bench --compile-only` on the test config with the given plugin, as two ranks, in
  // the background. Rank 1 is lmtrain itself when `bare_rank1` (so that killing it is what
  // mpirun sees), else wrapped like rank 0.
  void launch(const std::string& plugin, const std::string& env, bool bare_rank1 = false) {
    launch_command(plugin, env, "bench --compile-only", bare_rank1);
  }

  // `lmtrain <command>` (a subcommand and its flags) on the test config, as launch() runs it.
  void launch_command(const std::string& plugin, const std::string& env, const std::string& command,
                      bool bare_rank1 = false) {
    const std::string cmd = std::string(LMT_BINARY) + " " + command + " --config " +
                            (dir_ / "run.yaml").string() + " --set train.pjrt_plugin=" + plugin +
                            " --set parallel.coordination_dir=" + (dir_ / "coord").string() +
                            " --set parallel.coordination_timeout=50";
    const std::string wrapped = "bash " + (dir_ / "rank.sh").string() + " " + cmd;
    const std::string rank1 = bare_rank1 ? cmd : wrapped;
    std::string script =
        "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + env + "; ";
    // --enable-recovery: without it mpirun kills every rank as soon as one dies, before the
    // survivor can say what happened.
    script += mpirun_
                  ? "mpirun --oversubscribe --enable-recovery -n 1 " + wrapped + " : -n 1 " + rank1
                  : "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 " + wrapped +
                        " & OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 " + rank1 + "; wait";
    script += " > " + (dir_ / "launcher.out").string() + " 2>&1";
    const char* argv[] = {"bash", "-c", script.c_str(), nullptr};
    ASSERT_EQ(
        posix_spawn(&launcher_, "/bin/bash", nullptr, nullptr, const_cast<char**>(argv), environ),
        0);
  }

  // Waits up to `limit` for the launcher to end; false if it did not.
  bool wait_launcher(std::chrono::seconds limit) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      if (waitpid(launcher_, nullptr, WNOHANG) == launcher_) {
        launcher_ = -1;
        return true;
      }
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  // Waits up to `limit` for a file to exist.
  static bool wait_for(const fs::path& path, std::chrono::seconds limit) {
    const auto end = Clock::now() + limit;
    while (!fs::exists(path)) {
      if (Clock::now() > end) return false;
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }

  std::string outputs() const {
    return "rank 0:\n" + read_file(dir_ / "out.0") + "\nrank 1:\n" + read_file(dir_ / "out.1") +
           "\nlauncher:\n" + read_file(dir_ / "launcher.out");
  }
  int exit_code(int rank) const {
    const std::string rc = read_file(dir_ / ("rc." + std::to_string(rank)));
    return rc.empty() ? -1 : std::stoi(rc);
  }
  std::string test_plugin_env() const {
    return "LMT_TEST_PLUGIN_WRAP=" + resolve_pjrt_plugin_path() +
           " LMT_TEST_PLUGIN_MULTIPROCESS=" + records().string();
  }

  fs::path dir_;
  bool mpirun_ = false;
  pid_t launcher_ = -1;
};

TEST_F(Multiprocess, TwoRanksExchangeThePluginsKeysAndCreateTheirClients) {
  const auto start = Clock::now();
  launch(LMT_TEST_PJRT_PLUGIN, test_plugin_env());
  ASSERT_TRUE(wait_launcher(240s)) << outputs();
  std::printf("two ranks, exchange and compile: %.1f s\n",
              std::chrono::duration<double>(Clock::now() - start).count());
  EXPECT_EQ(exit_code(0), 0) << outputs();
  EXPECT_EQ(exit_code(1), 0) << outputs();
  for (int node : {0, 1}) {
    const int other = 1 - node;
    const std::string record = read_file(records() / ("node_" + std::to_string(node) + ".txt"));
    SCOPED_TRACE("node " + std::to_string(node) + "'s record:\n" + record);
    EXPECT_NE(record.find("node_id " + std::to_string(node) + "\nnum_nodes 2\n"),
              std::string::npos);
    EXPECT_NE(record.find("kv_get yes\nkv_try_get yes\nkv_put yes\n"), std::string::npos);
    EXPECT_NE(record.find("got lmt_test:node/" + std::to_string(other) + " = hello from node " +
                          std::to_string(other) + "\n"),
              std::string::npos);
    EXPECT_NE(record.find("try_get own key = hello from node " + std::to_string(node) + "\n"),
              std::string::npos);
  }
}

TEST_F(Multiprocess, AKilledRankIsNamedByTheSurvivorWithTheKeyItAwaited) {
  launch(LMT_TEST_PJRT_PLUGIN, test_plugin_env() + " LMT_TEST_PLUGIN_HOLD_NODE=1",
         /*bare_rank1=*/true);
  // Node 1 holds before its put; node 0 has put its key and waits for node 1's.
  ASSERT_TRUE(wait_for(records() / "node_1.pid", 120s)) << outputs();
  ASSERT_TRUE(wait_for(records() / "node_0.pid", 60s)) << outputs();
  std::this_thread::sleep_for(1s);
  const pid_t rank1 = std::stoi(read_file(records() / "node_1.pid"));
  ASSERT_EQ(kill(rank1, SIGKILL), 0);
  const auto killed = Clock::now();
  const bool ended = wait_for(dir_ / "rc.0", 60s);
  const double took = std::chrono::duration<double>(Clock::now() - killed).count();
  std::printf("rank 1 killed: rank 0 exited %.1f s later\n", took);
  ASSERT_TRUE(ended) << "rank 0 still running 60 s after rank 1 was killed\n" << outputs();
  EXPECT_LT(took, 60.0);
  EXPECT_TRUE(wait_launcher(30s)) << outputs();
  EXPECT_EQ(exit_code(0), kExitUserError) << outputs();
  const std::string out = read_file(dir_ / "out.0");
  EXPECT_NE(out.find("lmtrain: error: parallel: lost rank 1"), std::string::npos) << outputs();
  EXPECT_NE(out.find("while rank 0 of 2 waited for key 'lmt_test:node/1'"), std::string::npos)
      << outputs();
}

TEST_F(Multiprocess, XlasCpuPluginCannotRunAcrossProcesses) {
  launch(resolve_pjrt_plugin_path(), "");
  ASSERT_TRUE(wait_launcher(120s)) << outputs();
  for (int rank : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(exit_code(rank), kExitUserError) << outputs();
    const std::string out = read_file(dir_ / ("out." + std::to_string(rank)));
    const std::string want = "cannot run one program across processes";
    EXPECT_NE(out.find("lmtrain: error: PJRT plugin " + resolve_pjrt_plugin_path() + " " + want),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find(want), out.rfind(want)) << "one message\n" << out;
  }
}

// Each process of a run across processes compiles the program one process compiles for the same
// mesh (the global batch, every device of the mesh): the program `--target 2xh100x8` compiles
// for two hosts is the one a 2-host run would run (tests/pjrt/test_deviceless_mesh.cpp).
TEST_F(Multiprocess, EachRankCompilesTheProgramOneProcessCompilesForTheMesh) {
  const fs::path record = dir_ / "record";
  launch(LMT_TEST_PJRT_PLUGIN, test_plugin_env() + " LMT_TEST_PLUGIN_RECORD=" + record.string());
  ASSERT_TRUE(wait_launcher(240s)) << outputs();
  ASSERT_EQ(exit_code(0), 0) << outputs();
  ASSERT_EQ(exit_code(1), 0) << outputs();
  const std::string single =
      "LMT_TEST_PLUGIN_RECORD=" + (dir_ / "single").string() + " " + std::string(LMT_BINARY) +
      " bench --compile-only --config " + (dir_ / "run.yaml").string() +
      " --set train.pjrt_plugin=" + LMT_TEST_PJRT_PLUGIN + " > " + (dir_ / "single.out").string() +
      " 2>&1";
  ASSERT_EQ(std::system(single.c_str()), 0) << read_file(dir_ / "single.out");
  int programs = 0;
  for (; fs::exists(dir_ / "single" / ("program_" + std::to_string(programs) + ".mlir"));
       ++programs) {
    const std::string name = "program_" + std::to_string(programs) + ".mlir";
    const std::string one = read_file(dir_ / "single" / name);
    SCOPED_TRACE(name);
    EXPECT_EQ(read_file(fs::path(record.string() + ".0") / name), one);
    EXPECT_EQ(read_file(fs::path(record.string() + ".1") / name), one);
  }
  EXPECT_GT(programs, 0);
  EXPECT_FALSE(fs::exists(fs::path(record.string() + ".0") /
                          ("program_" + std::to_string(programs) + ".mlir")));
}

// The steps of metrics.jsonl, in order (eval lines and warnings left out).
std::vector<int64_t> logged_steps(const fs::path& run_dir) {
  std::vector<int64_t> steps;
  std::ifstream f(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss") && j.contains("step"))
      steps.push_back(j["step"].get<int64_t>());
  }
  return steps;
}

// The host side of one run across two processes, with the test plugin standing in for each
// process's devices (each rank's program runs on its own CPU devices: XLA's CPU plugin cannot run
// one program across processes, so the numerics of a cross-process step are not what is tested
// here; tests/train/test_run_processes.cpp checks on the CPU backend that the ranks' rows make up
// the global batch). Rank 0 prepares the data, writes config.yaml, metrics and the checkpoints;
// rank 1 writes none of them, holds its own lock, and both resume from rank 0's checkpoint.
TEST_F(Multiprocess, TwoRanksTrainAndResumeWithRankZeroTheOnlyWriter) {
  const std::string train =
      "train --set train.max_steps=4 --set train.save_every=2 --set train.eval_every=2 "
      "--set train.log_every=1 --set train.sample_tokens=0";
  launch_command(LMT_TEST_PJRT_PLUGIN, test_plugin_env(), train);
  ASSERT_TRUE(wait_launcher(300s)) << outputs();
  ASSERT_EQ(exit_code(0), 0) << outputs();
  ASSERT_EQ(exit_code(1), 0) << outputs();
  const fs::path out = dir_ / "out";
  EXPECT_EQ(logged_steps(out), (std::vector<int64_t>{1, 2, 3, 4})) << "one writer of metrics";
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "step_0000002" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "step_0000004" / "state.json"));
  EXPECT_TRUE(fs::exists(out / "config.yaml"));
  EXPECT_TRUE(fs::exists(out / ".lock"));
  EXPECT_TRUE(fs::exists(out / ".lock.rank1")) << "rank 1's own run lock";
  const std::string rank0 = read_file(dir_ / "out.0"), rank1 = read_file(dir_ / "out.1");
  EXPECT_NE(rank0.find("eval       4 | val loss"), std::string::npos) << rank0;
  EXPECT_EQ(rank1.find("loss"), std::string::npos) << "rank 1 logs nothing\n" << rank1;

  const std::string record0 = read_file(records() / "node_0.txt");
  fs::remove_all(records());
  fs::remove(dir_ / "rc.0");
  fs::remove(dir_ / "rc.1");
  launch_command(LMT_TEST_PJRT_PLUGIN, test_plugin_env(),
                 train + " --resume --set train.max_steps=6");
  ASSERT_TRUE(wait_launcher(300s)) << outputs();
  ASSERT_EQ(exit_code(0), 0) << outputs();
  ASSERT_EQ(exit_code(1), 0) << outputs();
  EXPECT_EQ(logged_steps(out), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_NE(read_file(dir_ / "out.0")
                .find("resumed from " + (out / "checkpoints" / "step_0000004").string()),
            std::string::npos)
      << outputs();
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "step_0000006" / "state.json"));
  EXPECT_NE(record0.find("num_nodes 2"), std::string::npos) << record0;
}

// Rank 0 cannot write its checkpoint (train.out_dir/checkpoints is a file): rank 0 stops with its
// error, and rank 1, which waited for that checkpoint, stops with rank 0's error named; both exit
// 2, neither hangs.
TEST_F(Multiprocess, ACheckpointRankZeroCannotWriteStopsEveryRank) {
  fs::create_directories(dir_ / "out");
  std::ofstream(dir_ / "out" / "checkpoints") << "not a directory\n";
  launch_command(LMT_TEST_PJRT_PLUGIN, test_plugin_env(),
                 "train --set train.max_steps=4 --set train.save_every=2 --set train.eval_every=0 "
                 "--set train.sample_tokens=0");
  ASSERT_TRUE(wait_launcher(300s)) << outputs();
  EXPECT_EQ(exit_code(0), kExitUserError) << outputs();
  EXPECT_EQ(exit_code(1), kExitUserError) << outputs();
  const std::string rank1 = read_file(dir_ / "out.1");
  EXPECT_NE(rank1.find("lmtrain: error: parallel: rank 0 failed at the checkpoint at step 2, so "
                       "rank 1 of 2 stops: "),
            std::string::npos)
      << outputs();
  EXPECT_FALSE(fs::exists(dir_ / "out" / "checkpoints" / "step_0000002"));
}

// Rank 1's run lock is held (another run on the directory): rank 1 stops naming train.out_dir,
// and rank 0, waiting for it in the plugin's exchange, names rank 1; both exit 2.
TEST_F(Multiprocess, ARankWhoseRunLockIsHeldStopsAndTheOtherNamesIt) {
  fs::create_directories(dir_ / "out");
  const int held = ::open((dir_ / "out" / ".lock.rank1").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX | LOCK_NB), 0);
  launch_command(LMT_TEST_PJRT_PLUGIN, test_plugin_env(),
                 "train --set train.max_steps=2 --set train.sample_tokens=0");
  const bool ended = wait_launcher(120s);
  ::close(held);
  ASSERT_TRUE(ended) << outputs();
  EXPECT_EQ(exit_code(1), kExitUserError) << outputs();
  EXPECT_NE(read_file(dir_ / "out.1")
                .find("lmtrain: error: train.out_dir: '" + (dir_ / "out").string() + "' is in use"),
            std::string::npos)
      << outputs();
  EXPECT_EQ(exit_code(0), kExitUserError) << outputs();
  EXPECT_NE(read_file(dir_ / "out.0").find("lmtrain: error: parallel: rank 1 ended"),
            std::string::npos)
      << outputs();
}

}  // namespace
}  // namespace lmt
