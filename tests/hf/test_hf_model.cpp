// load_hf_model: f32 / bf16 / f16 weights and sharded directories load to the same model, and
// each kind of bad directory is one UserError naming the file or tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "hf_test_util.h"
#include "io/hf_config.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "model/rope.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

// The llama fixture's tensors, as f32 host tensors by name.
std::map<std::string, HostTensor> fixture_tensors() {
  SafetensorsFile f = SafetensorsFile::open(test::hf_fixture("llama") + "/model.safetensors");
  std::map<std::string, HostTensor> out;
  for (const std::string& n : f.names()) out[n] = f.read_as(n, DType::f32);
  return out;
}

nlohmann::json fixture_config() {
  std::ifstream in(test::hf_fixture("llama") + "/config.json");
  return nlohmann::json::parse(in);
}

// A fresh model directory holding `config` and `tensors` (converted to `dt`) in one file.
std::string make_dir(const std::string& name, const nlohmann::json& config,
                     const std::map<std::string, HostTensor>& tensors, DType dt = DType::f32) {
  const fs::path dir = test::temp_dir() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump(2);
  SafetensorsWriter w;
  for (const auto& [n, t] : tensors) {
    if (dt == DType::f32) {
      w.add_copy(n, t);
    } else {
      SafetensorsWriter one;  // convert through a file image: read_as does the rounding
      one.add_copy("x", t);
      SafetensorsFile f = SafetensorsFile::from_bytes(one.to_bytes(), "x");
      w.add_copy(n, f.read_as("x", dt));
    }
  }
  w.write((dir / "model.safetensors").string());
  return dir.string();
}

std::vector<double> logits_of(const std::string& dir) {
  CpuBackend be;
  auto m = load_hf_model(dir, &be);
  std::vector<int32_t> ids{5, 17, 200, 3, 99, 42};
  return m->forward_logits(ids.data(), 1, static_cast<int64_t>(ids.size()));
}

TEST(HfModel, LoadsTheFixtureAndReadsItsConfig) {
  CpuBackend be;
  auto m = load_hf_model(test::hf_fixture("llama"), &be);
  EXPECT_EQ(m->config().family, "llama");
  EXPECT_EQ(m->config().vocab_size, 256);
  EXPECT_EQ(m->config().kv_heads(), 2);
  // A random parameter element comes through unchanged.
  auto tensors = fixture_tensors();
  std::mt19937 rng(std::random_device{}());
  const ParamInfo& p = m->params()[rng() % m->params().size()];
  const int64_t i = static_cast<int64_t>(rng() % static_cast<uint32_t>(p.numel()));
  float got = 0;
  be.to_host(&got, static_cast<const float*>(m->params_data()) + p.offset + i, sizeof(float));
  EXPECT_EQ(got, tensors.at(p.name).ptr<float>()[i]) << p.name << "[" << i << "]";
}

TEST(HfModel, Bf16AndF16AreConvertedOnLoad) {
  const auto cfg = fixture_config();
  const auto tensors = fixture_tensors();
  const std::vector<double> ref = logits_of(make_dir("f32", cfg, tensors));
  for (DType dt : {DType::bf16, DType::f16}) {
    // The same model with its weights rounded to dt and back, stored as f32.
    std::map<std::string, HostTensor> rounded;
    SafetensorsWriter w;
    for (const auto& [n, t] : tensors) w.add_copy(n, t);
    SafetensorsFile f = SafetensorsFile::from_bytes(w.to_bytes(), "mem");
    for (const auto& [n, t] : tensors) {
      SafetensorsWriter one;
      one.add_copy("x", f.read_as(n, dt));
      rounded[n] = SafetensorsFile::from_bytes(one.to_bytes(), "x").read_as("x", DType::f32);
    }
    const std::vector<double> want = logits_of(make_dir("r", cfg, rounded));
    const std::vector<double> got = logits_of(make_dir("half", cfg, tensors, dt));
    ASSERT_EQ(got.size(), want.size());
    double diff = 0, d_ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      diff = std::max(diff, std::abs(got[i] - want[i]));
      d_ref = std::max(d_ref, std::abs(got[i] - ref[i]));
    }
    EXPECT_EQ(diff, 0.0) << dtype_name(dt);
    EXPECT_GT(d_ref, 0.0) << dtype_name(dt) << ": the rounding must show";
  }
}

