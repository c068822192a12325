#include "io/hf_rope.h"

#include <type_traits>

#include "core/error.h"

namespace lmt {

// The RoPE keys, from transformers 5's rope_parameters or the older rope_theta / rope_scaling.
void read_hf_rope(const nlohmann::json& j, const std::string& where, ModelConfig& c) {
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

void write_hf_rope(const ModelConfig& c, nlohmann::json& j) {
  j["rope_theta"] = c.rope_theta;
  if (c.rope_type != "default") {
    nlohmann::json r{{"rope_type", c.rope_type}, {"factor", c.rope_factor}};
    if (c.rope_type == "llama3") {
      r["low_freq_factor"] = c.rope_low_freq_factor;
      r["high_freq_factor"] = c.rope_high_freq_factor;
      if (c.rope_original_max_position_embeddings > 0)
        r["original_max_position_embeddings"] = c.rope_original_max_position_embeddings;
    }
    j["rope_scaling"] = r;
  }
}

}  // namespace lmt
