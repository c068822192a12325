// The plan of a step on a mesh (train/step_memory.h, train/mesh_plan.h) and `lmtrain info
// --mesh`: per-device parameters under fsdp and tensor, the worked examples of docs/parallel.md
// (docs/examples/*/config.json), the JSON fields the docs list and the errors. Arithmetic only:
// nothing is compiled, so a 600B config answers at once.
#include <gtest/gtest.h>

#include <map>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/devices.h"
#include "cli/cli_util.h"
#include "core/error.h"
#include "io/hf_model.h"
#include "model/sharding_plan.h"
#include "model/transformer.h"
#include "train/mesh_plan.h"
#include "train/step_memory.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

const std::string kExamples = std::string(LMT_SOURCE_DIR) + "/docs/examples/";

Mesh mesh_of(int64_t d, int64_t f, int64_t t) { return Mesh{{{"data", d}, {"fsdp", f}, {"tensor", t}}}; }

ModelConfig small_llama() {
  ModelConfig c;
  c.family = "llama";
  c.hidden_size = 96;
  c.intermediate_size = 160;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.vocab_size = 250;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = false;
  return c;
}

// Elements of the tensors the plan splits over `axis` (on any dimension) and of the rest.
std::pair<int64_t, int64_t> split_and_whole(const ModelConfig& cfg, const std::string& axis) {
  int64_t split = 0, whole = 0;
  for (const ParamInfo& p : param_layout(cfg)) {
    bool by = false;
    for (const std::vector<std::string>& dim : plan_sharding(p.name, p.shape.dims()))
      for (const std::string& a : dim) by |= a == axis;
    (by ? split : whole) += p.numel();
  }
  return {split, whole};
}

TEST(MeshPlan, FsdpQuartersTheSplitParametersAndKeepsTheRestWhole) {
  for (const ModelConfig& cfg : {small_llama(), read_hf_model_config(kExamples + "llama-3.1-8b")}) {
    const auto [split, whole] = split_and_whole(cfg, "fsdp");
    ASSERT_EQ(split % 4, 0);
    const ParamShards one = param_shards(cfg, mesh_of(1, 1, 1), "adamw");
    const ParamShards four = param_shards(cfg, mesh_of(1, 4, 1), "adamw");
    EXPECT_EQ(one.total, split + whole);
    EXPECT_EQ(four.total, split / 4 + whole);
    EXPECT_EQ(four.replicated, whole);
    EXPECT_EQ(four.moments, 2 * four.total);  // AdamW's m and v follow their parameter
    // Data parallelism replicates: the same bytes as one device.
    EXPECT_EQ(param_shards(cfg, mesh_of(8, 1, 1), "adamw").total, one.total);
    // The step's weights and optimizer state are those elements in f32.
    StepShape s;
    s.micro_batch = 4;
    s.seq_len = 16;
    const StepMemory m = step_memory(cfg, s, mesh_of(1, 4, 1), StepTarget::accelerator);
    EXPECT_EQ(m.arguments[0].key, "weights");
    EXPECT_EQ(m.arguments[0].bytes, static_cast<uint64_t>(4 * four.total));
    EXPECT_EQ(m.arguments[1].bytes, static_cast<uint64_t>(8 * four.total));
  }
}

TEST(MeshPlan, TensorHalvesTheSplitMatrices) {
  const ModelConfig cfg = small_llama();
  const auto [split, whole] = split_and_whole(cfg, "tensor");
  EXPECT_EQ(param_shards(cfg, mesh_of(1, 1, 2), "adamw").total, split / 2 + whole);
  // q, k, v, gate, up, o, down, the embedding and the head are all split: only norms stay.
  int64_t norms = 0;
  for (const ParamInfo& p : param_layout(cfg))
    if (p.kind == ParamKind::norm) norms += p.numel();
  EXPECT_EQ(whole, norms);
  // Lion and SGD keep one moment, Muon one for hidden matrices and two for the rest.
  const ParamShards lion = param_shards(cfg, mesh_of(1, 2, 2), "lion");
  EXPECT_EQ(lion.moments, lion.total);
  const ParamShards muon = param_shards(cfg, mesh_of(1, 1, 1), "muon");
  EXPECT_GT(muon.moments, muon.total);
  EXPECT_LT(muon.moments, 2 * muon.total);
}

