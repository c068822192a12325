// ModelConfig::validate: the shape checks every consumer of a ModelConfig relies on. Messages name
// the key as it appears in the YAML config (model.hidden_size) and the offending value.
#include "model/model_config.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "model/rope.h"

namespace lmt {

namespace {
template <class T>
void require(bool ok, const char* key, const char* rule, T got) {
  if (!ok) throw UserError(fmt::format("model.{} must be {} (got {})", key, rule, got));
}
}  // namespace

void ModelConfig::validate() const {
  if (family != "llama" && family != "mistral" && family != "qwen2")
    throw UserError("model.family '" + family +
                    "' is not supported (supported: llama, mistral, qwen2)");
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
  if (hidden_act != "silu")
    throw UserError("model.hidden_act '" + hidden_act + "' is not supported (supported: silu)");
  require(bos_token_id >= -1 && bos_token_id < vocab_size, "bos_token_id",
          "-1 or an id below model.vocab_size", bos_token_id);
  require(eos_token_id >= -1 && eos_token_id < vocab_size, "eos_token_id",
          "-1 or an id below model.vocab_size", eos_token_id);
}

}  // namespace lmt
