#include "io/hf_config.h"

#include <fstream>

#include "core/error.h"

namespace lmt {

nlohmann::json model_config_to_hf(const ModelConfig& c) {
  nlohmann::json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.kv_heads();
  j["head_dim"] = c.head_size();
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rope_theta"] = c.rope_theta;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["initializer_range"] = c.initializer_range;
  j["hidden_act"] = c.hidden_act;
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["torch_dtype"] = "float32";
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
  return j;
}

namespace {
template <class T>
void read_key(const nlohmann::json& j, const char* key, T& out, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return;
  try {
    out = j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw UserError(where + ": key '" + key + "' has the wrong type (" + j[key].dump() + ")");
  }
}
}  // namespace

ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw UserError(where + ": not a JSON object");
  ModelConfig c;
  std::string type = j.value("model_type", std::string());
  if (type != "llama")
    throw UserError(where + ": unsupported model_type '" + type + "' (supported: llama)");
  c.family = type;
  read_key(j, "vocab_size", c.vocab_size, where);
  read_key(j, "hidden_size", c.hidden_size, where);
  read_key(j, "intermediate_size", c.intermediate_size, where);
  read_key(j, "num_hidden_layers", c.num_hidden_layers, where);
  read_key(j, "num_attention_heads", c.num_attention_heads, where);
  read_key(j, "num_key_value_heads", c.num_key_value_heads, where);
  read_key(j, "head_dim", c.head_dim, where);
  read_key(j, "max_position_embeddings", c.max_position_embeddings, where);
  read_key(j, "rope_theta", c.rope_theta, where);
  read_key(j, "rms_norm_eps", c.rms_norm_eps, where);
  read_key(j, "tie_word_embeddings", c.tie_word_embeddings, where);
  read_key(j, "initializer_range", c.initializer_range, where);
  read_key(j, "hidden_act", c.hidden_act, where);
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    c.bos_token_id = j["bos_token_id"].get<int64_t>();
  if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer())
    c.eos_token_id = j["eos_token_id"].get<int64_t>();
  return c;
}

ModelConfig read_hf_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UserError("'" + path + "' not found");
  auto j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded()) throw UserError(path + ": not valid JSON");
  return model_config_from_hf(j, path);
}

}  // namespace lmt
