// The shape of a decoder-only model, with Hugging Face config.json key names so that a config
// file, an imported model directory and an exported one speak one language. Declared once: the
// visit() list drives YAML parsing, printing and saving.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config_checks.h"

namespace lmt {

// The values the model's string keys take, declared with the keys in visit() (so --help-config
// lists them) and checked by validate(): the families lmtrain implements, the MLP activations,
// the RoPE scalings.
inline constexpr Choices kFamilies = {"llama",  "mistral", "qwen2",  "qwen3",
                                      "gemma",  "gemma2",  "gemma3", "gpt2"};
inline constexpr Choices kHiddenActs = {"silu", "gelu_pytorch_tanh", "relu", "relu2"};
inline constexpr Choices kRopeTypes = {"default", "linear", "dynamic", "llama3", "yarn"};

struct ModelConfig {
  std::string family = "llama";
  int64_t vocab_size = 32000;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 2048;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t num_key_value_heads = 0;  // 0: same as num_attention_heads
  int64_t head_dim = 0;             // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rope_theta = 10000.0;
  // RoPE scaling (Hugging Face rope_scaling / rope_parameters): "default", "linear" (factor),
  // "dynamic" (NTK, factor), "llama3" (factor, low/high_freq_factor,
  // original_max_position_embeddings) or "yarn" (factor, original_max_position_embeddings,
  // attention_factor, beta_fast, beta_slow, mscale, mscale_all_dim, truncate).
  std::string rope_type = "default";
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position_embeddings = 0;  // 0: max_position_embeddings
  double rope_attention_factor = 0.0;                 // yarn: 0 = derived from factor / mscale
  double rope_beta_fast = 32.0;
  double rope_beta_slow = 1.0;
  double rope_mscale = 0.0;
  double rope_mscale_all_dim = 0.0;
  bool rope_truncate = true;
  // gemma3: sliding-window layers use plain RoPE with this base; 0 = rope_theta and the scaling.
  double rope_local_base_freq = 0.0;
  bool attention_bias = false;  // q/k/v projections have biases (qwen2; a family trait there)
  int64_t sliding_window = 0;   // > 0: a windowed query attends to this many keys (itself included)
  // Which layers use the window: 0 = all; n > 0 = all but every n-th (layer i is global when
  // (i + 1) % n == 0): gemma2 is 2, gemma3 6.
  int64_t sliding_window_pattern = 0;
  double attn_logit_softcapping = 0.0;   // > 0: scores = cap * tanh(scores / cap) (gemma2)
  double final_logit_softcapping = 0.0;  // > 0: the same on the output logits (gemma2)
  double query_pre_attn_scalar = 0.0;    // > 0: scores scale by its -1/2 power, not head_dim's
  double rms_norm_eps = 1e-5;            // also LayerNorm's epsilon (gpt2)
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;
  std::string hidden_act = "silu";  // silu, gelu_pytorch_tanh, relu or relu2 (relu(x)^2)
  int64_t bos_token_id = -1;        // -1: none
  int64_t eos_token_id = -1;