TEST(MeshPlan, ActivationsDivideOverTheBatchAxes) {
  const ModelConfig cfg = small_llama();
  StepShape s;
  s.micro_batch = 8;
  s.seq_len = 32;
  s.bf16 = true;
  const StepMemory one = step_memory(cfg, s, mesh_of(1, 1, 1), StepTarget::accelerator);
  const StepMemory dp = step_memory(cfg, s, mesh_of(4, 1, 1), StepTarget::accelerator);
  auto term = [](const std::vector<MemoryTerm>& v, const std::string& key) {
    for (const MemoryTerm& t : v)
      if (t.key == key) return t.bytes;
    return uint64_t{0};
  };
  EXPECT_EQ(term(one.at_head, "saved_activations"), 4 * term(dp.at_head, "saved_activations"));
  EXPECT_EQ(term(one.at_head, "loss_chunk"), 4 * term(dp.at_head, "loss_chunk"));
}

TEST(MeshPlan, CollectivesOfTheAxes) {
  ModelConfig cfg = small_llama();
  StepShape s;
  s.micro_batch = 4;
  s.seq_len = 32;
  EXPECT_TRUE(step_collectives(cfg, s, mesh_of(1, 1, 1)).empty());
  const std::vector<Collective> f = step_collectives(cfg, s, mesh_of(1, 4, 1));
  ASSERT_FALSE(f.empty());
  for (const Collective& c : f) EXPECT_EQ(c.axis, "fsdp");
  s.checkpointing = true;  // the layers are gathered a third time, for the recomputation
  EXPECT_EQ(step_collectives(cfg, s, mesh_of(1, 4, 1)).size(), f.size() + 1);
  auto by_axis = [](const std::vector<Collective>& cs) {
    std::map<std::string, int> n;
    for (const Collective& c : cs) ++n[c.axis];
    return n;
  };
  // data: every gradient's all-reduce, and the vocabulary-parallel loss head's: each chunk's rows
  // gathered and their gradients reduce-scattered, the head's gradient gathered. tensor: the
  // layers' all-reduces (forward, backward, recomputation) and the untied token table's gradient.
  std::map<std::string, int> dt = by_axis(step_collectives(cfg, s, mesh_of(2, 1, 2)));
  EXPECT_EQ(dt["data"], 1);  // 250 ids do not split 4 ways: the head is gathered
  cfg.vocab_size = 256;
  dt = by_axis(step_collectives(cfg, s, mesh_of(2, 1, 2)));
  EXPECT_EQ(dt["data"], 4);
  EXPECT_EQ(dt["tensor"], cfg.tie_word_embeddings ? 3 : 4);
  // The cut loss keeps the head whole on the rows' axes: only the gradients' all-reduce.
  s.vocab_tile = cfg.vocab_size / 4;
  dt = by_axis(step_collectives(cfg, s, mesh_of(2, 1, 2)));
  EXPECT_EQ(dt["data"], 1);
}

// docs/parallel.md: Llama-style 600B needs far more than a TPU v4-32 (16 chips, 512 GiB), and
// the smallest mesh that fits one sequence of 4096 tokens a fsdp device, with checkpointing and
// bf16, is the one the docs name: fsdp 144 x tensor 8 = 1152 chips.
constexpr int64_t kFit600BFsdp = 144, kFit600BTensor = 8;

