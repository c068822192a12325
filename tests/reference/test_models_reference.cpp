// Every model family against transformers at test time (label reference): for each family and
// RoPE variant, scripts/make_hf_fixtures.py draws a small config and random weights from a fresh
// seed, saves them with save_pretrained and computes in float64 the logits, loss and every
// gradient for two sequences and a packed row (positions restarting at each document); ours, in
// f32 and in f64, must give them (tests/hf/hf_parity.h, the comparison of the committed fixtures).
// Also: weights saved in bf16, weights saved in shards, and the text model of a multimodal gemma3.
// One Python start per case (about 5 s): the binary runs in about a minute.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hf/hf_parity.h"
#include "reference_util.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

// f32: the bounds (measured: logits <= 2.3e-6, loss <= 1.9e-8, gradients <= 6.8e-6).
// f64: ours and the reference both in float64 from the same float32 weights and float32 RoPE
// angles, so only rounding is left: measured at most 4.2e-15 (logits), 5.6e-16 (loss) and
// 9.4e-15 (gradients) over seven runs of every case; the bounds leave 70x to 180x, and still catch
// one float32 step or a RoPE frequency an ulp off (an ulp in dynamic NTK's base gave gradients
// 1.5e-11 off).
const test::ParityBounds kF32Bounds{};
const test::ParityBounds kF64Bounds{3e-13, 1e-13, 1e-12};

// A fresh directory under the system's temp directory ("" when it cannot be made).
std::string make_temp_dir() {
  std::string t = (fs::temp_directory_path() / "lmt_models_ref_XXXXXX").string();
  return mkdtemp(t.data()) ? t : "";
}

// Removes `path` when nothing failed, else says where it is kept.
void remove_unless_failed(const std::string& path, bool failed) {
  if (path.empty()) return;
  if (failed)
    std::printf("kept %s\n", path.c_str());
  else
    fs::remove_all(path);
}

