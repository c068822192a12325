// config.json <-> ModelConfig for every family. Each family's file speaks its own dialect
// (gpt2's n_embd / n_layer, gemma's hidden_activation, gemma2/3's layer_types and soft-caps,
// gemma3's model_type gemma3_text); reading starts from family_defaults() so keys a file leaves
// out take the family's value, and a key lmtrain cannot honour (a bias it does not have, a
// window pattern it cannot express) is an error naming the key rather than a silently different
// model.
#include "io/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/regular_file.h"
#include "io/hf_rope.h"

namespace lmt {

namespace {

struct FamilyNames {
  const char* family;
  const char* model_type;
  const char* architecture;
};
constexpr FamilyNames kNames[] = {
    {"llama", "llama", "LlamaForCausalLM"},         {"mistral", "mistral", "MistralForCausalLM"},
    {"qwen2", "qwen2", "Qwen2ForCausalLM"},         {"qwen3", "qwen3", "Qwen3ForCausalLM"},
    {"gemma", "gemma", "GemmaForCausalLM"},         {"gemma2", "gemma2", "Gemma2ForCausalLM"},
    {"gemma3", "gemma3_text", "Gemma3ForCausalLM"}, {"gpt2", "gpt2", "GPT2LMHeadModel"},
};

const FamilyNames& names_of(const std::string& family) {
  for (const FamilyNames& n : kNames)
    if (family == n.family) return n;
  throw UserError("model family '" + family + "' has no Hugging Face config");
}

// Reads j[key] into field when present and not null; a wrong type names the key.
class Keys {
 public:
  Keys(const nlohmann::json& j, const std::string& where) : j_(j), where_(where) {}
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  bool present(const char* key) const { return j_.contains(key); }
  template <class T>
  bool get(const char* key, T& field) const {
    if (!has(key)) return false;
    const nlohmann::json& v = j_[key];
    bool ok = false;
    if constexpr (std::is_same_v<T, bool>)
      ok = v.is_boolean();
    else if constexpr (std::is_integral_v<T>)
      ok = v.is_number_integer();
    else if constexpr (std::is_floating_point_v<T>)
      ok = v.is_number();
    else
      ok = v.is_string();
    if (!ok) throw UserError(where_ + ": key '" + key + "' has the wrong type (" + v.dump() + ")");
    field = v.get<T>();
    return true;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw UserError(where_ + ": key '" + key + "' " + why);
  }
  const nlohmann::json& operator[](const char* key) const { return j_[key]; }

 private:
  const nlohmann::json& j_;
  const std::string& where_;
};

// "gelu_new" (gpt2) and "gelu_pytorch_tanh" are the same tanh approximation.
std::string activation_of(const std::string& name, const Keys& k, const char* key) {
  if (name == "silu" || name == "swish") return "silu";
  if (name == "gelu_pytorch_tanh" || name == "gelu_new") return "gelu_pytorch_tanh";
  if (name == "relu" || name == "relu2") return name;
  k.fail(key, "'" + name +
                  "' is not supported (supported: silu, gelu_pytorch_tanh, gelu_new, relu, relu2)");
}

// layer_types (a list of "sliding_attention" / "full_attention") as sliding_window_pattern.
void read_layer_types(const Keys& k, ModelConfig& c) {
  if (!k.has("layer_types")) return;
  const nlohmann::json& lt = k["layer_types"];
  if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.num_hidden_layers)
    k.fail("layer_types",
           "must list one type per layer (" + std::to_string(c.num_hidden_layers) + ")");
  std::vector<bool> sliding;
  for (const auto& t : lt) {
    if (t != "sliding_attention" && t != "full_attention")
      k.fail("layer_types",
             "holds " + t.dump() + " (supported: \"sliding_attention\", \"full_attention\")");
    sliding.push_back(t == "sliding_attention");
  }
  const int64_t L = c.num_hidden_layers;
  if (std::none_of(sliding.begin(), sliding.end(), [](bool s) { return s; })) {
    c.sliding_window = 0;
    return;
  }
  // n = 0: all sliding; else every n-th layer full, which only n = (the first full layer) + 1 can
  // be (one check, not one per candidate: a deep config's list would take L^2).
  const auto first_full = std::find(sliding.begin(), sliding.end(), false);
  const int64_t n = first_full == sliding.end() ? 0 : (first_full - sliding.begin()) + 1;
  bool fits = true;
  for (int64_t i = 0; i < L; ++i) fits &= sliding[i] == (n == 0 || (i + 1) % n != 0);
  if (fits) {
    c.sliding_window_pattern = n;
    return;
  }
  k.fail("layer_types",
         "is not a repeating pattern of sliding layers ending in a full one (lmtrain's "
         "sliding_window_pattern)");
}

nlohmann::json layer_types_of(const ModelConfig& c) {
  nlohmann::json lt = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    lt.push_back(c.is_sliding_layer(l) ? "sliding_attention" : "full_attention");
  return lt;
}

ModelConfig read_gpt2(const Keys& k, ModelConfig c) {
  k.get("vocab_size", c.vocab_size);
  k.get("n_embd", c.hidden_size);
  k.get("n_layer", c.num_hidden_layers);
  k.get("n_head", c.num_attention_heads);
  k.get("n_positions", c.max_position_embeddings);
  c.intermediate_size = 4 * c.hidden_size;
  k.get("n_inner", c.intermediate_size);
  k.get("layer_norm_epsilon", c.rms_norm_eps);
  std::string act = "gelu_new";
  k.get("activation_function", act);
  c.hidden_act = activation_of(act, k, "activation_function");
  bool flag = true;
  if (k.get("scale_attn_weights", flag) && !flag)
    k.fail("scale_attn_weights", "false is not supported");
  if (k.get("scale_attn_by_inverse_layer_idx", flag) && flag)
    k.fail("scale_attn_by_inverse_layer_idx", "true is not supported");
  return c;
}

ModelConfig read_llama_style(const Keys& k, ModelConfig c, const std::string& type) {
  k.get("vocab_size", c.vocab_size);
  k.get("hidden_size", c.hidden_size);
  k.get("intermediate_size", c.intermediate_size);
  k.get("num_hidden_layers", c.num_hidden_layers);
  k.get("num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = 0;
  k.get("num_key_value_heads", c.num_key_value_heads);
  if (!k.get("head_dim", c.head_dim) && !c.family.starts_with("gemma")) c.head_dim = 0;
  k.get("max_position_embeddings", c.max_position_embeddings);
  k.get("rms_norm_eps", c.rms_norm_eps);
  std::string act;
  if (c.family.starts_with("gemma")) {
    // transformers' Gemma uses hidden_activation, and the tanh GELU when it is unset.
    if (k.get("hidden_activation", act)) c.hidden_act = activation_of(act, k, "hidden_activation");
  } else if (k.get("hidden_act", act)) {
    c.hidden_act = activation_of(act, k, "hidden_act");
  }
  bool flag = false;
  if (k.get("mlp_bias", flag) && flag) k.fail("mlp_bias", "true is not supported");
  // qwen2 always has q/k/v biases; llama's attention_bias also adds an o_proj bias, which lmtrain
  // does not have.
  if (type != "qwen2" && k.get("attention_bias", flag) && flag)
    k.fail("attention_bias", c.family == "llama"
                                 ? "true is not supported (lmtrain's llama has no o_proj bias)"
                                 : "true is not supported for " + type);
  // Windows: mistral's applies to every layer; others name their layers in layer_types.
  const bool use_window = !k.has("use_sliding_window") || k["use_sliding_window"] == true;
  if (!use_window || (k.present("sliding_window") && !k.has("sliding_window")))
    c.sliding_window = 0;  // switched off, or null
  else
    k.get("sliding_window", c.sliding_window);
  if (type == "qwen2" || type == "qwen3") {
    if (use_window && c.sliding_window > 0 && k.has("use_sliding_window"))
      k.fail("use_sliding_window", "true is not supported for " + type);
    c.sliding_window = 0;
  } else if (c.sliding_window > 0 && type != "mistral") {
    if (type == "gemma3_text" && !k.has("layer_types"))
      k.get("sliding_window_pattern", c.sliding_window_pattern);
    read_layer_types(k, c);
  }
  if (c.family == "gemma2" || c.family == "gemma3") {
    c.attn_logit_softcapping = 0;
    c.final_logit_softcapping = 0;
    // transformers' Gemma3Attention never applies attn_logit_softcapping (Gemma 3 has none and
    // its configs say null), so a value there does not change the model.
    if (c.family == "gemma2") k.get("attn_logit_softcapping", c.attn_logit_softcapping);
    k.get("final_logit_softcapping", c.final_logit_softcapping);
    k.get("query_pre_attn_scalar", c.query_pre_attn_scalar);
  }
  return c;
}

// The text model of a multimodal gemma3 checkpoint (Gemma3ForConditionalGeneration): its
// text_config, with Gemma3TextConfig's defaults for the keys such files leave out (the released
// 4B-27B configs list only a few), and the token ids and tie_word_embeddings of the outer config.
nlohmann::json gemma3_text_config(const nlohmann::json& j) {
  nlohmann::json t = j["text_config"];
  const nlohmann::json defaults = {{"vocab_size", 262208},
                                   {"hidden_size", 2304},
                                   {"intermediate_size", 9216},
                                   {"num_hidden_layers", 26},
                                   {"num_attention_heads", 8},
                                   {"num_key_value_heads", 4},
                                   {"head_dim", 256},
                                   {"hidden_activation", "gelu_pytorch_tanh"},
                                   {"max_position_embeddings", 131072},
                                   {"rms_norm_eps", 1e-6},
                                   {"query_pre_attn_scalar", 256},
                                   {"sliding_window", 4096},
                                   {"sliding_window_pattern", 6},
                                   {"tie_word_embeddings", true}};
  for (const auto& [key, value] : defaults.items())
    if (!t.contains(key)) t[key] = value;
  if (!t.contains("rope_parameters") && !t.contains("rope_theta")) {
    t["rope_theta"] = 1e6;
    if (!t.contains("rope_local_base_freq")) t["rope_local_base_freq"] = 10000.0;
  }
  for (const char* key : {"bos_token_id", "eos_token_id"})
    if (!t.contains(key) && j.contains(key)) t[key] = j[key];
  // transformers (5.23) ties a Gemma3ForConditionalGeneration's head by the outer config's key
  // (default true), whatever text_config says.
  t["tie_word_embeddings"] = j.value("tie_word_embeddings", true);
  t["model_type"] = "gemma3_text";
  t.erase("architectures");
  return t;
}

// What transformers computes from config.json must be what lmtrain computes: each setting that
// changes the model's function must read back unchanged. A family's config.json cannot express
// some settings lmtrain accepts (a window on llama, soft-capping on qwen2, attention soft-capping
// on gemma3, which transformers' Gemma3 ignores); such a model is refused rather than exported as
// another model.
std::vector<std::string> settings_lost(const ModelConfig& cfg, const ModelConfig& back) {
  std::vector<std::string> lost;
  auto same = [&](const char* key, const auto& a, const auto& b) {
    if (a != b) lost.push_back(fmt::format("model.{} = {} (reads back as {})", key, a, b));
  };
  same("attn_logit_softcapping", cfg.attn_logit_softcapping, back.attn_logit_softcapping);
  same("final_logit_softcapping", cfg.final_logit_softcapping, back.final_logit_softcapping);
  auto scalar = [](const ModelConfig& c) {
    return c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar
                                       : static_cast<double>(c.head_size());
  };
  same("query_pre_attn_scalar", scalar(cfg), scalar(back));
  bool windows_differ = false, any_window = false;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    windows_differ |= cfg.is_sliding_layer(l) != back.is_sliding_layer(l);
    any_window |= cfg.is_sliding_layer(l);
  }
  if (windows_differ)
    lost.push_back(fmt::format("model.sliding_window = {} with sliding_window_pattern = {}",
                               cfg.sliding_window, cfg.sliding_window_pattern));
  else if (any_window)
    same("sliding_window", cfg.sliding_window, back.sliding_window);
  same("attention_bias", cfg.traits().qkv_bias, back.traits().qkv_bias);
  same("hidden_act", cfg.hidden_act, back.hidden_act);
  same("rms_norm_eps", cfg.rms_norm_eps, back.rms_norm_eps);
  same("tie_word_embeddings", cfg.tie_word_embeddings, back.tie_word_embeddings);
  if (!cfg.traits().learned_positions) {
    same("rope_theta", cfg.rope_theta, back.rope_theta);
    same("rope_type", cfg.rope_type, back.rope_type);
    same("rope_factor", cfg.rope_factor, back.rope_factor);
    same("rope_local_base_freq", cfg.rope_local_base_freq, back.rope_local_base_freq);
  }
  return lost;
}

}  // namespace