  template <class V>
  void visit(V& v) {
    v("family", family, "model family", kFamilies);
    v("vocab_size", vocab_size, "number of token ids");
    v("hidden_size", hidden_size, "width of the residual stream");
    v("intermediate_size", intermediate_size, "hidden width of the MLP");
    v("num_hidden_layers", num_hidden_layers, "number of transformer blocks");
    v("num_attention_heads", num_attention_heads, "query heads per layer");
    v("num_key_value_heads", num_key_value_heads, "key/value heads (grouped-query); 0 = all");
    v("head_dim", head_dim, "width of one head; 0 = hidden_size / num_attention_heads");
    v("max_position_embeddings", max_position_embeddings, "longest sequence the model supports");
    v("rope_theta", rope_theta, "RoPE base frequency");
    v("rope_type", rope_type, "RoPE scaling", kRopeTypes);
    v("rope_factor", rope_factor, "RoPE scaling factor (linear, dynamic, llama3, yarn)");
    v("rope_low_freq_factor", rope_low_freq_factor, "llama3 RoPE: low-frequency factor");
    v("rope_high_freq_factor", rope_high_freq_factor, "llama3 RoPE: high-frequency factor");
    v("rope_original_max_position_embeddings", rope_original_max_position_embeddings,
      "llama3 / yarn RoPE: the pre-scaling context; 0 = max_position_embeddings");
    v("rope_attention_factor", rope_attention_factor,
      "yarn RoPE: cos/sin multiplier; 0 = derived from rope_factor and the mscales");
    v("rope_beta_fast", rope_beta_fast, "yarn RoPE: fast rotation boundary");
    v("rope_beta_slow", rope_beta_slow, "yarn RoPE: slow rotation boundary");
    v("rope_mscale", rope_mscale, "yarn RoPE: mscale (0 = unset)");
    v("rope_mscale_all_dim", rope_mscale_all_dim, "yarn RoPE: mscale_all_dim (0 = unset)");
    v("rope_truncate", rope_truncate, "yarn RoPE: round the correction range to integers");
    v("rope_local_base_freq", rope_local_base_freq,
      "RoPE base of sliding-window layers (gemma3); 0 = rope_theta with the scaling");
    v("attention_bias", attention_bias, "q/k/v projections have biases (always on for qwen2)");
    v("sliding_window", sliding_window, "keys a windowed query sees (itself included); 0 = none");
    v("sliding_window_pattern", sliding_window_pattern,
      "0 = every layer windowed; n = every n-th layer global, the rest windowed");
    v("attn_logit_softcapping", attn_logit_softcapping,
      "> 0: attention scores become cap * tanh(score / cap)");
    v("final_logit_softcapping", final_logit_softcapping,
      "> 0: output logits become cap * tanh(logit / cap)");
    v("query_pre_attn_scalar", query_pre_attn_scalar,
      "> 0: attention scores scale by its -1/2 power instead of head_dim's");
    v("rms_norm_eps", rms_norm_eps, "epsilon of RMSNorm (LayerNorm for gpt2)");
    v("tie_word_embeddings", tie_word_embeddings, "share the embedding with the output head");
    v("initializer_range", initializer_range, "std of the normal initialisation");
    v("hidden_act", hidden_act,
      "MLP activation (relu2 is relu(x)^2, as in modded-nanogpt; with train.activation_bits: 1 "
      "on gpt2)",
      kHiddenActs);
    v("bos_token_id", bos_token_id, "beginning-of-sequence id, -1 for none");
    v("eos_token_id", eos_token_id, "end-of-sequence id, -1 for none");
  }

  int64_t kv_heads() const {
    return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads;
  }
  int64_t head_size() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  // Layer l attends through the sliding window.
  bool is_sliding_layer(int64_t l) const {
    if (sliding_window <= 0) return false;
    return sliding_window_pattern <= 0 || (l + 1) % sliding_window_pattern != 0;
  }
  // What the family fixes (not configurable): see family_traits().
  struct Traits {
    bool layernorm = false;          // LayerNorm with bias instead of RMSNorm (gpt2)
    double norm_offset = 0.0;        // RMSNorm scales by (norm_offset + w): 1 for gemma
    bool embed_scale = false;        // embeddings multiplied by sqrt(hidden_size) (gemma)
    bool qk_norm = false;            // RMSNorm per head on q and k before RoPE (qwen3, gemma3)
    bool sandwich_norms = false;     // also a norm after attention and after the MLP (gemma2/3)
    bool learned_positions = false;  // a position table, no RoPE (gpt2)
    bool linear_biases = false;      // every linear layer and norm has a bias (gpt2)
    bool gated_mlp = true;           // act(gate) * up; false: act(fc) (gpt2)
    bool conv1d = false;             // weights stored [in, out] (gpt2's Conv1D)
    bool qkv_bias = false;           // q/k/v biases: attention_bias, always for qwen2
  };
  Traits traits() const;
  // Throws UserError naming the key when the shape is inconsistent or too large to address
  // (see kMaxModelDim, kMaxLayers, kMaxParameters).
  void validate() const;
  // Parameters of the model (a tied head counted once), from the shape alone, without building
  // the layout; UserError naming the keys behind the largest term when above kMaxParameters.
  // validate() calls it last: call it on a config whose other checks hold (heads > 0, ...).
  int64_t parameter_count() const;
};

// Bounds on a shape, far above any real model, under which every count and byte size lmtrain
// derives from it fits in 64 bits (a layout's padding, f64 copies, optimizer state). Widths are
// 32-bit in the kernels and token ids are int32; the layer bound keeps the per-tensor layout
// (a dozen entries a layer) small enough to build at once.
inline constexpr int64_t kMaxModelDim = 2147483647;          // vocab_size, hidden_size, ...
inline constexpr int64_t kMaxLayers = int64_t{1} << 16;      // num_hidden_layers
inline constexpr int64_t kMaxParameters = int64_t{1} << 48;  // 2.8e14 (1 PiB of f32)

// A small model of a family with that family's fixed choices (activation, norms, tied head,
// soft-capping, window pattern, RoPE bases) set as Hugging Face's configs set them; the shape keys
// keep ModelConfig's defaults. Throws UserError naming the family when it is unknown.
ModelConfig family_defaults(const std::string& family);

// Keys that follow others unless a config gives them: gpt2's intermediate_size is 4 * hidden_size
// (transformers' n_inner = None). `given`: the model keys the config names (without "model.").
void derive_unset_keys(ModelConfig& c, const std::vector<std::string>& given);

}  // namespace lmt
