// config.json of every family: the fixtures' files read to the fields transformers uses, every
// family's written config reads back to the same model, and each key lmtrain cannot honour is one
// error naming the file and key. gpt2 checkpoints saved from the bare GPT2Model (no
// "transformer." prefix, with causal-mask buffers) load like lmtrain's own names.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "hf_test_util.h"
#include "io/hf_config.h"
#include "io/hf_model.h"
#include "io/safetensors.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

nlohmann::json fixture_json(const std::string& family) {
  std::ifstream in(test::hf_fixture(family) + "/config.json");
  return nlohmann::json::parse(in);
}

TEST(HfFamilies, FixtureConfigsReadAsTransformersMeansThem) {
  const ModelConfig g2 = read_hf_model_config(test::hf_fixture("gemma2"));
  EXPECT_EQ(g2.family, "gemma2");
  EXPECT_EQ(g2.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(g2.head_size(), 16);
  EXPECT_EQ(g2.sliding_window, 8);
  EXPECT_EQ(g2.sliding_window_pattern, 2);
  EXPECT_TRUE(g2.is_sliding_layer(0));
  EXPECT_FALSE(g2.is_sliding_layer(1));
  EXPECT_EQ(g2.attn_logit_softcapping, 50.0);
  EXPECT_EQ(g2.final_logit_softcapping, 30.0);
  EXPECT_EQ(g2.query_pre_attn_scalar, 16.0);
  EXPECT_TRUE(g2.tie_word_embeddings);
  EXPECT_EQ(g2.rms_norm_eps, 1e-6);

  const ModelConfig gpt2 = read_hf_model_config(test::hf_fixture("gpt2"));
  EXPECT_EQ(gpt2.hidden_size, 32);
  EXPECT_EQ(gpt2.num_hidden_layers, 2);
  EXPECT_EQ(gpt2.num_attention_heads, 4);
  EXPECT_EQ(gpt2.intermediate_size, 128);  // n_inner null: 4 * n_embd
  EXPECT_EQ(gpt2.max_position_embeddings, 256);
  EXPECT_EQ(gpt2.rms_norm_eps, 1e-5);
  EXPECT_EQ(gpt2.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(gpt2.bos_token_id, -1);  // 50256 lies outside this tiny vocabulary

  const ModelConfig q3 = read_hf_model_config(test::hf_fixture("qwen3"));
  EXPECT_EQ(q3.sliding_window, 0);
  EXPECT_FALSE(q3.attention_bias);
  EXPECT_TRUE(q3.traits().qk_norm);
  const ModelConfig q2 = read_hf_model_config(test::hf_fixture("qwen2"));
  EXPECT_TRUE(q2.attention_bias);
}

TEST(HfFamilies, WrittenConfigsReadBackToTheSameModel) {
  for (const char* family :
       {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gpt2"}) {
    SCOPED_TRACE(family);
    ModelConfig c = family_defaults(family);
    c.vocab_size = 1000;
    c.num_hidden_layers = 7;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    if (c.family != "gpt2") c.num_key_value_heads = 4;
    const nlohmann::json j = model_config_to_hf(c);
    const ModelConfig back = model_config_from_hf(j, "x/config.json");
    EXPECT_EQ(model_config_to_hf(back), j);
    // Same parameters, same attention everywhere.
    const auto a = param_layout(c), b = param_layout(back);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(a[i].name + a[i].shape.str(), b[i].name + b[i].shape.str());
    for (int64_t l = 0; l < 7; ++l) EXPECT_EQ(c.is_sliding_layer(l), back.is_sliding_layer(l));
    EXPECT_EQ(back.attn_logit_softcapping, c.attn_logit_softcapping);
    EXPECT_EQ(back.final_logit_softcapping, c.final_logit_softcapping);
    EXPECT_EQ(back.hidden_act, c.hidden_act);
    EXPECT_EQ(back.bos_token_id, 1);
  }
  EXPECT_EQ(model_config_to_hf(family_defaults("gemma3"))["model_type"], "gemma3_text");
  EXPECT_EQ(model_config_to_hf(family_defaults("gpt2"))["architectures"][0], "GPT2LMHeadModel");
}

TEST(HfFamilies, UnsupportedKeysNameTheFileAndKey) {
  auto expect = [](nlohmann::json j, std::initializer_list<std::string> parts) {
    test::expect_user_error([&] { model_config_from_hf(j, "m/config.json"); }, parts);
  };
  nlohmann::json g2 = fixture_json("gemma2");
  g2["layer_types"] = {"sliding_attention", "sliding_attention"};
  g2["num_hidden_layers"] = 3;
  expect(g2, {"m/config.json", "'layer_types'", "one type per layer (3)"});
  g2 = fixture_json("gemma2");
  g2["num_hidden_layers"] = 3;
  g2["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  expect(g2, {"'layer_types'", "not a repeating pattern"});
  g2["layer_types"] = {"full_attention", "chunked_attention", "full_attention"};
  expect(g2, {"'layer_types'", "chunked_attention"});
  nlohmann::json gpt2 = fixture_json("gpt2");
  gpt2["activation_function"] = "gelu";
  expect(gpt2, {"'activation_function'", "'gelu' is not supported"});
  gpt2 = fixture_json("gpt2");
  gpt2["scale_attn_by_inverse_layer_idx"] = true;
  expect(gpt2, {"'scale_attn_by_inverse_layer_idx'"});
  nlohmann::json llama = fixture_json("llama");
  llama["attention_bias"] = true;
  expect(llama, {"'attention_bias'", "o_proj bias"});
  llama = fixture_json("llama");
  llama["n_embd"] = 32;
  llama["model_type"] = "gemma3";
  llama["architectures"] = {"Gemma3ForConditionalGeneration"};
  expect(llama, {"unsupported model_type 'gemma3'", "text_config"});
  nlohmann::json q2 = fixture_json("qwen2");
  q2["use_sliding_window"] = true;
  q2["sliding_window"] = 16;
  expect(q2, {"'use_sliding_window'"});
  nlohmann::json g = fixture_json("gemma");
  g["architectures"] = {"LlamaForCausalLM"};
  expect(g, {"unsupported architecture", "GemmaForCausalLM"});
  g = fixture_json("gemma");
  g["head_dim"] = 15;
  expect(g, {"m/config.json", "must be even"});
}

// The original gpt2 files store the bare GPT2Model: "h.0.attn.c_attn.weight", "wte.weight", plus
// "h.N.attn.bias" mask buffers. They load to the same model as lmtrain's prefixed names.
TEST(HfFamilies, Gpt2WithoutPrefixAndWithMaskBuffersLoads) {
  const std::string src = test::hf_fixture("gpt2");
  const fs::path dir = test::temp_dir() / "gpt2_bare";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(src + "/config.json", dir / "config.json");
  SafetensorsFile f = SafetensorsFile::open(src + "/model.safetensors");
  SafetensorsWriter w;
  for (const std::string& n : f.names())
    w.add_copy(n.substr(std::string("transformer.").size()), f.read_as(n, DType::f32));
  HostTensor mask(DType::f32, Shape{1, 1, 4, 4});
  w.add_copy("h.0.attn.bias", mask);
  w.write((dir / "model.safetensors").string());
  CpuBackend be;
  auto a = load_hf_model(src, &be), b = load_hf_model(dir.string(), &be);
  std::vector<int32_t> ids{3, 1, 4, 1, 5, 9, 2, 6};
  EXPECT_EQ(a->forward_logits(ids.data(), 1, 8), b->forward_logits(ids.data(), 1, 8));
}

// A multimodal gemma3 directory (Gemma3ForConditionalGeneration: text_config, the text model's
// tensors under language_model.model. as released or model.language_model. as transformers 5
// saves them, a vision tower beside) loads as its text model: the same logits as a gemma3_text
// directory holding the same tensors.
TEST(HfFamilies, MultimodalGemma3LoadsItsTextModel) {
  ModelConfig c = family_defaults("gemma3");
  c.vocab_size = 64;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.sliding_window = 4;
  c.sliding_window_pattern = 3;
  c.query_pre_attn_scalar = 8;
  CpuBackend be;
  Transformer m(&be, c);
  m.init_weights(3);
  std::vector<float> flat(static_cast<size_t>(m.flat_size()));
  be.to_host(flat.data(), m.params_data(), flat.size() * 4);
  auto write = [&](const std::string& name, const nlohmann::json& cfg, const std::string& prefix,
                   bool vision) {
    const fs::path dir = test::temp_dir() / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << cfg.dump(2);
    SafetensorsWriter w;
    for (const ParamInfo& p : m.params()) {
      HostTensor t(DType::f32, p.shape);
      std::copy(flat.begin() + p.offset, flat.begin() + p.offset + p.numel(), t.ptr<float>());
      const std::string stored =
          prefix.empty() ? p.name : prefix + p.name.substr(std::string("model.").size());
      w.add_copy(stored, t);
    }
    if (vision) {
      w.add_copy("vision_tower.vision_model.embeddings.patch_embedding.weight",
                 HostTensor(DType::f32, Shape{4, 3}));
      w.add_copy("multi_modal_projector.mm_input_projection_weight",
                 HostTensor(DType::f32, Shape{4, 16}));
    }
    w.write((dir / "model.safetensors").string());
    return dir.string();
  };
  const nlohmann::json text = model_config_to_hf(c);
  nlohmann::json outer = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                          {"model_type", "gemma3"},
                          {"vision_config", {{"model_type", "siglip_vision_model"}}},
                          {"text_config", text}};
  const std::string plain = write("g3_text", text, "", false);
  const std::string released = write("g3_released", outer, "language_model.model.", true);
  const std::string v5 = write("g3_v5", outer, "model.language_model.", true);
  std::vector<int32_t> ids{3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  auto logits = [&](const std::string& dir) {
    return load_hf_model(dir, &be)->forward_logits(ids.data(), 1, 10);
  };
  const std::vector<double> want = logits(plain);
  EXPECT_EQ(logits(released), want);
  EXPECT_EQ(logits(v5), want);
  const ModelConfig r = read_hf_model_config(released);
  EXPECT_EQ(r.family, "gemma3");
  EXPECT_EQ(r.sliding_window_pattern, 3);
  // A text_config that leaves keys out gets Gemma3TextConfig's defaults.
  nlohmann::json sparse = {{"model_type", "gemma3"},
                           {"text_config",
                            {{"hidden_size", 2560},
                             {"num_hidden_layers", 34},
                             {"intermediate_size", 10240},
                             {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}}}};
  const ModelConfig s4 = model_config_from_hf(sparse, "g3/config.json");
  EXPECT_EQ(s4.vocab_size, 262208);
  EXPECT_EQ(s4.head_size(), 256);
  EXPECT_EQ(s4.kv_heads(), 4);
  EXPECT_EQ(s4.sliding_window, 4096);
  EXPECT_EQ(s4.sliding_window_pattern, 6);
  EXPECT_EQ(s4.rope_type, "linear");
  EXPECT_EQ(s4.rope_theta, 1e6);
  EXPECT_TRUE(s4.tie_word_embeddings);
  // The head is tied by the outer config's key (default true), as transformers ties it.
  sparse["text_config"]["tie_word_embeddings"] = false;
  EXPECT_TRUE(model_config_from_hf(sparse, "g3/config.json").tie_word_embeddings);
  sparse["tie_word_embeddings"] = false;
  sparse["text_config"]["tie_word_embeddings"] = true;
  EXPECT_FALSE(model_config_from_hf(sparse, "g3/config.json").tie_word_embeddings);
  // Without its text_config a gemma3 config is refused, naming what is missing.
  test::expect_user_error(
      [&] {
        model_config_from_hf({{"model_type", "gemma3"}}, "g/config.json");
      },
      {"g/config.json", "'gemma3'", "text_config"});
}

}  // namespace
}  // namespace lmt
