// Memory in the metrics: every logged step carries the process's resident set (now and peak) in
// metrics.jsonl, TensorBoard's memory/ group and the console line; the device's fields are absent
// on the CPU backend (tests/pjrt/test_memory_metrics_pjrt.cpp gives them a device).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/timer.h"
#include "io/io_test_util.h"
#include "train/metrics.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<nlohmann::json> out;
  for (std::string l; std::getline(in, l);) out.push_back(nlohmann::json::parse(l));
  return out;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ProcessMemory, ResidentSetNowAndPeak) {
  const ProcessMemory before = process_memory();
  EXPECT_GT(before.rss_bytes, 1 << 20);
  EXPECT_GE(before.peak_rss_bytes, before.rss_bytes);
  // 256 MiB touched page by page: the resident set and its peak grow by about that much.
  constexpr size_t kBytes = size_t{256} << 20;
  std::vector<char> block(kBytes);
  std::memset(block.data(), 1, kBytes);
  const ProcessMemory during = process_memory();
  EXPECT_GE(during.rss_bytes, before.rss_bytes + static_cast<int64_t>(kBytes / 2));
  EXPECT_GE(during.peak_rss_bytes, during.rss_bytes);
  EXPECT_EQ(block[kBytes - 1], 1);
}

// The four fields in each sink when a step has them, none of them when it has none.
TEST(MemoryMetrics, FieldsInJsonlTensorBoardAndConsole) {
  const fs::path dir = test::temp_dir() / "memory_fields";
  fs::remove_all(dir);
  fs::create_directories(dir);
  constexpr int64_t kGiB = int64_t{1} << 30;
  std::string tb, console;
  {
    Metrics m(dir.string(), LoggingConfig{.console = true, .tensorboard = true}, -1);
    tb = m.tensorboard_path();
    testing::internal::CaptureStdout();
    m.log_step(StepMetrics{.step = 1,
                           .loss = 2.0,
                           .rss_bytes = kGiB,
                           .rss_peak_bytes = 2 * kGiB,
                           .device_bytes_in_use = 3 * kGiB + kGiB / 2,
                           .device_peak_bytes = 5 * kGiB});
    m.log_step(StepMetrics{.step = 2, .loss = 2.0, .device_bytes_in_use = 7});
    m.log_step(StepMetrics{.step = 3, .loss = 2.0});
    console = testing::internal::GetCapturedStdout();
  }
  const std::vector<nlohmann::json> j = read_lines(dir / "metrics.jsonl");
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["rss_bytes"], kGiB);
  EXPECT_EQ(j[0]["rss_peak_bytes"], 2 * kGiB);
  EXPECT_EQ(j[0]["device_bytes_in_use"], 3 * kGiB + kGiB / 2);
  EXPECT_EQ(j[0]["device_peak_bytes"], 5 * kGiB);
  EXPECT_EQ(j[1]["device_bytes_in_use"], 7);
  for (const char* absent : {"rss_bytes", "rss_peak_bytes", "device_peak_bytes"})
    EXPECT_FALSE(j[1].contains(absent)) << absent;
  for (const char* absent :
       {"rss_bytes", "rss_peak_bytes", "device_bytes_in_use", "device_peak_bytes"})
    EXPECT_FALSE(j[2].contains(absent)) << absent;
  EXPECT_NE(console.find("| RSS 1.00 GiB | device 3.50 GiB (peak 5.00)\n"), std::string::npos)
      << console;
  EXPECT_NE(console.find("| device 0.00 GiB\n"), std::string::npos) << console;
  const std::string events = read_all(tb);  // their values: the TensorBoard reference test
  for (const char* tag : {"memory/rss_gib", "memory/rss_peak_gib", "memory/device_in_use_gib",
                          "memory/device_peak_gib"})
    EXPECT_NE(events.find(tag), std::string::npos) << tag;
}

// A training run on the CPU backend: every step line has the process's memory, plausible, and no
// device memory (the CPU backend has none apart from the process's).
TEST(MemoryMetrics, CpuRunLogsTheProcessMemory) {
  const fs::path dir = test::temp_dir() / "memory_cpu_run";
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream data(dir / "data.txt");
    for (int d = 0; d < 40; ++d) data << (d ? "%\n" : "") << "document number " << d << " here\n";
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
  c.train.micro_batch_size = 2;
  c.train.max_steps = 3;
  c.train.log_every = 1;
  c.train.eval_every = 0;
  c.train.out_dir = (dir / "run").string();
  c.logging.console = false;
  c.validate();
  train(c, false);
  int steps = 0;
  for (const nlohmann::json& j : read_lines(dir / "run" / "metrics.jsonl")) {
    if (!j.contains("loss")) continue;
    ++steps;
    ASSERT_TRUE(j.contains("rss_bytes")) << j.dump();
    ASSERT_TRUE(j.contains("rss_peak_bytes")) << j.dump();
    EXPECT_GT(j["rss_bytes"].get<int64_t>(), 1 << 20) << j.dump();
    EXPECT_GE(j["rss_peak_bytes"].get<int64_t>(), j["rss_bytes"].get<int64_t>()) << j.dump();
    EXPECT_FALSE(j.contains("device_bytes_in_use")) << j.dump();
    EXPECT_FALSE(j.contains("device_peak_bytes")) << j.dump();
  }
  EXPECT_EQ(steps, 3);
}

}  // namespace
}  // namespace lmt