// A test's own directory, removed when the test passed.
class TempDir {
 public:
  ~TempDir() { remove_unless_failed(path_, testing::Test::HasFailure()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_ = make_temp_dir();
};

// The directory that ModelsReference's cases share, removed at the end when every test passed.
struct SharedDir : testing::Environment {
  std::string path;
  void TearDown() override {
    remove_unless_failed(path, !testing::UnitTest::GetInstance()->Passed());
  }
};
SharedDir* const shared_dir =
    static_cast<SharedDir*>(testing::AddGlobalTestEnvironment(new SharedDir));

// Runs the script for `family` (empty: the families named in `flags`) with `flags` into `out`
// (fresh seed for `what`); returns the family's directory, empty (with a failure added) when the
// script failed.
std::string make_refs(const std::string& out, const std::string& what, const std::string& family,
                      const std::string& flags) {
  EXPECT_FALSE(out.empty()) << "mkdtemp";
  const uint32_t seed = test::fresh_seed("models_reference." + what);
  const std::string args = "--out '" + out + "' --seed " + std::to_string(seed) +
                           (family.empty() ? "" : " --family " + family) + " " + flags;
  const bool before = testing::Test::HasFailure();
  const std::string log = test::run_reference_script("scripts/make_hf_fixtures.py", args);
  std::printf("%s", log.c_str());
  if (testing::Test::HasFailure() && !before) return "";
  return out + "/" + family;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

// The largest errors over a case's references and dtypes, printed for docs/models.md.
struct Worst {
  test::ParityErrors f32, f64;
  void add(const test::ParityErrors& e, DType dt) {
    test::ParityErrors& w = dt == DType::f32 ? f32 : f64;
    w.logits = std::max(w.logits, e.logits);
    w.loss = std::max(w.loss, e.loss);
    if (e.grad >= w.grad) w.grad = e.grad, w.worst_grad = e.worst_grad;
  }
  void print(const std::string& what) const {
    for (const auto* w : {&f32, &f64})
      std::printf("[models_reference] worst %s %s: logits %.3g, loss %.3g, grad %.3g (%s)\n",
                  what.c_str(), w == &f32 ? "f32" : "f64", w->logits, w->loss, w->grad,
                  w->worst_grad.c_str());
  }
};

// Compares every reference of `dir` (refs) in f32 and f64.
void compare(const std::string& dir, const std::vector<std::string>& refs,
             const std::string& what) {
  Worst worst;
  for (const std::string& r : refs)
    for (DType dt : {DType::f32, DType::f64})
      worst.add(test::check_hf_parity(dir, r, dt, dt == DType::f32 ? kF32Bounds : kF64Bounds,
                                      "models_reference"),
                dt);
  worst.print(what);
}

class ModelsReference : public testing::TestWithParam<std::string> {};

// The families of ModelsReference that run in this process: all of them when the binary runs
// whole, the one that ctest picks otherwise.
std::vector<std::string> selected_families() {
  std::vector<std::string> out;
  const testing::UnitTest* u = testing::UnitTest::GetInstance();
  for (int i = 0; i < u->total_test_suite_count(); ++i) {
    const testing::TestSuite* s = u->GetTestSuite(i);
    if (std::string(s->name()) != "Families/ModelsReference") continue;
    for (int j = 0; j < s->total_test_count(); ++j) {
      const std::string name = s->GetTestInfo(j)->name();  // MatchesTransformers/<family>
      if (s->GetTestInfo(j)->should_run()) out.push_back(name.substr(name.find('/') + 1));
    }
  }
  return out;
}

// One Python run makes the references of every selected family (a Python start costs about 5 s)
// into the shared directory.
std::string family_refs(const std::string& family) {
  static const std::string made = [] {
    shared_dir->path = make_temp_dir();
    std::string flags = "--random-config --float64 --packed";
    for (const std::string& f : selected_families()) flags += " --family " + f;
    return make_refs(shared_dir->path, "families", "", flags);
  }();
  return made.empty() ? "" : shared_dir->path + "/" + family;
}

TEST_P(ModelsReference, MatchesTransformers) {
  const std::string v = GetParam();
  const std::string dir = family_refs(v);
  ASSERT_FALSE(dir.empty()) << "the script failed (see the first failing test)";
  ASSERT_TRUE(fs::exists(dir + "/ref_a.json")) << dir;
  if (v == "llama_dynamic") {
    // Every reference runs longer than max_position_embeddings, so the base grows; the packed
    // row's longest document does too, and is shorter than the row.
    const int64_t max_pos = read_json(dir + "/config.json").at("max_position_embeddings");
    for (const char* r : {"a", "b"})
      EXPECT_GT(read_json(dir + "/ref_" + r + ".json").at("input_ids").size(), max_pos);
    const auto p = read_json(dir + "/ref_p.json");
    const auto pos = p.at("positions").get<std::vector<int64_t>>();
    EXPECT_GT(*std::max_element(pos.begin(), pos.end()) + 1, max_pos);
    EXPECT_LT(*std::max_element(pos.begin(), pos.end()) + 1, static_cast<int64_t>(pos.size()));
  }
  if (v == "llama_relu")  // transformers' LlamaMLP with ReLU (ReGLU)
    EXPECT_EQ(read_json(dir + "/config.json").at("hidden_act"), "relu");
  if (v == "gpt2_relu2")  // GPT2MLP with ReLUSquaredActivation
    EXPECT_EQ(read_json(dir + "/config.json").at("activation_function"), "relu2");
  compare(dir, {"a", "b", "p"}, v);
}

INSTANTIATE_TEST_SUITE_P(Families, ModelsReference,
                         testing::Values("llama", "llama_linear", "llama_llama3", "llama_yarn",
                                         "llama_dynamic", "mistral", "qwen2", "qwen3", "gemma",
                                         "gemma2", "gemma3", "gemma3_yarn", "gpt2", "llama_relu",
                                         "gpt2_relu2"),
                         [](const auto& info) { return info.param; });

// Every tensor of the files of `dir` has file dtype `dtype`; returns how many files there are.
size_t expect_stored_as(const std::string& dir, const std::string& dtype) {
  size_t files = 0;
  for (const auto& [path, f] : open_hf_weight_files(dir)) {
    ++files;
    for (const std::string& n : f.names()) EXPECT_EQ(f.meta(n).file_dtype, dtype) << path << n;
  }
  return files;
}

TEST(ModelsReferenceFiles, Bf16CheckpointGivesTransformersLogits) {
  TempDir out;
  const std::string dir =
      make_refs(out.path(), "bf16", "gemma2", "--random-config --float64 --save bf16");
  ASSERT_FALSE(dir.empty());
  EXPECT_EQ(expect_stored_as(dir, "BF16"), 1u);
  compare(dir, {"a", "b"}, "gemma2 bf16 checkpoint");
}

// 1KB shards: every random config's embedding alone is larger (at least 50 x 6 f32), so the
// checkpoint always comes in several files (20KB was more than a small random model, seen in CI).
TEST(ModelsReferenceFiles, ShardedCheckpointGivesTransformersLogits) {
  TempDir out;
  const std::string dir =
      make_refs(out.path(), "sharded", "qwen3", "--random-config --float64 --max-shard-size 1KB");
  ASSERT_FALSE(dir.empty());
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  EXPECT_GT(expect_stored_as(dir, "F32"), 1u) << "several shards";
  compare(dir, {"a", "b"}, "qwen3 sharded checkpoint");
}

// Gemma3ForConditionalGeneration: lmtrain loads its text model (and leaves the vision tower);
// the reference is the whole model's text-only forward.
TEST(ModelsReferenceFiles, MultimodalGemma3TextModelGivesTransformersLogits) {
  TempDir out;
  const std::string dir =
      make_refs(out.path(), "multimodal", "gemma3", "--random-config --float64 --multimodal");
  ASSERT_FALSE(dir.empty());
  const auto cfg = read_json(dir + "/config.json");
  EXPECT_EQ(cfg.value("model_type", ""), "gemma3");
  EXPECT_TRUE(cfg.contains("vision_config"));
  bool vision = false;
  for (const auto& [path, f] : open_hf_weight_files(dir))
    for (const std::string& n : f.names()) vision |= n.find("vision_tower") != std::string::npos;
  EXPECT_TRUE(vision) << "the checkpoint holds a vision tower";
  compare(dir, {"a", "b"}, "gemma3 multimodal checkpoint");
}

}  // namespace
}  // namespace lmt
