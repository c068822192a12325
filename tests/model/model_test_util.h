// Helpers of the model tests: random token ids, and a model's parameters all made random.
#pragma once

#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/model_config.h"
#include "model/transformer.h"

namespace lmt::test {

inline std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& x : ids) x = static_cast<int32_t>(g() % vocab);
  return ids;
}

// Every parameter of an f64 model random, N(0, std); norm weights around their initial value
// (1, or 0 where the norm scales by (1 + w)), so they are not all the same.
inline void randomise(Transformer& m, uint64_t seed, double std) {
  std::vector<double> w(static_cast<size_t>(m.flat_size()), 0.0);
  fill_normal(w.data(), m.flat_size(), 0.0, std, seed, 7);
  for (const ParamInfo& p : m.params())
    if (p.kind == ParamKind::norm)
      for (int64_t i = 0; i < p.numel(); ++i) w[p.offset + i] += m.norm_init();
  m.backend()->from_host(m.params_data(), w.data(), w.size() * sizeof(double));
}

// n floats drawn N(0, std) from `seed`.
inline std::vector<float> random_floats(int64_t n, uint64_t seed, double std) {
  std::vector<float> w(static_cast<size_t>(n));
  fill_normal(w.data(), n, 0.0, std, seed, 11);
  return w;
}

struct Variant {
  const char* name;
  ModelConfig cfg;
};
inline void PrintTo(const Variant& v, std::ostream* os) {
  *os << v.name;
}

inline ModelConfig tiny(const std::string& family) {
  ModelConfig c = family_defaults(family);
  c.vocab_size = 11;
  c.hidden_size = 12;
  c.intermediate_size = 10;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 3;
  c.num_key_value_heads = family == "gpt2" ? 0 : 1;
  c.head_dim = family == "gpt2" ? 0 : 4;
  c.max_position_embeddings = 32;
  c.rope_theta = 100.0;
  return c;
}

// Every family and its switches, as tiny models.
inline std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"llama", tiny("llama")});
  ModelConfig mistral = tiny("mistral");
  mistral.sliding_window = 3;
  v.push_back({"mistral_window3", mistral});
  v.push_back({"qwen2", tiny("qwen2")});
  v.push_back({"qwen3", tiny("qwen3")});
  ModelConfig gemma = tiny("gemma");
  gemma.tie_word_embeddings = false;
  v.push_back({"gemma_untied", gemma});
  ModelConfig gemma2 = tiny("gemma2");
  gemma2.sliding_window = 3;
  gemma2.attn_logit_softcapping = 0.5;  // small caps, so they bend the values used here
  gemma2.final_logit_softcapping = 0.8;
  gemma2.query_pre_attn_scalar = 7;
  v.push_back({"gemma2", gemma2});
  ModelConfig gemma3 = tiny("gemma3");
  gemma3.num_hidden_layers = 3;
  gemma3.sliding_window = 3;
  gemma3.sliding_window_pattern = 3;  // layers 0, 1 windowed, layer 2 global
  gemma3.rope_theta = 1000.0;
  gemma3.rope_local_base_freq = 10.0;
  gemma3.query_pre_attn_scalar = 5;
  v.push_back({"gemma3", gemma3});
  ModelConfig yarn = tiny("llama");
  yarn.rope_type = "yarn";
  yarn.rope_factor = 4.0;
  yarn.rope_original_max_position_embeddings = 8;
  v.push_back({"llama_yarn", yarn});
  ModelConfig dynamic = tiny("qwen3");
  dynamic.rope_type = "dynamic";
  dynamic.rope_factor = 2.0;
  dynamic.max_position_embeddings = 6;  // shorter than the test rows: the base grows
  v.push_back({"qwen3_dynamic", dynamic});
  v.push_back({"gpt2", tiny("gpt2")});
  ModelConfig gpt2 = tiny("gpt2");
  gpt2.tie_word_embeddings = false;
  v.push_back({"gpt2_untied", gpt2});
  ModelConfig relu = tiny("llama");  // a gated ReLU (ReGLU) and modded-nanogpt's plain ReLU^2
  relu.hidden_act = "relu";
  v.push_back({"llama_relu", relu});
  ModelConfig relu2 = tiny("gpt2");
  relu2.hidden_act = "relu2";
  v.push_back({"gpt2_relu2", relu2});
  return v;
}

}  // namespace lmt::test
