// The processes of one run and their store (src/parallel): rank and count from the launcher's
// variables; put and get between two real processes (the second one forked); an earlier run's
// files in the directory, which this run must not take for its own; a get that times out, and a
// join that does, naming the key or the rank; a peer killed while a get waits for its key, named
// with the key in about DirectoryStore::kLostAfter; a peer slower than that but alive, not taken
// for lost; a peer that ended, named at once.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "core/error.h"
#include "parallel/directory_store.h"
#include "parallel/process_group.h"
#include "test_util.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test::ScopedEnv;
using test::user_error_of;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TEST(ProcessGroup, FromTheLaunchersVariables) {
  {
    ScopedEnv a("OMPI_COMM_WORLD_RANK", nullptr), b("OMPI_COMM_WORLD_SIZE", nullptr),
        c("PMI_RANK", nullptr), d("PMI_SIZE", nullptr);
    const ProcessGroup g = process_group_from_env();
    EXPECT_EQ(g.rank, 0);
    EXPECT_EQ(g.count, 1);
    EXPECT_FALSE(g.several());
    {
      ScopedEnv r("PMI_RANK", "2"), s("PMI_SIZE", "3");
      const ProcessGroup p = process_group_from_env();
      EXPECT_EQ(p.rank, 2);
      EXPECT_EQ(p.count, 3);
      EXPECT_EQ(p.source, "PMI_RANK/SIZE");
      ScopedEnv r2("OMPI_COMM_WORLD_RANK", "1"), s2("OMPI_COMM_WORLD_SIZE", "2");
      const ProcessGroup o = process_group_from_env();  // OpenMPI's first
      EXPECT_EQ(o.rank, 1);
      EXPECT_EQ(o.count, 2);
      EXPECT_TRUE(o.several());
      EXPECT_EQ(o.source, "OMPI_COMM_WORLD_RANK/SIZE");
    }
    {
      ScopedEnv r("OMPI_COMM_WORLD_RANK", "0"), s("OMPI_COMM_WORLD_SIZE", "1");
      EXPECT_FALSE(process_group_from_env().several());  // one process: nothing changes
    }
    {
      ScopedEnv r("OMPI_COMM_WORLD_RANK", "x"), s("OMPI_COMM_WORLD_SIZE", "2");
      EXPECT_NE(user_error_of(process_group_from_env).find("OMPI_COMM_WORLD_RANK='x'"),
                std::string::npos);
    }
    {
      ScopedEnv r("OMPI_COMM_WORLD_RANK", "2"), s("OMPI_COMM_WORLD_SIZE", "2");
      EXPECT_NE(user_error_of(process_group_from_env).find("rank 2 of 2"), std::string::npos);
    }
  }
}

class DirectoryStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("lmt_store_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override {
    for (pid_t pid : children_) {  // a child a failed test left behind
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    fs::remove_all(dir_);
  }

  // Rank `rank` of `count` in a forked process running `body` on its store; its exit code is 0
  // when body returns true.
  pid_t fork_rank(int rank, int count, std::function<bool(DirectoryStore&)> body,
                  std::chrono::seconds timeout = 20s) {
    const pid_t pid = fork();
    if (pid == 0) {
      bool ok = false;
      try {
        DirectoryStore store(dir_, {rank, count, "test"}, timeout);
        ok = body(store);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      }
      std::fflush(stderr);
      _exit(ok ? 0 : 1);
    }
    children_.push_back(pid);
    return pid;
  }
  int exit_code(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    std::erase(children_, pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  fs::path dir_;
  std::vector<pid_t> children_;
};

TEST_F(DirectoryStoreTest, TwoProcessesPutAndGet) {
  const pid_t child = fork_rank(1, 2, [](DirectoryStore& s) {
    s.put("gpu:local_topology/1", std::string("b\0b", 3));
    return s.get("gpu:local_topology/0") == "a" && !s.try_get("nobody/put/this");
  });
  DirectoryStore store(dir_, {0, 2, "test"}, 20s);
  store.put("gpu:local_topology/0", "a");
  EXPECT_EQ(store.get("gpu:local_topology/1"), std::string("b\0b", 3));
  EXPECT_EQ(store.try_get("gpu:local_topology/1"), std::string("b\0b", 3));
  EXPECT_EQ(exit_code(child), 0);
}

TEST_F(DirectoryStoreTest, AnEarlierRunsFilesAreNotThisRunsKeys) {
  // What a run killed in the same directory leaves: its run file, rank 1's join and ack, its
  // keys, its heartbeats and its joined mark.
  const std::string old_id = "0123456789abcdef";
  fs::create_directories(dir_ / old_id / "kv");
  std::ofstream(dir_ / "run") << old_id << " 2\nfeedfeedfeedfeed\n";
  std::ofstream(dir_ / "join.1") << "feedfeedfeedfeed\n";
  std::ofstream(dir_ / "ack.1") << old_id << " feedfeedfeedfeed";
  std::ofstream(dir_ / old_id / "kv" / "k_x") << "stale";
  std::ofstream(dir_ / old_id / "alive.1") << "ended";
  std::ofstream(dir_ / old_id / "joined");

  // Rank 1 starts first and finds only the old files for a while.
  const pid_t child = fork_rank(1, 2, [](DirectoryStore& s) {
    std::this_thread::sleep_for(300ms);
    s.put("x", "fresh");
    s.put("run of 1", s.run_id());
    return s.get("done") == "yes";
  });
  std::this_thread::sleep_for(500ms);
  DirectoryStore store(dir_, {0, 2, "test"}, 20s);
  EXPECT_NE(store.run_id(), old_id);
  EXPECT_EQ(store.get("x"), "fresh");
  EXPECT_EQ(store.get("run of 1"), store.run_id());
  EXPECT_FALSE(fs::exists(dir_ / old_id)) << "rank 0 removes an earlier run's directory";
  store.put("done", "yes");
  EXPECT_EQ(exit_code(child), 0);
}

TEST_F(DirectoryStoreTest, TimeoutNamesTheKeyAndTheSetting) {
  const pid_t child = fork_rank(1, 2, [](DirectoryStore&) {
    std::this_thread::sleep_for(3s);
    return true;
  });
  DirectoryStore store(dir_, {0, 2, "test"}, 1s);
  const auto start = Clock::now();
  const std::string m = user_error_of([&] { store.get("nobody/puts/this"); });
  EXPECT_LT(seconds_since(start), 2.5);
  EXPECT_NE(m.find("rank 0 of 2 waited 1000 ms (parallel.coordination_timeout)"), std::string::npos)
      << m;
  EXPECT_NE(m.find("'nobody/puts/this'"), std::string::npos) << m;
  EXPECT_EQ(store.failure(), m);
  // A plugin's own, shorter limit.
  EXPECT_NE(user_error_of([&] { store.get("k", 200ms); }).find("200 ms (the plugin's limit)"),
            std::string::npos);
  EXPECT_EQ(exit_code(child), 0);
}

TEST_F(DirectoryStoreTest, JoinTimeoutNamesTheMissingRank) {
  const std::string m0 = user_error_of([&] { DirectoryStore(dir_, {0, 2, "MPI"}, 1s); });
  EXPECT_NE(m0.find("for rank 1 to join: was it started (MPI)"), std::string::npos) << m0;
  fs::remove_all(dir_);
  const std::string m1 = user_error_of([&] { DirectoryStore(dir_, {1, 2, "MPI"}, 1s); });
  EXPECT_NE(m1.find("rank 1 of 2 waited 1 s"), std::string::npos) << m1;
  EXPECT_NE(m1.find("for rank 0 to start the run"), std::string::npos) << m1;
}

TEST_F(DirectoryStoreTest, AKilledPeerIsNamedWithTheKeyAwaited) {
  const pid_t child = fork_rank(1, 2, [](DirectoryStore&) {
    pause();  // until killed
    return false;
  });
  DirectoryStore store(dir_, {0, 2, "test"}, 60s);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  const auto start = Clock::now();
  const std::string m = user_error_of([&] { store.get("gpu:global_topology"); });
  const double took = seconds_since(start);
  std::printf("a killed peer was found lost in %.1f s\n", took);
  EXPECT_NE(m.find("lost rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find("while rank 0 of 2 waited for key 'gpu:global_topology'"), std::string::npos)
      << m;
  EXPECT_LT(took, DirectoryStore::kLostAfter.count() + 3.0);
  EXPECT_GE(took, DirectoryStore::kLostAfter.count() - 1.0);
  exit_code(child);
}

TEST_F(DirectoryStoreTest, APeerSlowerThanTheLivenessLimitIsNotLost) {
  const pid_t child = fork_rank(1, 2, [](DirectoryStore& s) {
    std::this_thread::sleep_for(DirectoryStore::kLostAfter + 2s);  // its heartbeat goes on
    s.put("late", "here");
    return true;
  });
  DirectoryStore store(dir_, {0, 2, "test"}, 60s);
  EXPECT_EQ(store.get("late"), "here");
  EXPECT_EQ(exit_code(child), 0);
}

TEST_F(DirectoryStoreTest, APeerThatEndedIsNamedAtOnce) {
  const pid_t child = fork_rank(1, 2, [](DirectoryStore&) { return true; });
  DirectoryStore store(dir_, {0, 2, "test"}, 60s);
  EXPECT_EQ(exit_code(child), 0);
  const auto start = Clock::now();
  const std::string m = user_error_of([&] { store.get("k"); });
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_NE(m.find("rank 1 ended"), std::string::npos) << m;
  EXPECT_NE(m.find("'k'"), std::string::npos) << m;
}

}  // namespace
}  // namespace lmt
