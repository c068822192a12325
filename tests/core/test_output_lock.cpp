// One training process per run directory: a second lock on a held directory is a UserError naming
// the directory and the owner's pid; the lock is free again once its holder is gone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/output_lock.h"
#include "io/io_test_util.h"

namespace lmt {
namespace {

TEST(RunDirLock, SecondHolderIsRefusedUntilTheFirstIsGone) {
  const std::string dir = (test::temp_dir() / "run_lock").string();
  std::filesystem::create_directories(dir);
  auto first = std::make_unique<RunDirLock>(dir);
  test::expect_user_error([&] { RunDirLock second(dir); },
                          {"train.out_dir: '" + dir + "' is in use by another lmtrain process",
                           "(pid " + std::to_string(::getpid()) + ")"});
  first.reset();
  EXPECT_NO_THROW(RunDirLock again(dir));
}

TEST(RunDirLock, MissingDirectoryIsAUserError) {
  test::expect_user_error([] { RunDirLock l("/nonexistent/lmtrain/run"); },
                          {"train.out_dir: cannot create '/nonexistent/lmtrain/run/.lock'"});
}

}  // namespace
}  // namespace lmt
