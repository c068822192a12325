// A checkpoint save that fails after it began writing (here: the tokenizer it must copy is gone)
// is a UserError naming the cause and leaves no temporary directory in checkpoints/; the next save
// succeeds and is the only entry there.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "export/export_test_util.h"
#include "io/io_test_util.h"
#include "train/checkpoint.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointSave, AFailedSaveLeavesNoTemporaryDirectory) {
  CpuBackend be;
  Transformer m(&be, test::tiny_config("llama"));
  m.init_weights(7);
  const fs::path run_dir = test::temp_dir() / "failed_save";
  fs::remove_all(run_dir);
  CheckpointState s;
  s.loader = nlohmann::json::object();
  s.step = 5;
  s.tokenizer = (run_dir / "gone.json").string();
  test::expect_user_error([&] { save_checkpoint(run_dir.string(), m, nullptr, nullptr, s, "", 3); },
                          {"checkpoint: cannot copy the tokenizer", "gone.json"});
  auto entries = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(run_dir / "checkpoints"))
      names.push_back(e.path().filename().string());
    return names;
  };
  EXPECT_EQ(entries(), std::vector<std::string>{});
  s.tokenizer = "bytes";
  save_checkpoint(run_dir.string(), m, nullptr, nullptr, s, "", 3);
  EXPECT_EQ(entries(), std::vector<std::string>{"step_0000005"});
}

}  // namespace
}  // namespace lmt