bool is_multimodal_gemma3(const nlohmann::json& j) {
  // Compared as JSON: value<std::string>() throws json's type_error for "model_type": true.
  return j.is_object() && j.contains("model_type") && j["model_type"] == "gemma3" &&
         j.contains("text_config") && j["text_config"].is_object();
}

nlohmann::json model_config_to_hf(const ModelConfig& config) {
  ModelConfig c = config;
  const FamilyNames& n = names_of(c.family);
  nlohmann::json j;
  j["architectures"] = {n.architecture};
  j["model_type"] = n.model_type;
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["initializer_range"] = c.initializer_range;
  if (c.family == "gpt2") {
    j["n_embd"] = c.hidden_size;
    j["n_layer"] = c.num_hidden_layers;
    j["n_head"] = c.num_attention_heads;
    j["n_positions"] = c.max_position_embeddings;
    j["n_ctx"] = c.max_position_embeddings;
    j["n_inner"] = c.intermediate_size;
    j["layer_norm_epsilon"] = c.rms_norm_eps;
    j["activation_function"] = c.hidden_act == "gelu_pytorch_tanh" ? "gelu_new" : c.hidden_act;
    j["scale_attn_weights"] = true;
    // lmtrain trains without dropout; so does the exported model when fine-tuned further.
    for (const char* key : {"attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout"})
      j[key] = 0.0;
  } else {
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_hidden_layers"] = c.num_hidden_layers;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.kv_heads();
    j["head_dim"] = c.head_size();
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["hidden_act"] = c.hidden_act;
    if (c.family.starts_with("gemma")) j["hidden_activation"] = c.hidden_act;
    write_hf_rope(c, j);
    if (c.family == "llama" || c.family == "qwen3" || c.family.starts_with("gemma"))
      j["attention_bias"] = false;
    if (c.family == "llama") j["mlp_bias"] = false;
    if (c.family == "mistral") {
      j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
    } else if (c.family == "qwen2" || c.family == "qwen3") {
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
    } else if (c.family == "gemma2" || c.family == "gemma3") {
      j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
      j["layer_types"] = layer_types_of(c);
      auto cap = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
      j["attn_logit_softcapping"] = cap(c.attn_logit_softcapping);
      j["final_logit_softcapping"] = cap(c.final_logit_softcapping);
      // An integer in transformers 5's Gemma2Config / Gemma3TextConfig, which refuse 256.0.
      const double scalar = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar
                                                        : static_cast<double>(c.head_size());
      if (scalar == std::floor(scalar))
        j["query_pre_attn_scalar"] = static_cast<int64_t>(scalar);
      else
        j["query_pre_attn_scalar"] = scalar;
    }
  }
  j["torch_dtype"] = "float32";
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
  return j;
}

ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw UserError(where + ": not a JSON object");
  if (j.contains("model_type") && !j["model_type"].is_string())
    throw UserError(where + ": key 'model_type' must be a string (got " +
                    excerpt(j["model_type"].dump()) + ")");
  if (is_multimodal_gemma3(j))
    return model_config_from_hf(gemma3_text_config(j), where + " (text_config)");
  const std::string type = j.value("model_type", std::string());
  const FamilyNames* names = nullptr;
  for (const FamilyNames& n : kNames)
    if (type == n.model_type) names = &n;
  if (!names) {
    std::string hint;
    if (type == "gemma3") hint = "; a gemma3 config needs its text_config";
    throw UserError(where + ": unsupported model_type '" + type +
                    "' (supported: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, "
                    "gpt2" +
                    hint + ")");
  }
  if (j.contains("architectures") && j["architectures"].is_array()) {
    for (const auto& a : j["architectures"])
      if (a != names->architecture)
        throw UserError(where + ": unsupported architecture " + a.dump() + " for model_type '" +
                        type + "' (supported: " + names->architecture + ")");
  }
  const Keys k(j, where);
  ModelConfig c = family_defaults(names->family);
  c = c.family == "gpt2" ? read_gpt2(k, c) : read_llama_style(k, c, type);
  k.get("tie_word_embeddings", c.tie_word_embeddings);
  k.get("initializer_range", c.initializer_range);
  if (c.family != "gpt2") read_hf_rope(j, where, c);
  // Token ids as lmtrain uses them: one id inside the vocabulary (lists, as Llama 3 stores its
  // several end ids, and ids past the vocabulary, as tiny test models keep, are left unset).
  auto token_id = [&](const char* key) -> int64_t {
    if (!j.contains(key) || !j[key].is_number_integer()) return -1;
    const int64_t id = j[key].get<int64_t>();
    return id >= 0 && id < c.vocab_size ? id : -1;
  };
  c.bos_token_id = token_id("bos_token_id");
  c.eos_token_id = token_id("eos_token_id");
  try {
    c.validate();
  } catch (const UserError& e) {
    throw UserError(where + ": " + e.what());
  }
  return c;
}

ModelConfig read_hf_config(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw UserError("'" + path + "' not found");
  auto j = parse_json_bounded(read_regular_file(path, "config.json", kMaxConfigBytes), path);
  if (j.is_discarded()) throw UserError(path + ": not valid JSON");
  return model_config_from_hf(j, path);
}

void check_config_json_holds(const ModelConfig& cfg, const std::string& what) {
  cfg.validate();
  ModelConfig back;
  try {
    back = model_config_from_hf(model_config_to_hf(cfg), "config.json");
  } catch (const UserError& e) {
    throw UserError(what + ": lmtrain cannot yet write a " + cfg.family +
                    " model directory that it reads back (" + e.what() + ")");
  }
  const std::vector<std::string> lost = settings_lost(cfg, back);
  if (lost.empty()) return;
  std::string list;
  for (const std::string& l : lost) list += (list.empty() ? "" : ", ") + l;
  throw UserError(what + ": a " + cfg.family + " config.json cannot express " + list +
                  ": transformers would compute another model (checkpoints and exports are "
                  "config.json directories; choose a family that has the setting)");
}

}  // namespace lmt
