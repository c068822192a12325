#include "io/hf_config.h"

#include <fstream>
#include <type_traits>

#include "core/error.h"
#include "io/hf_rope.h"

namespace lmt {

namespace {

// config.json holds the model's fields under the same names (ModelConfig::visit lists them), but
// for family (written as model_type) and the token ids, which Hugging Face omits when unset and
// some models store as lists.
bool is_plain_key(const char* name) {
  const std::string n = name;
  return n != "family" && n != "bos_token_id" && n != "eos_token_id" &&
         n != "sliding_window" && !n.starts_with("rope_") ;
}

const char* architecture_of(const std::string& family) {
  if (family == "mistral") return "MistralForCausalLM";
  if (family == "qwen2") return "Qwen2ForCausalLM";
  return "LlamaForCausalLM";
}

struct HfWriter {
  nlohmann::json& j;
  template <class T>
  void operator()(const char* name, T& field, const char*) {
    if (is_plain_key(name)) j[name] = field;
  }
};

struct HfReader {
  const nlohmann::json& j;
  const std::string& where;
  template <class T>
  void operator()(const char* name, T& field, const char*) {
    if (!is_plain_key(name) || !j.contains(name) || j[name].is_null()) return;
    try {
      field = j[name].get<T>();
    } catch (const nlohmann::json::exception&) {
      throw UserError(where + ": key '" + name + "' has the wrong type (" + j[name].dump() + ")");
    }
  }
};

}  // namespace

nlohmann::json model_config_to_hf(const ModelConfig& config) {
  ModelConfig c = config;
  c.num_key_value_heads = c.kv_heads();  // resolved, as Hugging Face writes them
  c.head_dim = c.head_size();
  nlohmann::json j;
  j["architectures"] = {architecture_of(c.family)};
  j["model_type"] = c.family;
  HfWriter w{j};
  c.visit(w);
  write_hf_rope(c, j);
  if (c.family == "mistral")
    j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
  else if (c.sliding_window > 0)
    j["sliding_window"] = c.sliding_window;
  if (c.family != "qwen2") j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["torch_dtype"] = "float32";
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
  return j;
}

ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw UserError(where + ": not a JSON object");
  ModelConfig c;
  std::string type = j.value("model_type", std::string());
  if (type != "llama" && type != "mistral" && type != "qwen2")
    throw UserError(where + ": unsupported model_type '" + type +
                    "' (supported: llama, mistral, qwen2)");
  c.family = type;
  if (j.contains("architectures") && j["architectures"].is_array()) {
    for (const auto& a : j["architectures"])
      if (a != architecture_of(type))
        throw UserError(where + ": unsupported architecture " + a.dump() + " for model_type '" +
                        type + "' (supported: " + architecture_of(type) + ")");
  }
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (j.contains(key) && j[key] == true)
      throw UserError(where + ": '" + key + "': true is not supported (lmtrain's " + type +
                      " has no biases)");
  c.attention_bias = type == "qwen2";  // Qwen2's q/k/v projections always have biases
  if (type == "qwen2" && j.value("use_sliding_window", false) == true)
    throw UserError(where + ": 'use_sliding_window': true is not supported for qwen2");
  HfReader r{j, where};
  c.visit(r);
  read_hf_rope(j, where, c);
  if (j.contains("sliding_window") && !j["sliding_window"].is_null() &&
      j.value("use_sliding_window", true)) {
    if (!j["sliding_window"].is_number_integer())
      throw UserError(where + ": key 'sliding_window' must be an integer or null (got " +
                      j["sliding_window"].dump() + ")");
    c.sliding_window = j["sliding_window"].get<int64_t>();
  }
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