TEST(HfModel, ShardedEqualsSingleFile) {
  const auto cfg = fixture_config();
  const auto tensors = fixture_tensors();
  const fs::path dir = test::temp_dir() / "sharded";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << cfg.dump();
  // Tensors go to one of three shards at random.
  std::mt19937 rng(std::random_device{}());
  SafetensorsWriter shards[3];
  nlohmann::json index{{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (const auto& [n, t] : tensors) {
    const int s = static_cast<int>(rng() % 3);
    shards[s].add_copy(n, t);
    index["weight_map"][n] = "model-0000" + std::to_string(s + 1) + "-of-00003.safetensors";
  }
  for (int s = 0; s < 3; ++s)
    shards[s].write((dir / ("model-0000" + std::to_string(s + 1) + "-of-00003.safetensors")).string());
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  EXPECT_EQ(logits_of(dir.string()), logits_of(make_dir("single", cfg, tensors)));

  // An index naming a shard that is not there.
  index["weight_map"]["model.norm.weight"] = "model-00009-of-00003.safetensors";
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  test::expect_user_error([&] { logits_of(dir.string()); },
                          {"model.safetensors.index.json", "model-00009-of-00003.safetensors",
                           "does not exist"});
}

TEST(HfModel, BadDirectoriesAreUserErrorsNamingTheCulprit) {
  const auto cfg = fixture_config();
  const auto tensors = fixture_tensors();
  CpuBackend be;
  auto load = [&](const std::string& dir) { load_hf_model(dir, &be); };

  auto c = cfg;
  c["model_type"] = "mamba";
  test::expect_user_error([&] { load(make_dir("type", c, tensors)); },
                          {"config.json", "model_type 'mamba'"});
  c = cfg;
  c["architectures"] = {"LlamaForSequenceClassification"};
  test::expect_user_error([&] { load(make_dir("arch", c, tensors)); },
                          {"config.json", "LlamaForSequenceClassification"});

  auto t = tensors;
  t.erase("model.layers.1.mlp.up_proj.weight");
  test::expect_user_error([&] { load(make_dir("missing", cfg, t)); },
                          {"'model.layers.1.mlp.up_proj.weight'", "missing"});

  t = tensors;
  t["model.layers.0.self_attn.q_norm.weight"] = HostTensor(DType::f32, Shape{8});
  test::expect_user_error([&] { load(make_dir("extra", cfg, t)); },
                          {"model.safetensors", "unexpected tensor",
                           "'model.layers.0.self_attn.q_norm.weight'"});

  t = tensors;
  t["model.norm.weight"] = HostTensor(DType::f32, Shape{33});
  test::expect_user_error([&] { load(make_dir("shape", cfg, t)); },
                          {"model.safetensors", "'model.norm.weight'", "[33]", "[32]"});

  t = tensors;
  t["model.norm.weight"] = HostTensor(DType::i32, Shape{32});
  test::expect_user_error([&] { load(make_dir("dtype", cfg, t)); },
                          {"model.safetensors", "'model.norm.weight'", "I32"});

  // Truncated: the data buffer ends before the last tensor does.
  const fs::path dir = make_dir("trunc", cfg, tensors);
  const fs::path file = dir / "model.safetensors";
  fs::resize_file(file, fs::file_size(file) - 100);
  test::expect_user_error([&] { load(dir.string()); }, {file.string()});

  test::expect_user_error([&] { load((test::temp_dir() / "nowhere").string()); },
                          {"nowhere", "does not exist"});
  const fs::path empty = test::temp_dir() / "noweights";
  fs::create_directories(empty);
  std::ofstream(empty / "config.json") << cfg.dump();
  test::expect_user_error([&] { load(empty.string()); }, {"noweights", "model.safetensors"});
}

// The fixtures' window and rope scaling matter: without them the reference logits are missed by
// far more than the parity tolerance, so the parity tests would catch either being ignored.
TEST(HfModel, FixturesDependOnWindowAndRopeScaling) {
  for (const char* family : {"mistral_swa", "llama_tied_llama3rope"}) {
    const std::string dir = test::hf_fixture(family);
    std::ifstream in(dir + "/config.json");
    auto cfg = nlohmann::json::parse(in);
    if (std::string(family) == "mistral_swa")
      cfg["sliding_window"] = nullptr;
    else
      cfg["rope_parameters"]["rope_type"] = "default";
    std::map<std::string, HostTensor> tensors;
    SafetensorsFile f = SafetensorsFile::open(dir + "/model.safetensors");
    for (const std::string& n : f.names()) tensors[n] = f.read_as(n, DType::f32);
    std::ifstream rin(dir + "/ref_b.json");
    const auto ids64 = nlohmann::json::parse(rin).at("input_ids").get<std::vector<int64_t>>();
    std::vector<int32_t> ids(ids64.begin(), ids64.end());
    CpuBackend be;
    auto m = load_hf_model(make_dir(std::string("plain_") + family, cfg, tensors), &be);
    const std::vector<double> got = m->forward_logits(ids.data(), 1, static_cast<int64_t>(ids.size()));
    const HostTensor want =
        SafetensorsFile::open(dir + "/ref_b_logits.safetensors").read_as("logits", DType::f64);
    double diff = 0, top = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      diff = std::max(diff, std::abs(got[i] - want.ptr<double>()[i]));
      top = std::max(top, std::abs(want.ptr<double>()[i]));
    }
    EXPECT_GT(diff / top, 1e-3) << family;
  }
}

TEST(HfConfigRope, ReadsRopeParametersAndLegacyKeysAlike) {
  auto cfg = fixture_config();
  cfg["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 5e5}, {"factor", 8.0},
                            {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 64}};
  const ModelConfig a = model_config_from_hf(cfg, "a/config.json");
  cfg.erase("rope_parameters");
  cfg["rope_theta"] = 5e5;
  cfg["rope_scaling"] = {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  const ModelConfig b = model_config_from_hf(cfg, "b/config.json");
  EXPECT_EQ(model_config_to_hf(a), model_config_to_hf(b));
  EXPECT_EQ(a.rope_type, "llama3");
  EXPECT_EQ(a.rope_theta, 5e5);
  EXPECT_EQ(a.rope_original_max_position_embeddings, 64);
  EXPECT_EQ(rope_frequencies(model_config_from_hf(model_config_to_hf(a), "c"), false, 0).inv_freq,
            rope_frequencies(a, false, 0).inv_freq);

  cfg["rope_scaling"]["type"] = "longrope";
  test::expect_user_error([&] { model_config_from_hf(cfg, "d/config.json"); },
                          {"d/config.json", "'longrope'", "rope_scaling"});
}

// Incremental decoding with the KV cache computes the full forward's logits, also with q/k/v
// biases (qwen2) and a sliding window shorter than the sequence (mistral_swa).
TEST(HfModel, KvCacheMatchesFullForward) {
  for (const char* family : {"qwen2", "mistral_swa"}) {
    CpuBackend be;
    auto m = load_hf_model(test::hf_fixture(family), &be);
    std::mt19937 rng(std::random_device{}());
    std::vector<int32_t> ids(20);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % 256);
    const auto T = static_cast<int64_t>(ids.size());
    const std::vector<double> full = m->forward_logits(ids.data(), 1, T);
    auto cache = m->make_kv_cache(T);
    std::vector<float> last = m->feed(*cache, ids.data(), 5);  // a prompt, then one at a time
    for (int64_t t = 5; t < T; ++t) last = m->feed(*cache, ids.data() + t, 1);
    double diff = 0;
    for (int64_t v = 0; v < 256; ++v)
      diff = std::max(diff, std::abs(last[v] - full[(T - 1) * 256 + v]));
    EXPECT_LT(diff, 1e-5) << family;
  }
}

// llama3 scaling by hand (transformers' _compute_llama3_parameters) on a head whose four
// frequencies fall into all three bands: kept (short), smoothed (medium), divided (long).
TEST(HfConfigRope, Llama3AndLinearScaling) {
  ModelConfig c;
  c.hidden_size = 32;
  c.num_attention_heads = 4;  // head size 8: inv_freq 1, 0.1, 0.01, 0.001
  c.rope_theta = 10000;
  c.rope_type = "llama3";
  c.rope_factor = 8;
  c.rope_low_freq_factor = 1;
  c.rope_high_freq_factor = 4;
  c.rope_original_max_position_embeddings = 1024;  // wavelengths: short < 256 <= medium <= 1024
  const std::vector<double> inv = rope_frequencies(c, false, 0).inv_freq;
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_NEAR(inv[0], 1.0, 1e-7);
  EXPECT_NEAR(inv[1], 0.1, 1e-8);
  const double f = 0.01, smooth = (1024 / (2 * M_PI / f) - 1) / 3;
  EXPECT_NEAR(inv[2], (1 - smooth) * f / 8 + smooth * f, 1e-9);
  EXPECT_GT(smooth, 0.1);
  EXPECT_NEAR(inv[3], 0.001 / 8, 1e-11);
  c.rope_type = "linear";
  c.rope_factor = 4;
  EXPECT_NEAR(rope_frequencies(c, false, 0).inv_freq[1], 0.1 / 4, 1e-8);
}

}  // namespace
}  // namespace lmt
