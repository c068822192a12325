// The partitioned step really is partitioned: compiled for fsdp 4, each device's arguments are
// exactly what the sharding plan predicts (a quarter of every split tensor, whole the norms, the
// scalars and whatever the plan keeps whole), and XLA's optimized program contains the
// collectives the plan implies (printed beside the prediction: on XLA:CPU an FSDP gradient comes
// back as an all-reduce rather than a reduce-scatter, several combined into one; and activations
// the partitioner could not keep split are gathered too, which the counts show).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "../model/model_test_util.h"
#include "backend/pjrt/backend.h"
#include "model/sharding_plan.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

// A llama whose split dimensions all divide by 4.
ModelConfig model() {
  ModelConfig c = test::tiny("llama");
  c.vocab_size = 320, c.hidden_size = 32, c.intermediate_size = 48;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8;
  return c;
}

// One training step compiled (not run) on a mesh; the backend's account of it.
ProgramReport compile_step(const Mesh& mesh) {
  PjrtOptions o;
  o.compile_only = true;
  o.mesh = mesh;
  o.sharding = plan_sharding;
  auto be = make_pjrt_backend("", o);
  Transformer m(be.get(), model());
  m.init_weights(3);
  const int64_t B = 4, T = 8;
  const std::vector<int32_t> ids = test::random_ids(B * T, model().vocab_size, 5);
  auto opt = make_optimizer(be.get(), m.trainable_params(), m.trainable_flat_size(), {}, 0.0);
  m.zero_grads();
  LossSums sums = m.make_loss_sums();
  sums.zero();
  m.forward_backward(ids.data(), ids.data(), B, T, 1.0 / (B * T), sums);
  opt->clip_and_step(static_cast<float*>(m.trainable_data()),
                     static_cast<float*>(m.trainable_grads_data()), 1e-3, 1.0);
  m.discard_grads();
  sums.read(0);
  be->synchronize();
  return be->device().programs;
}

class MeshProgram : public test::PjrtTest {};

TEST_F(MeshProgram, FsdpFourHoldsAQuarterOfEverySplitTensor) {
  const ProgramReport one = compile_step(Mesh{});
  const Mesh fsdp4{{{"fsdp", 4}}};
  const ProgramReport four = compile_step(fsdp4);
  ASSERT_TRUE(one.last_memory && four.last_memory) << "the CPU plugin gave no compiled memory";
  ASSERT_EQ(one.last_arguments.size(), four.last_arguments.size());
  int64_t whole = 0, split = 0, kept_whole = 0;
  for (const ProgramArgument& a : four.last_arguments) {
    int64_t bytes = static_cast<int64_t>(dtype_size(a.dtype));
    for (int64_t d : a.dims) bytes *= d;
    const TensorSharding s = plan_sharding(a.name, a.dims);
    int64_t pieces = 1;
    for (size_t d = 0; d < a.dims.size(); ++d) pieces *= shard_count(fsdp4, s, d);
    whole += bytes;
    split += bytes / pieces;
    if (pieces == 1) kept_whole += bytes;
  }
  std::printf(
      "arguments: one device %lld B; fsdp 4 %lld B a device, predicted %lld "
      "(a quarter of %lld split + %lld whole)\n",
      static_cast<long long>(one.last_memory->argument),
      static_cast<long long>(four.last_memory->argument), static_cast<long long>(split),
      static_cast<long long>(whole - kept_whole), static_cast<long long>(kept_whole));
  EXPECT_EQ(one.last_memory->argument, whole);
  EXPECT_EQ(four.last_memory->argument, split);
  EXPECT_EQ(4 * (split - kept_whole), whole - kept_whole);
  EXPECT_GT(whole - kept_whole, 10 * kept_whole) << "the plan left most of the model whole";
}

