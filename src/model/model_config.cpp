// ModelConfig::validate: the shape checks every consumer of a ModelConfig relies on. Messages name
// the key as it appears in the YAML config (model.hidden_size) and the offending value.
#include "model/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/rope.h"

namespace lmt {

namespace {
template <class T>
void require(bool ok, const char* key, const char* rule, T got) {
  if (!ok) throw UserError(fmt::format("model.{} must be {} (got {})", key, rule, got));
}

constexpr int64_t kSaturated = INT64_MAX;

// a * b and a + b, saturating at INT64_MAX (operands are >= 0).
int64_t mul_sat(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kSaturated : r;
}
int64_t add_sat(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? kSaturated : r;
}

}  // namespace

ModelConfig family_defaults(const std::string& family) {
  if (!one_of(family, kFamilies))
    throw UserError("model family '" + family +
                    "' is not supported (supported: " + choices_text(kFamilies) + ")");
  ModelConfig c;
  c.family = family;
  if (family == "mistral") {
    c.sliding_window = 4096;
  } else if (family == "qwen2") {
    c.attention_bias = true;
    c.rope_theta = 1e6;
    c.rms_norm_eps = 1e-6;
  } else if (family == "qwen3") {
    c.rope_theta = 1e6;
    c.rms_norm_eps = 1e-6;
  } else if (family.starts_with("gemma")) {
    c.hidden_act = "gelu_pytorch_tanh";
    c.tie_word_embeddings = true;
    c.rms_norm_eps = 1e-6;
    c.head_dim = 256;
    if (family == "gemma2") {
      c.attn_logit_softcapping = 50.0;
      c.final_logit_softcapping = 30.0;
      c.query_pre_attn_scalar = 256;
      c.sliding_window = 4096;
      c.sliding_window_pattern = 2;
    } else if (family == "gemma3") {
      c.query_pre_attn_scalar = 256;
      c.sliding_window = 512;
      c.sliding_window_pattern = 6;
      c.rope_theta = 1e6;
      c.rope_local_base_freq = 10000;
    }
  } else if (family == "gpt2") {
    c.hidden_act = "gelu_pytorch_tanh";
    c.tie_word_embeddings = true;
    c.intermediate_size = 4 * c.hidden_size;
    c.vocab_size = 50257;
    c.max_position_embeddings = 1024;
  }
  return c;
}

void derive_unset_keys(ModelConfig& c, const std::vector<std::string>& given) {
  const bool ffn_given = std::find(given.begin(), given.end(), "intermediate_size") != given.end();
  if (c.family == "gpt2" && !ffn_given) c.intermediate_size = 4 * c.hidden_size;
}

ModelConfig::Traits ModelConfig::traits() const {
  Traits t;
  t.qkv_bias = attention_bias || family == "qwen2";
  if (family.starts_with("gemma")) {
    t.norm_offset = 1.0;
    t.embed_scale = true;
    t.sandwich_norms = family != "gemma";
    t.qk_norm = family == "gemma3";
  } else if (family == "qwen3") {
    t.qk_norm = true;
  } else if (family == "gpt2") {
    t.layernorm = true;
    t.learned_positions = true;
    t.linear_biases = true;
    t.gated_mlp = false;
    t.conv1d = true;
  }
  return t;
}

int64_t ModelConfig::parameter_count() const {
  const Traits t = traits();
  const int64_t C = hidden_size, F = intermediate_size, V = vocab_size, L = num_hidden_layers;
  const int64_t D = head_size(), Q = mul_sat(num_attention_heads, D), KV = mul_sat(kv_heads(), D);
  const int64_t QKV = add_sat(Q, mul_sat(2, KV));
  struct Term {
    const char* keys;
    int64_t n;
  };
  std::vector<Term> terms;
  terms.push_back({"model.vocab_size x model.hidden_size (the embedding)", mul_sat(V, C)});
  if (!tie_word_embeddings)
    terms.push_back({"model.vocab_size x model.hidden_size (the output head)", mul_sat(V, C)});
  int64_t layer = 0;  // one block's parameters
  if (t.conv1d) {
    terms.push_back({"model.max_position_embeddings x model.hidden_size (the position table)",
                     mul_sat(max_position_embeddings, C)});
    for (int64_t n :
         {mul_sat(6, C), mul_sat(C, QKV), QKV, mul_sat(Q, C), mul_sat(mul_sat(2, C), F), F})
      layer = add_sat(layer, n);
    terms.push_back({"the final norm", mul_sat(2, C)});
  } else {
    for (int64_t n : {C, mul_sat(C, QKV), mul_sat(C, Q), C, mul_sat(mul_sat(3, C), F)})
      layer = add_sat(layer, n);
    if (t.qkv_bias) layer = add_sat(layer, QKV);
    if (t.qk_norm) layer = add_sat(layer, mul_sat(2, D));
    if (t.sandwich_norms) layer = add_sat(layer, mul_sat(2, C));
    terms.push_back({"the final norm", C});
  }
  terms.push_back(
      {"model.num_hidden_layers x (model.hidden_size, model.intermediate_size, "
       "model.num_attention_heads, model.head_dim) (the blocks)",
       mul_sat(L, layer)});
  int64_t total = 0;
  const Term* largest = &terms.front();
  for (const Term& term : terms) {
    total = add_sat(total, term.n);
    if (term.n > largest->n) largest = &term;
  }
  if (total > kMaxParameters)
    throw UserError(fmt::format(
        "model: the shape has {} parameters, more than the {} (2^48) lmtrain can address; {} "
        "alone is {}: lower those keys",
        total == kSaturated ? std::string("more than 2^63") : std::to_string(total), kMaxParameters,
        largest->keys,
        largest->n == kSaturated ? std::string("more than 2^63") : std::to_string(largest->n)));
  return total;
}

void ModelConfig::validate() const {
  if (!one_of(family, kFamilies))
    throw UserError("model.family '" + family +
                    "' is not supported (supported: " + choices_text(kFamilies) + ")");
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"vocab_size", vocab_size},
                                   {"hidden_size", hidden_size},
                                   {"intermediate_size", intermediate_size},
                                   {"num_attention_heads", num_attention_heads},
                                   {"num_key_value_heads", num_key_value_heads},
                                   {"head_dim", head_dim},
                                   {"max_position_embeddings", max_position_embeddings}})
    require(value <= kMaxModelDim, key, "at most 2147483647 (2^31 - 1)", value);
  require(num_hidden_layers <= kMaxLayers, "num_hidden_layers", "at most 65536", num_hidden_layers);
  require(vocab_size >= 1, "vocab_size", ">= 1", vocab_size);
  require(hidden_size > 0, "hidden_size", "> 0", hidden_size);
  require(intermediate_size > 0, "intermediate_size", "> 0", intermediate_size);
  require(num_hidden_layers > 0, "num_hidden_layers", "> 0", num_hidden_layers);
  require(num_attention_heads > 0, "num_attention_heads", "> 0", num_attention_heads);
  require(num_key_value_heads >= 0, "num_key_value_heads", ">= 0 (0 = num_attention_heads)",
          num_key_value_heads);
  require(head_dim >= 0, "head_dim", ">= 0 (0 = hidden_size / num_attention_heads)", head_dim);
  require(max_position_embeddings > 0, "max_position_embeddings", "> 0", max_position_embeddings);
  if (head_dim == 0 && hidden_size % num_attention_heads != 0)
    throw UserError(fmt::format(
        "model.hidden_size ({}) must be divisible by model.num_attention_heads ({}) when "
        "model.head_dim is 0",
        hidden_size, num_attention_heads));
  if (num_attention_heads % kv_heads() != 0)
    throw UserError(fmt::format(
        "model.num_attention_heads ({}) must be divisible by model.num_key_value_heads ({})",
        num_attention_heads, kv_heads()));
  if (head_size() % 2 != 0)
    throw UserError(
        fmt::format("the head size ({}) must be even for RoPE: set model.head_dim or "
                    "model.hidden_size / model.num_attention_heads to an even number",
                    head_size()));
  validate_rope(*this);
  require(sliding_window >= 0, "sliding_window", ">= 0 (0 = none)", sliding_window);
  require(rms_norm_eps > 0, "rms_norm_eps", "> 0", rms_norm_eps);
  require(initializer_range >= 0, "initializer_range", ">= 0", initializer_range);
  if (!one_of(hidden_act, kHiddenActs))
    throw UserError("model.hidden_act '" + hidden_act +
                    "' is not supported (supported: " + choices_text(kHiddenActs) + ")");
  require(sliding_window_pattern >= 0, "sliding_window_pattern", ">= 0", sliding_window_pattern);
  require(attn_logit_softcapping >= 0, "attn_logit_softcapping", ">= 0 (0 = off)",
          attn_logit_softcapping);
  require(final_logit_softcapping >= 0, "final_logit_softcapping", ">= 0 (0 = off)",
          final_logit_softcapping);
  require(query_pre_attn_scalar >= 0, "query_pre_attn_scalar", ">= 0 (0 = head_dim)",
          query_pre_attn_scalar);
  if (family == "gpt2" && (num_key_value_heads != 0 && num_key_value_heads != num_attention_heads))
    throw UserError("model.num_key_value_heads must be 0 or num_attention_heads for gpt2");
  if (family == "gpt2" && head_size() * num_attention_heads != hidden_size)
    throw UserError("model.head_dim must be 0 or hidden_size / num_attention_heads for gpt2");
  require(bos_token_id >= -1 && bos_token_id < vocab_size, "bos_token_id",
          "-1 or an id below model.vocab_size", bos_token_id);
  require(eos_token_id >= -1 && eos_token_id < vocab_size, "eos_token_id",
          "-1 or an id below model.vocab_size", eos_token_id);
  parameter_count();  // throws when the shape is too large to address
}

}  // namespace lmt
