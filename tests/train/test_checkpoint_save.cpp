// A checkpoint save that fails after it began writing (here: the tokenizer it must copy is gone)
// is a UserError naming the cause and leaves no temporary directory in checkpoints/; the next save
// succeeds and is the only entry there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "export/export_test_util.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

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
  test::expect_user_error([&] { save_checkpoint(run_dir.string(), m, {}, s, "", 3); },
                          {"checkpoint: cannot copy the tokenizer", "gone.json"});
  auto entries = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(run_dir / "checkpoints"))
      names.push_back(e.path().filename().string());
    return names;
  };
  EXPECT_EQ(entries(), std::vector<std::string>{});
  s.tokenizer = "bytes";
  save_checkpoint(run_dir.string(), m, {}, s, "", 3);
  EXPECT_EQ(entries(), std::vector<std::string>{"step_0000005"});
}

// A checkpoint a reader holds (an export of a run that is saving) is not pruned under it; the
// next prune after the reader is done deletes it.
TEST(CheckpointSave, APruneLeavesAHeldCheckpointForLater) {
  CpuBackend be;
  Transformer m(&be, test::tiny_config("llama"));
  m.init_weights(7);
  const fs::path run_dir = test::temp_dir() / "held_prune";
  fs::remove_all(run_dir);
  CheckpointState s;
  s.loader = nlohmann::json::object();
  s.tokenizer = "bytes";
  auto names = [&] {
    std::vector<std::string> n;
    for (const auto& e : fs::directory_iterator(run_dir / "checkpoints"))
      n.push_back(e.path().filename().string());
    std::sort(n.begin(), n.end());
    return n;
  };
  s.step = 1;
  const std::string first = save_checkpoint(run_dir.string(), m, {}, s, "", 1);
  {
    CheckpointHold hold;
    ASSERT_TRUE(hold.take(first));
    s.step = 2;
    save_checkpoint(run_dir.string(), m, {}, s, "", 1);
    EXPECT_EQ(names(), (std::vector<std::string>{"step_0000001", "step_0000002"}));
  }
  prune_checkpoints(run_dir.string(), 1);
  EXPECT_EQ(names(), std::vector<std::string>{"step_0000002"});
  CheckpointHold gone;
  EXPECT_FALSE(gone.take(first));
}

// Non-finite weights or moments never reach a checkpoint (NonFiniteError, exit 3, nothing written)
// and a checkpoint that holds them (written by another tool, or damaged) does not load.
TEST(CheckpointSave, NonFiniteWeightsAreRefusedAtSaveAndAtLoad) {
  CpuBackend be;
  const ModelConfig cfg = test::tiny_config("llama");
  Transformer m(&be, cfg);
  m.init_weights(7);
  const fs::path run_dir = test::temp_dir() / "non_finite";
  fs::remove_all(run_dir);
  CheckpointState s;
  s.loader = nlohmann::json::object();
  s.tokenizer = "bytes";
  s.step = 2;
  const std::string good = save_checkpoint(run_dir.string(), m, {}, s, "", 0);

  const ParamInfo& victim = m.params()[3];
  static_cast<float*>(m.params_data())[victim.offset + 1] = std::nanf("");
  s.step = 3;
  try {
    save_checkpoint(run_dir.string(), m, {}, s, "", 0);
    ADD_FAILURE() << "expected a NonFiniteError";
  } catch (const NonFiniteError& e) {
    EXPECT_NE(std::string(e.what()).find("step 3: the weight of " + victim.name + " is not finite"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(run_dir / "checkpoints" / "step_0000003"));

  // The same NaN written into the good checkpoint's weights file: loading refuses it.
  SafetensorsWriter w;
  for (const ParamInfo& p : m.params())
    w.add(p.name, DType::f32, p.shape, static_cast<const float*>(m.params_data()) + p.offset);
  w.write(good + "/model.safetensors");
  Transformer fresh(&be, cfg);
  test::expect_user_error([&] { load_checkpoint(good, fresh, {}); },
                          {good + "' is damaged: model.safetensors"});
  test::reseal_checksums(good);  // a NaN recorded as it is: refused all the same
  test::expect_user_error([&] { load_checkpoint(good, fresh, {}); },
                          {good + ": the weight of " + victim.name + " is not finite"});
}

}  // namespace
}  // namespace lmt