TEST(MeshPlan, The600BExampleFitsWhereTheDocsSay) {
  const ModelConfig cfg = read_hf_model_config(kExamples + "llama-600b");
  const DeviceSpec& v4 = device_spec("tpu-v4", "--device");
  StepShape s;
  s.seq_len = 4096;
  s.checkpointing = true;
  s.bf16 = true;
  s.micro_batch = 16;
  EXPECT_GT(step_memory(cfg, s, mesh_of(1, 16, 1), StepTarget::accelerator).total_bytes(),
            v4.memory);
  const MeshFit fit = smallest_fitting_mesh(cfg, s, 1, v4);
  ASSERT_TRUE(fit.found);
  EXPECT_EQ(fit.mesh.axis_size("fsdp"), kFit600BFsdp);
  EXPECT_EQ(fit.mesh.axis_size("tensor"), kFit600BTensor);
  EXPECT_LE(fit.memory.total_bytes(), v4.memory);
}

fs::path config_dir(const std::string& name, const nlohmann::json& cfg) {
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << cfg.dump();
  return dir;
}

TEST(InfoMesh, JsonHasTheFieldsTheDocsDescribe) {
  const Result r = run("info --json --model " + kExamples +
                       "llama-3.1-8b --seq-len 4096 --precision bf16 "
                       "--activation-checkpointing --mesh data=2,fsdp=4 --device h100 --fit");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* key : {"argument_bytes", "temp_bytes", "total_bytes", "peak"})
    EXPECT_TRUE(j["pjrt_predicted"].contains(key)) << key;
  const nlohmann::json& p = j["mesh_plan"];
  EXPECT_EQ(p["mesh"]["devices"], 8);
  EXPECT_EQ(p["micro_batch"], 8);  // data x fsdp, one sequence a device
  for (const char* key : {"arguments", "at_loss_head", "at_backward_end", "argument_bytes",
                          "temp_bytes", "total_bytes", "peak"})
    EXPECT_TRUE(p["per_device"].contains(key)) << key;
  for (const char* key : {"weights", "optimizer_state", "batch"})
    EXPECT_TRUE(p["per_device"]["arguments"].contains(key)) << key;
  ASSERT_FALSE(p["collectives"].empty());
  for (const nlohmann::json& c : p["collectives"])
    for (const char* key : {"key", "axis", "count", "bytes_per_device", "exposed"})
      EXPECT_TRUE(c.contains(key)) << key;
  EXPECT_EQ(p["device"]["key"], "h100");
  EXPECT_TRUE(p["fits"].is_boolean());
  for (const char* key : {"assumed_mfu", "compute_s", "overlapped_collectives_s",
                          "exposed_collectives_s", "step_s", "tokens_per_s_per_device"})
    EXPECT_TRUE(p["step_time_estimate"].contains(key)) << key;
  EXPECT_TRUE(p["smallest_fitting_mesh"]["found"].get<bool>());
}

TEST(InfoMesh, TextSaysWhetherItFits) {
  const Result r = run("info --model " + kExamples +
                       "llama-3.1-70b --seq-len 4096 --precision bf16 --activation-checkpointing "
                       "--mesh fsdp=8 --device h100");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("collectives per step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("an estimate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fit"), std::string::npos) << r.out;
}

TEST(InfoMesh, AMeshThatDoesNotDivideIsOneMessageNamingTheFlag) {
  const fs::path dir = config_dir("lmt_info_mesh", {{"model_type", "llama"},
                                                     {"hidden_size", 96},
                                                     {"intermediate_size", 160},
                                                     {"num_hidden_layers", 2},
                                                     {"num_attention_heads", 6},
                                                     {"num_key_value_heads", 2},
                                                     {"vocab_size", 250},
                                                     {"max_position_embeddings", 64}});
  for (const std::string& mesh : {"tensor=4", "fsdp=5", "tensor=3", "data=2,pipeline=2",
                                  "fsdp=0", "fsdp"}) {
    SCOPED_TRACE(mesh);
    const Result r = run("info --model " + dir.string() + " --mesh " + mesh);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--mesh"), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
  const Result chips = run("info --model " + dir.string() + " --mesh fsdp=2 --chips 4");
  EXPECT_EQ(chips.code, 2) << chips.out;
  const Result device = run("info --model " + dir.string() + " --device tpu-v9");
  EXPECT_EQ(device.code, 2) << device.out;
  EXPECT_NE(device.out.find("--device"), std::string::npos) << device.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lmt