// The optimized program of a step on each mesh (XLA's dump, from a separate process so the flag
// takes effect): the collectives XLA chose, beside what the plan implies.
std::map<std::string, int> collectives(const std::string& mesh_sets) {
  const fs::path dir =
      fs::temp_directory_path() / ("lmtrain_mesh_dump_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string config = std::string(LMT_SOURCE_DIR) + "/tests/data/mesh_tiny.yaml";
  const std::string cmd = "XLA_FLAGS='--xla_dump_to=" + dir.string() + "' " + LMT_BINARY +
                          " bench --compile-only --config " + config + mesh_sets +
                          " > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::map<std::string, int> count;
  // " all-reduce(" after the result's type, which is a tuple when XLA combined several.
  const std::regex op(
      " (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(-start)?\\(");
  size_t largest = 0;
  std::string text;
  for (const auto& e : fs::directory_iterator(dir)) {  // the step: the largest optimized module
    const std::string name = e.path().filename().string();
    if (name.find("after_optimizations.txt") == std::string::npos) continue;
    if (e.file_size() <= largest) continue;
    largest = e.file_size();
    std::ifstream f(e.path());
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  for (std::sregex_iterator it(text.begin(), text.end(), op), end; it != end; ++it)
    ++count[(*it)[1].str()];
  fs::remove_all(dir);
  return count;
}

std::string list(const std::map<std::string, int>& c) {
  std::ostringstream s;
  for (const auto& [op, n] : c) s << op << " x" << n << " ";
  return s.str();
}

TEST_F(MeshProgram, XlaPlacesTheCollectivesThePlanImplies) {
  const auto fsdp = collectives(" --set parallel.fsdp=4");
  std::printf(
      "fsdp 4: plan: all-gather of each split weight, reduce-scatter of its gradient; "
      "XLA chose: %s\n",
      list(fsdp).c_str());
  EXPECT_GT(fsdp.count("all-gather"), 0u);
  EXPECT_GT(fsdp.count("reduce-scatter") + fsdp.count("all-reduce"), 0u);
  // Activations stay split by sequence: no device hands rows to another (each strided view of
  // the fused q|k|v rows, read or written, is a column slice of the rows the program wrote; read
  // as a flat span, it had XLA gather and shift the rows: 60 all-gathers and 60 permutes here).
  // The residual stream is constrained to rows split over the batch axes; without that the
  // partitioner split some of a layer's values by hidden, as the weights they meet are (11
  // all-to-alls). What is left is the embedding's (forward and backward), as below.
  // What is left is the embedding's (forward and backward) and the head's, to its vocabulary
  // split and its gradient back (the vocabulary-parallel loss head).
  EXPECT_EQ(fsdp.count("collective-permute"), 0u);
  EXPECT_LE(fsdp.count("all-to-all"), 4u);
  const auto data = collectives(" --set parallel.data=4");
  std::printf("data 4: plan: all-reduce of every gradient; XLA chose: %s\n", list(data).c_str());
  EXPECT_GT(data.count("all-reduce"), 0u);
  for (const char* op : {"collective-permute", "all-to-all"})
    EXPECT_EQ(data.count(op), 0u) << op << " in a data-parallel step";
  // The vocabulary-parallel loss head gathers its chunk's rows (and labels) and the head's
  // vocabulary-split gradient; nothing else is gathered.
  EXPECT_LE(data.count("all-gather"), 3u);
  // Tensor parallel the Megatron way: each of q, k, v, gate and up is its own product, split by
  // its own heads or features (a product with their fused rows, split in halves, had XLA gather
  // the weights and move activations between devices: 10 all-gathers, 22 all-to-alls and 30
  // permutes here), so the only collectives are all-reduces: 2 a layer forward, 2 backward, the
  // vocabulary-split embedding and head, the gradient norm.
  const auto tensor = collectives(" --set parallel.tensor=2");
  std::printf(
      "tensor 2: plan: all-reduce of the attention and MLP outputs (forward) and of their "
      "inputs' gradients (backward); XLA chose: %s\n",
      list(tensor).c_str());
  EXPECT_GT(tensor.count("all-reduce"), 0u);
  for (const char* op : {"all-gather", "collective-permute", "all-to-all"})
    EXPECT_EQ(tensor.count(op), 0u) << op << " in a tensor-parallel step";
  // The same with q/k/v biases (qwen2; their gradients are sums over rows, one per projection)
  // and with per-head q/k norms and sandwich norms (gemma3; a head norm keeps the heads an axis).
  for (const char* family : {"qwen2", "gemma3"}) {
    const auto f =
        collectives(std::string(" --set parallel.tensor=2 --set model.family=") + family);
    std::printf("tensor 2, %s: XLA chose: %s\n", family, list(f).c_str());
    for (const char* op : {"all-gather", "collective-permute", "all-to-all"})
      EXPECT_EQ(f.count(op), 0u) << op << " in a tensor-parallel " << family << " step";
  }
  // Both: the weights' gathers over fsdp, the all-reduces of both, and nothing else but the
  // embedding's: its rows are gathered from a table split by hidden over fsdp, and XLA moves the
  // gathered rows (an all-to-all, and a permute to place them) rather than the table.
  const auto both = collectives(" --set parallel.fsdp=2 --set parallel.tensor=2");
  std::printf("fsdp 2 x tensor 2: XLA chose: %s\n", list(both).c_str());
  EXPECT_GT(both.count("all-gather"), 0u);
  EXPECT_LE(both.count("all-to-all") + both.count("collective-permute"), 3u);
}

}  // namespace
}  // namespace lmt
