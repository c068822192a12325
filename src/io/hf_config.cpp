#include "io/hf_config.h"

#include <fstream>
#include <type_traits>

#include "core/error.h"

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

// The RoPE keys, from transformers 5's rope_parameters or the older rope_theta / rope_scaling.
void read_rope(const nlohmann::json& j, const std::string& where, ModelConfig& c) {
  auto number = [&](const nlohmann::json& o, const char* key, const std::string& ctx,
                    auto& field) {
    if (!o.contains(key) || o[key].is_null()) return;
    if (!o[key].is_number())
      throw UserError(where + ": key '" + ctx + key + "' must be a number (got " + o[key].dump() +
                      ")");
    field = o[key].get<std::remove_reference_t<decltype(field)>>();
  };
  auto scaling = [&](const nlohmann::json& o, const std::string& ctx) {
    if (!o.is_object())
      throw UserError(where + ": key '" + ctx + "' must be an object (got " + o.dump() + ")");
    const char* type_key = o.contains("rope_type") ? "rope_type" : "type";
    if (o.contains(type_key)) {
      if (!o[type_key].is_string())
        throw UserError(where + ": key '" + ctx + "." + type_key + "' must be a string");
      c.rope_type = o[type_key].get<std::string>();
    }
    const std::string p = ctx + ".";
    number(o, "rope_theta", p, c.rope_theta);
    number(o, "factor", p, c.rope_factor);
    number(o, "low_freq_factor", p, c.rope_low_freq_factor);
    number(o, "high_freq_factor", p, c.rope_high_freq_factor);
    number(o, "original_max_position_embeddings", p, c.rope_original_max_position_embeddings);
    if (c.rope_type != "default" && c.rope_type != "linear" && c.rope_type != "llama3")
      throw UserError(where + ": rope type '" + c.rope_type + "' in '" + ctx +
                      "' is not supported (supported: default, linear, llama3)");
  };
  number(j, "rope_theta", "", c.rope_theta);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    scaling(j["rope_scaling"], "rope_scaling");
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null())
    scaling(j["rope_parameters"], "rope_parameters");
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
  j["rope_theta"] = c.rope_theta;
  if (c.rope_type != "default") {
    nlohmann::json r{{"rope_type", c.rope_type}, {"factor", c.rope_factor}};
    if (c.rope_type == "llama3") {
      r["low_freq_factor"] = c.rope_low_freq_factor;
      r["high_freq_factor"] = c.rope_high_freq_factor;
      r["original_max_position_embeddings"] = c.rope_original_max_position_embeddings;
    }
    j["rope_scaling"] = r;
  }
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
  read_rope(j, where, c);
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
