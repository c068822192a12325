// Compiling for a GPU that is not here (`--target`): the training step compiled through XLA's
// CUDA PJRT plugin for an H200's target config, with no GPU and no client: the device kind and
// platform the target names, cuDNN attention as on the real GPU, XLA's memory against the
// device's, and the kernels one step launches counted from XLA's thunk sequence (runtime/
// launches.h, also checked here on a hand-written sequence). Bad input (an unknown target, a file
// that is no target config, no CUDA plugin, no ptxas) is one message and exit 2. The CUDA plugin,
// ptxas and libdevice come from the environment scripts/setup.sh makes; without them these tests
// fail and say so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backend/pjrt/runtime/launches.h"
#include "cli/cli_util.h"
#include "train/bench.h"
#include "train/run_config.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

RunConfig small_llama(const std::string& precision) {
  RunConfig cfg;
  ModelConfig& m = cfg.model;
  m.family = "llama";
  m.vocab_size = 512, m.hidden_size = 128, m.intermediate_size = 256;
  m.num_hidden_layers = 2, m.num_attention_heads = 4, m.num_key_value_heads = 2;
  m.max_position_embeddings = 256;
  cfg.data.seq_len = 128;
  cfg.data.store = "unused";  // bench feeds random tokens
  cfg.train.micro_batch_size = 4;
  cfg.train.precision = precision;
  cfg.validate();
  return cfg;
}

int64_t kind(const nlohmann::json& launches, const std::string& k) {
  const nlohmann::json& by = launches.at("by_kind");
  return by.contains(k) ? by.at(k).get<int64_t>() : 0;
}

TEST(Deviceless, TheStepCompilesForAnH200WithoutOne) {
  const CompileTarget h200 = compile_target("h200", "--target");
  EXPECT_EQ(h200.device_kind, "NVIDIA H200 141GB HBM3e");
  EXPECT_EQ(h200.device_memory, int64_t{151397597184});
  const nlohmann::json j = run_bench(small_llama("bf16"), 0, true, h200);
  const nlohmann::json& p = j.at("pjrt");
  EXPECT_EQ(p.at("platform"), "cuda");
  EXPECT_EQ(p.at("device_kind"), "NVIDIA H200 141GB HBM3e");
  EXPECT_EQ(p.at("attention"), "cudnn");  // the target's platform decides, as a real GPU's would
  const nlohmann::json& m = p.at("step_memory");
  EXPECT_GT(m.at("argument_bytes").get<int64_t>(), 0);
  EXPECT_GT(m.at("temp_bytes").get<int64_t>(), 0);
  const nlohmann::json& fit = p.at("device_fit");
  EXPECT_EQ(fit.at("device_bytes").get<int64_t>(), h200.device_memory);
  EXPECT_DOUBLE_EQ(fit.at("allocator_fraction").get<double>(), 0.75);
  EXPECT_TRUE(fit.at("fits").get<bool>());
  const nlohmann::json& l = p.at("launches");
  // Two layers: each layer's attention forward and backward are cuDNN calls; every projection,
  // its input and weight gradients and the head's are matrix products.
  EXPECT_EQ(kind(l, "cudnn"), 4);
  EXPECT_GE(kind(l, "matmul"), 2 * 3 * 4);
  int64_t sum = 0;
  for (const auto& [k, n] : l.at("by_kind").items()) sum += n.get<int64_t>();
  EXPECT_EQ(sum, l.at("total").get<int64_t>());
  EXPECT_GE(l.at("total").get<int64_t>(), l.at("static_thunks").get<int64_t>());
  EXPECT_EQ(l.at("loops_without_trip_count").get<int64_t>(), 0);
}

