// The device's memory in a training run's metrics on the PJRT backend: on the test plugin, which
// answers PJRT_Device_MemoryStats as LMT_TEST_PLUGIN_MEMORY says, every step line carries the
// plugin's bytes in use and peak; a peak the plugin does not set is absent, not zero; and XLA's
// CPU plugin, which keeps no allocator statistics, gives no device fields at all.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/pjrt/backend.h"
#include "pjrt_test_util.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

class PjrtMemoryMetrics : public test::TestPluginTest {
 protected:
  // A two-step run of a tiny model on the test plugin; its step lines.
  std::vector<nlohmann::json> run_steps(const std::string& name) {
    const fs::path dir = record_dir_ / name;
    fs::create_directories(dir);
    {
      std::ofstream data(dir / "data.txt");
      for (int d = 0; d < 20; ++d) data << (d ? "%\n" : "") << "document " << d << " text\n";
    }
    RunConfig c;
    c.model.vocab_size = 257;
    c.model.hidden_size = 16;
    c.model.intermediate_size = 24;
    c.model.num_hidden_layers = 1;
    c.model.num_attention_heads = 2;
    c.model.max_position_embeddings = 16;
    c.data.sources.push_back(SourceConfig{.path = (dir / "data.txt").string()});
    c.data.seq_len = 16;
    c.data.val_fraction = 0;
    c.train.backend = "pjrt";
    c.train.pjrt_plugin = LMT_TEST_PJRT_PLUGIN;
    c.train.micro_batch_size = 2;
    c.train.max_steps = 2;
    c.train.log_every = 1;
    c.train.eval_every = 0;
    c.train.save_every = 0;
    c.train.out_dir = (dir / "run").string();
    c.logging.console = false;
    c.validate();
    train(c, false);
    std::vector<nlohmann::json> steps;
    std::ifstream in(dir / "run" / "metrics.jsonl");
    for (std::string l; std::getline(in, l);) {
      const auto j = nlohmann::json::parse(l);
      if (j.contains("loss")) steps.push_back(j);
    }
    EXPECT_EQ(steps.size(), 2u);
    return steps;
  }
};

TEST_F(PjrtMemoryMetrics, StepLinesCarryThePluginsDeviceMemory) {
  {
    test::ScopedEnv memory("LMT_TEST_PLUGIN_MEMORY", "123456789,85899345920,");  // past 32 bits
    for (const nlohmann::json& j : run_steps("with_peak")) {
      EXPECT_EQ(j.value("device_bytes_in_use", int64_t{-1}), 123456789) << j.dump();
      EXPECT_EQ(j.value("device_peak_bytes", int64_t{-1}), 85899345920) << j.dump();
      EXPECT_GT(j.value("rss_bytes", int64_t{0}), 1 << 20) << j.dump();
    }
  }
  {
    test::ScopedEnv memory("LMT_TEST_PLUGIN_MEMORY", "4096,,");  // no peak
    for (const nlohmann::json& j : run_steps("without_peak")) {
      EXPECT_EQ(j.value("device_bytes_in_use", int64_t{-1}), 4096) << j.dump();
      EXPECT_FALSE(j.contains("device_peak_bytes")) << j.dump();
    }
  }
}

// The backend's answer itself: the plugin's figures, or nothing where the plugin has none.
TEST_F(PjrtMemoryMetrics, BackendReportsWhatThePluginKeeps) {
  std::unique_ptr<Backend> be = make_pjrt_backend(LMT_TEST_PJRT_PLUGIN);
  {
    test::ScopedEnv memory("LMT_TEST_PLUGIN_MEMORY", "1000,2000,3000");
    const std::optional<DeviceMemoryUse> m = be->device_memory();
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->bytes_in_use, 1000);
    EXPECT_EQ(m->peak_bytes, 2000);
  }
  if (client_->platform_name() == "cpu") {
    EXPECT_FALSE(be->device_memory().has_value());  // XLA's CPU plugin: no allocator statistics
  }
}

}  // namespace
}  // namespace lmt
