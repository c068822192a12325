// The shape of a decoder-only model, with Hugging Face config.json key names so that a config
// file, an imported model directory and an exported one speak one language. Declared once: the
// visit() list drives YAML parsing, printing and saving.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lmt {

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
  // RoPE scaling (Hugging Face rope_scaling / rope_parameters): "default", "linear" (factor) or
  // "llama3" (factor, low/high_freq_factor, original_max_position_embeddings).
  std::string rope_type = "default";
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position_embeddings = 8192;
  bool attention_bias = false;  // q/k/v projections have biases (qwen2)
  int64_t sliding_window = 0;  // > 0: each query attends to this many keys (itself included)
  // The RoPE scaling and window fields above come from config.json only (hf_config.cpp reads and
  // writes them); they are not in visit() and so not yet settable from a YAML run config.
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;
  std::string hidden_act = "silu";
  int64_t bos_token_id = -1;  // -1: none
  int64_t eos_token_id = -1;

  template <class V>
  void visit(V& v) {
    v("family", family, "model family: llama");
    v("vocab_size", vocab_size, "number of token ids");
    v("hidden_size", hidden_size, "width of the residual stream");
    v("intermediate_size", intermediate_size, "hidden width of the MLP");
    v("num_hidden_layers", num_hidden_layers, "number of transformer blocks");
    v("num_attention_heads", num_attention_heads, "query heads per layer");
    v("num_key_value_heads", num_key_value_heads, "key/value heads (grouped-query); 0 = all");
    v("head_dim", head_dim, "width of one head; 0 = hidden_size / num_attention_heads");
    v("max_position_embeddings", max_position_embeddings, "longest sequence the model supports");
    v("rope_theta", rope_theta, "RoPE base frequency");
    v("rms_norm_eps", rms_norm_eps, "epsilon of RMSNorm");
    v("tie_word_embeddings", tie_word_embeddings, "share the embedding with the output head");
    v("initializer_range", initializer_range, "std of the normal initialisation");
    v("hidden_act", hidden_act, "MLP activation: silu");
    v("bos_token_id", bos_token_id, "beginning-of-sequence id, -1 for none");
    v("eos_token_id", eos_token_id, "end-of-sequence id, -1 for none");
  }

  int64_t kv_heads() const {
    return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads;
  }
  int64_t head_size() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  // RoPE inverse frequencies [head_size / 2], scaled as rope_type says, as transformers computes
  // them.
  std::vector<double> rope_inv_freq() const;
  // Throws UserError naming the key when the shape is inconsistent.
  void validate() const;
};

}  // namespace lmt