// lmtrain's bf16 step on the three shapes of docs/performance.md (GPT-2 124M B16 T1024,
// Llama-3.2-1B's shape at B4 T2048 and at B1 T32768 checkpointed), compiled for an H200, launches
// no more kernels a step than the JAX peer's (cuDNN attention) and needs no more memory: JAX's
// figures for the pinned plugin in tests/data/deviceless/jax_h200.json, made by
// bench/jax_deviceless_figures.py (run it again when the plugin changes).
TEST(Deviceless, TheThreeStepsLaunchAndHoldNoMoreThanJaxs) {
  const std::string root = LMT_SOURCE_DIR;
  std::ifstream in(root + "/tests/data/deviceless/jax_h200.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json jax = nlohmann::json::parse(in);
  const CompileTarget target = compile_target(jax.at("target").get<std::string>(), "--target");
  ASSERT_EQ(jax.at("shapes").size(), 3u);
  for (const nlohmann::json& shape : jax.at("shapes")) {
    const std::string name = shape.at("name").get<std::string>();
    SCOPED_TRACE(name + " (JAX's figures: " + jax.at("plugin").get<std::string>() + ", " +
                 jax.at("date").get<std::string>() + ")");
    std::vector<std::string> sets = shape.at("sets").get<std::vector<std::string>>();
    sets.insert(sets.end(), {"train.backend=pjrt", "train.precision=bf16"});
    if (shape.at("checkpointed").get<bool>()) sets.push_back("train.activation_checkpointing=true");
    const RunConfig cfg = load_run_config(root + "/" + shape.at("config").get<std::string>(), sets);
    const nlohmann::json p = run_bench(cfg, 0, true, target).at("pjrt");
    const int64_t launches = p.at("launches").at("total").get<int64_t>();
    const int64_t bytes = p.at("device_fit").at("step_bytes").get<int64_t>();
    const int64_t jax_launches = shape.at("launches").get<int64_t>();
    const int64_t jax_bytes = shape.at("step_bytes").get<int64_t>();
    std::printf("%s: launches %lld (JAX %lld), memory %.2f GiB (JAX %.2f)\n", name.c_str(),
                static_cast<long long>(launches), static_cast<long long>(jax_launches),
                static_cast<double>(bytes) / (1 << 30), static_cast<double>(jax_bytes) / (1 << 30));
    EXPECT_LE(launches, jax_launches);
    EXPECT_LE(bytes, jax_bytes);
    EXPECT_EQ(p.at("launches").at("loops_without_trip_count").get<int64_t>(), 0);
  }
}

TEST(Deviceless, AStepTooLargeForTheDeviceDoesNotFit) {
  const RunConfig cfg = small_llama("f32");
  CompileTarget small = compile_target("h100", "--target");
  small.device_memory = int64_t{1} << 20;  // 1 MiB: nothing fits
  const nlohmann::json fit = run_bench(cfg, 0, true, small).at("pjrt").at("device_fit");
  EXPECT_FALSE(fit.at("fits").get<bool>());
  EXPECT_GT(fit.at("step_bytes").get<int64_t>(), fit.at("allocator_bytes").get<int64_t>());
}

// A sequence as XLA writes it: a loop of 3 trips whose body holds a fused thunk with a part and a
// loop of 4 trips; an asynchronous start and its done; the loops' trip counts in the optimized
// HLO, found through the thunks' metadata.
TEST(KernelLaunches, LoopsCountTheirTripsAndPartsCountWithTheirThunk) {
  const std::string sequence =
      "001: kCopy         [source | next=002 (1)] kCopy\n"
      "002: kCustomKernel [prev=001 (1) | next=003 (1)] loop_convert_fusion_7 grid: [1, 1, 1]\n"
      "003: kWhile        [prev=002 (1) | next=010 (1)]\n"
      "condition:\n"
      "    004: kCustomKernel [source | sink] loop_compare_fusion grid: [1, 1, 1]\n"
      "  body:\n"
      "    005: kDynamicSliceFusion [source | next=007 (1)] params=1, results=1\n"
      "        006: kCopy [source | sink] kCopy\n"
      "    007: kCustomKernel [prev=005 (1) | next=008 (1)] gemm_fusion_dot.3 grid: [2, 1, 1]\n"
      "    008: kWhile        [prev=007 (1) | sink]\n"
      "    condition:\n"
      "        011: kCustomKernel [source | sink] loop_compare_fusion_1 grid: [1, 1, 1]\n"
      "      body:\n"
      "        012: kCustomKernel [source | sink] input_reduce_fusion_2 grid: [1, 1, 1]\n"
      "010: kCuDnn        [prev=003 (1) | next=013 (1)] cudnn$fmha\n"
      "013: kNcclAllReduceStart [source | next=014 (1)] all-reduce-start\n"
      "014: kNcclAllReduceDone [prev=013 (1) | sink] all-reduce-done\n";
  const std::string metadata =
      "thunk_metadata {\n  thunk_info {\n    profile_annotation: \"while.2\"\n    thunk_id: 3\n"
      "  }\n  thunk_kind: \"kWhile\"\n}\n"
      "thunk_metadata {\n  thunk_info {\n    profile_annotation: \"while.5\"\n    thunk_id: 8\n"
      "  }\n  thunk_kind: \"kWhile\"\n}\n";
  const std::string hlo =
      "  %while.2 = (s32[]) while(%t), condition=%c, body=%b, "
      "backend_config={\"known_trip_count\":{\"n\":\"3\"}}\n"
      "  %while.5 = (s32[]) while(%u), condition=%c2, body=%b2, "
      "backend_config={\"known_trip_count\":{\"n\":\"4\"}}\n";
  const KernelLaunches l = kernel_launches(sequence, metadata, hlo);
  // Top: copy, convert, cuDNN, the all-reduce start = 4. Outer loop x3: its condition, the
  // dynamic-slice fusion (its copy is a part of it), the product = 3 each; the inner loop's two
  // thunks x3 x4.
  EXPECT_EQ(l.total, 4 + 3 * 3 + 2 * 12);
  EXPECT_EQ(l.static_thunks, 4 + 3 + 2);
  EXPECT_EQ(l.loops_without_trip_count, 0);
  EXPECT_EQ(l.by_kind.at("copy"), 1);
  EXPECT_EQ(l.by_kind.at("loop_convert_fusion"), 1);
  EXPECT_EQ(l.by_kind.at("loop_compare_fusion"), 3 + 12);
  EXPECT_EQ(l.by_kind.at("DynamicSliceFusion"), 3);
  EXPECT_EQ(l.by_kind.at("matmul"), 3);
  EXPECT_EQ(l.by_kind.at("input_reduce_fusion"), 12);
  EXPECT_EQ(l.by_kind.at("cudnn"), 1);
  EXPECT_EQ(l.by_kind.at("NcclAllReduceStart"), 1);
  EXPECT_EQ(l.by_kind.count("NcclAllReduceDone"), 0u);

  // A loop whose trip count XLA does not know counts once, and says so.
  const KernelLaunches unknown = kernel_launches(sequence, "", hlo);
  EXPECT_EQ(unknown.loops_without_trip_count, 2);
  EXPECT_EQ(unknown.total, 4 + 3 + 2);
}

TEST(Deviceless, BadTargetsAreOneMessageAndExitTwo) {
  const fs::path dir = fs::temp_directory_path() / ("lmt_deviceless_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path model = dir / "m", empty = dir / "empty", not_a_target = dir / "config.yaml";
  fs::create_directories(empty);
  std::ofstream(not_a_target) << "model:\n  family: llama\n";
  const Result init =
      run("init --family llama --set model.vocab_size=512 --set "
          "model.hidden_size=128 --set model.intermediate_size=256 --set "
          "model.num_hidden_layers=2 --set model.num_attention_heads=4 --out " +
          model.string());
  ASSERT_EQ(init.code, 0) << init.out;
  const std::string info = "info --model " + model.string() + " --seq-len 64 --pjrt --target ";
  struct Case {
    std::string env, args, says;
  };
  for (const Case& c : {
           Case{"", info + "a100",
                "--target 'a100' is neither a target lmtrain knows (h100, h200, "},
           Case{"", info + not_a_target.string(), "is not a GPU target config"},
           Case{"LMTRAIN_VENV=" + empty.string() + " ", info + "h200",
                "--target compiles through XLA's CUDA PJRT plugin, which is not in"},
           Case{"LMTRAIN_CUDA_DATA_DIR=" + empty.string() + " ", info + "h200", "no ptxas at"},
           Case{"", "info --model " + model.string() + " --target h200",
                "--target compiles the step for a GPU or TPU: it goes with --pjrt"},
       }) {
    SCOPED_TRACE(c.args);
    const Result r = capture(c.env + LMT_BINARY + " " + c.args);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("terminate"), std::string::npos) << r.out;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmt
