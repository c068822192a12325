// What `lmtrain bench` reports of a PJRT device and sends to its compiler, end to end through the
// test plugin (XLA's CPU plugin naming the device and its memory as the test says, recording what
// it is asked to compile): MFU taken against the nominal dense peak of the device kind the plugin
// names (the datasheet figures typed here, not read from lmtrain's table), a measured GEMM peak for
// a device the table does not know, the device's peak memory as the plugin reports it,
// train.deterministic in the compile options of every program the run compiles, and the host's
// time per step over replayed steps.
#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "backend/pjrt/runtime/compile_options.h"
#include "pjrt_test_util.h"
#include "train/bench.h"
#include "train/flops.h"
#include "train/run_config.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;
using test::PjrtTest;
using test::read_file;
using test::ScopedEnv;

// A tiny Llama on the test plugin: its --set overrides of configs/demo.yaml, and its config.
std::vector<std::string> tiny_sets(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.vocab_size=256",
                                  "model.hidden_size=64",
                                  "model.intermediate_size=128",
                                  "model.num_hidden_layers=2",
                                  "model.num_attention_heads=4",
                                  "model.num_key_value_heads=2",
                                  "data.seq_len=32",
                                  "train.micro_batch_size=2",
                                  "train.backend=pjrt",
                                  std::string("train.pjrt_plugin=") + LMT_TEST_PJRT_PLUGIN};
  all.insert(all.end(), sets.begin(), sets.end());
  return all;
}

RunConfig tiny(const std::vector<std::string>& sets) {
  return load_run_config(std::string(LMT_SOURCE_DIR) + "/configs/demo.yaml", tiny_sets(sets));
}

using BenchReport = test::TestPluginTest;

TEST(NominalPeak, DenseFiguresOfTheDatasheets) {
  // NVIDIA H100 SXM: 989.4 TFLOP/s dense bf16, 494.7 TF32; H100 PCIe: 756 and 378; A100: 312 and
  // 156; Cloud TPU v5e: 197 bf16 (f32 products run as bf16 passes there).
  struct Case {
    const char* kind;
    DType dt;
    double tflops;
  };
  for (const Case& c :
       {Case{"NVIDIA H100 80GB HBM3", DType::bf16, 989.4},
        Case{"NVIDIA H100 80GB HBM3", DType::f32, 494.7},
        Case{"NVIDIA H100 PCIe", DType::bf16, 756.0}, Case{"NVIDIA H100 PCIe", DType::f32, 378.0},
        Case{"NVIDIA H200", DType::bf16, 989.4}, Case{"NVIDIA A100-SXM4-80GB", DType::bf16, 312.0},
        Case{"NVIDIA A100-SXM4-80GB", DType::f32, 156.0}, Case{"TPU v5 lite", DType::bf16, 197.0},
        Case{"TPU v5 lite", DType::f32, 197.0}}) {
    SCOPED_TRACE(c.kind);
    const std::optional<PeakFlops> p = nominal_peak(c.kind, c.dt);
    ASSERT_TRUE(p.has_value());
    EXPECT_DOUBLE_EQ(p->flops, c.tflops * 1e12);
    EXPECT_NE(p->source.find("docs/mfu.md"), std::string::npos) << p->source;
  }
  EXPECT_FALSE(nominal_peak("cpu", DType::f32).has_value());
  EXPECT_FALSE(nominal_peak("NVIDIA GeForce RTX 4090", DType::bf16).has_value());
}

// Every compile options message the test plugin recorded: what lmtrain asks of XLA's CPU plugin
// besides is XNNPACK off (backend/pjrt/runtime/compile_options.h).
void expect_compile_options(const fs::path& dir, bool deterministic, int want_programs) {
  const std::string want =
      compile_options(CompileSettings{.deterministic = deterministic, .xnnpack = false});
  int programs = 0;
  for (; fs::exists(dir / ("options_" + std::to_string(programs) + ".pb")); ++programs)
    EXPECT_EQ(read_file(dir / ("options_" + std::to_string(programs) + ".pb")), want)
        << "options_" << programs << ".pb";
  EXPECT_EQ(programs, want_programs);
}

TEST_F(BenchReport, NominalPeakDevicePeakMemoryAndDeterministicOptions) {
  ScopedEnv kind("LMT_TEST_PLUGIN_DEVICE_KIND", "NVIDIA H100 80GB HBM3");
  ScopedEnv memory("LMT_TEST_PLUGIN_MEMORY", "1000,85899345920,85899345921");
  ScopedEnv record("LMT_TEST_PLUGIN_RECORD", record_dir_.c_str());
  const nlohmann::json j = run_bench(tiny({"train.precision=bf16", "train.deterministic=true"}), 1);
  EXPECT_EQ(j["pjrt"]["device_kind"], "NVIDIA H100 80GB HBM3");
  EXPECT_DOUBLE_EQ(j["peak_flops"].get<double>(), 989.4e12);
  EXPECT_NE(j["peak_flops_source"].get<std::string>().find("nominal dense bf16 peak"),
            std::string::npos)
      << j["peak_flops_source"];
  EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), j["achieved_flops"].get<double>() / 989.4e12);
  EXPECT_EQ(j["pjrt"]["device_peak_bytes"].get<int64_t>(), 85899345920);
  expect_compile_options(record_dir_, true, 1);  // one program: the training step
}

TEST_F(BenchReport, MeasuredPeakWhereTheDeviceIsNotInTheTable) {
  ScopedEnv record("LMT_TEST_PLUGIN_RECORD", record_dir_.c_str());
  const nlohmann::json j = run_bench(tiny({}), 1);
  const std::string source = j["peak_flops_source"].get<std::string>();
  EXPECT_NE(source.find("a measured peak of"), std::string::npos) << source;
  EXPECT_GT(j["peak_flops"].get<double>(), 0.0);
  if (j["pjrt"]["platform"] == "cpu") {  // XLA's CPU plugin keeps no allocator statistics
    EXPECT_EQ(j["pjrt"]["device_peak_bytes"], "n/a");
    // nor cuDNN: XLA's lowering computes attention, and the report says why
    EXPECT_EQ(j["pjrt"]["attention"].get<std::string>().rfind("xla: not XLA's CUDA plugin", 0), 0u)
        << j["pjrt"]["attention"];
  }
  expect_compile_options(record_dir_, false, 2);  // the peak's GEMM, the step
}

// train.peak_tflops: MFU against the peak the user gives, a device, and no GEMM run to measure one
// (one program compiled: the step).
TEST_F(BenchReport, AGivenPeakIsTakenAsItIs) {
  ScopedEnv kind("LMT_TEST_PLUGIN_DEVICE_KIND", "NVIDIA H100 80GB HBM3");
  ScopedEnv record("LMT_TEST_PLUGIN_RECORD", record_dir_.c_str());
  const nlohmann::json j = run_bench(tiny({"train.peak_tflops=2.5"}), 1);
  EXPECT_DOUBLE_EQ(j["peak_flops"].get<double>(), 2.5e12);
  EXPECT_EQ(j["peak_flops_source"], "a peak of 2.5 TFLOP/s (train.peak_tflops)");
  EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), j["achieved_flops"].get<double>() / 2.5e12);
  expect_compile_options(record_dir_, false, 1);
}

// The host's time per step (host_ms, host_ms_median: from a step's start to its program's launch)
// in the JSON and in the line bench prints on stderr, timed over steps that all replay the
// program built for an earlier step (Backend::replay) after a warm-up that ends with the first
// replayed step; the CPU backend, which computes in its calls, has none to report.
TEST_F(BenchReport, HostTimePerStepOverReplayedSteps) {
  std::string cmd = std::string(LMT_BINARY) + " bench --steps 3 --config " + LMT_SOURCE_DIR +
                    "/configs/demo.yaml";
  for (const std::string& set : tiny_sets({"train.peak_tflops=1"})) cmd += " --set " + set;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen((cmd + " 2>&1").c_str(), "r"), pclose);
  std::string out;
  char buf[4096];
  for (size_t n; p && (n = fread(buf, 1, sizeof buf, p.get())) > 0;) out.append(buf, n);
  const size_t open = out.find('{'), close = out.find("}\n");
  ASSERT_NE(close, std::string::npos) << out;
  const nlohmann::json j = nlohmann::json::parse(out.substr(open, close + 1 - open));
  EXPECT_GT(j.at("host_ms").get<double>(), 0.0);
  EXPECT_GT(j.at("host_ms_median").get<double>(), 0.0);
  EXPECT_EQ(j.at("steps_replayed"), 3) << "every timed step replayed";
  EXPECT_EQ(j.at("warmup_steps"), 4) << "built: step 0 and the next step of each report slot";
  EXPECT_NE(out.find("host time per step: median "), std::string::npos) << out;
  EXPECT_NE(out.find("3 of the 3 timed steps replayed, after 4 warm-up steps"), std::string::npos)
      << out;

  const nlohmann::json cpu =
      run_bench(tiny({"train.backend=cpu", "train.pjrt_plugin=", "train.peak_tflops=1"}), 1);
  EXPECT_EQ(cpu.at("host_ms"), "n/a");
  EXPECT_EQ(cpu.at("host_ms_median"), "n/a");
  EXPECT_EQ(cpu.at("steps_replayed"), 0);
  EXPECT_EQ(cpu.at("warmup_steps"), 1);
}

}  // namespace
}  // namespace lmt
