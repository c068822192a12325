// config.json's RoPE keys <-> ModelConfig. Reading normalises the three spellings (flat
// rope_parameters, legacy rope_scaling, gemma3's per-layer-type dict) into one flat dict and reads
// that, so each key is checked in one place; messages name the key by its path in the file
// ("rope_parameters.full_attention.factor").
#include "io/hf_rope.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "model/rope.h"

namespace lmt {

namespace {

using nlohmann::json;


bool has(const json& o, const char* key) {
  return o.contains(key) && !o[key].is_null();
}

// The scaling dict of c (null for rope_type default), as transformers 5 reads it back.
json scaling_of(const ModelConfig& c) {
  const std::string& t = c.rope_type;
  if (t == "default") return nullptr;
  json r{{"rope_type", t}, {"factor", c.rope_factor}};
  if (t == "llama3") {
    r["low_freq_factor"] = c.rope_low_freq_factor;
    r["high_freq_factor"] = c.rope_high_freq_factor;
    r["original_max_position_embeddings"] = rope_original_max(c);
  }
  if (t == "yarn") {
    if (c.rope_original_max_position_embeddings > 0)
      r["original_max_position_embeddings"] = c.rope_original_max_position_embeddings;
    if (c.rope_attention_factor > 0) r["attention_factor"] = c.rope_attention_factor;
    r["beta_fast"] = c.rope_beta_fast;
    r["beta_slow"] = c.rope_beta_slow;
    if (c.rope_mscale != 0) r["mscale"] = c.rope_mscale;
    if (c.rope_mscale_all_dim != 0) r["mscale_all_dim"] = c.rope_mscale_all_dim;
    if (!c.rope_truncate) r["truncate"] = false;
  }
  return r;
}

// The scaling fields back to ModelConfig's defaults (not rope_theta / rope_local_base_freq).
void reset_scaling(ModelConfig& c) {
  const ModelConfig fresh;
  c.rope_type = fresh.rope_type;
  c.rope_factor = fresh.rope_factor;
  c.rope_low_freq_factor = fresh.rope_low_freq_factor;
  c.rope_high_freq_factor = fresh.rope_high_freq_factor;
  c.rope_original_max_position_embeddings = fresh.rope_original_max_position_embeddings;
  c.rope_attention_factor = fresh.rope_attention_factor;
  c.rope_beta_fast = fresh.rope_beta_fast;
  c.rope_beta_slow = fresh.rope_beta_slow;
  c.rope_mscale = fresh.rope_mscale;
  c.rope_mscale_all_dim = fresh.rope_mscale_all_dim;
  c.rope_truncate = fresh.rope_truncate;
}

struct Reader {
  const std::string& where;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw UserError(where + ": key '" + key + "' " + what);
  }
  double number(const json& o, const char* key, const std::string& ctx) const {
    if (!o[key].is_number()) fail(ctx + key, "must be a number (got " + o[key].dump() + ")");
    return o[key].get<double>();
  }
  int64_t integer(const json& o, const char* key, const std::string& ctx) const {
    if (!o[key].is_number_integer() || o[key].get<int64_t>() <= 0)
      fail(ctx + key, "must be a positive integer (got " + o[key].dump() + ")");
    return o[key].get<int64_t>();
  }
  void object(const json& o, const std::string& ctx) const {
    if (!o.is_object())
      fail(ctx.substr(0, ctx.size() - 1), "must be an object (got " + o.dump() + ")");
  }
  std::string type_of(const json& o, const std::string& ctx) const {
    const char* key = o.contains("rope_type") ? "rope_type" : "type";
    if (!has(o, key)) return "default";
    if (!o[key].is_string()) fail(ctx + key, "must be a string (got " + o[key].dump() + ")");
    const std::string t = o[key].get<std::string>();
    if (t != "default" && t != "linear" && t != "dynamic" && t != "llama3" && t != "yarn")
      fail(ctx + key,
           "is '" + t + "', which lmtrain does not support (supported: " + choices_text(kRopeTypes) + ")");
    return t;
  }
  void no_partial_rotary(const json& o, const std::string& ctx) const {
    if (has(o, "partial_rotary_factor") && number(o, "partial_rotary_factor", ctx) != 1.0)
      fail(ctx + "partial_rotary_factor",
           "is " + o["partial_rotary_factor"].dump() +
               ": lmtrain rotates the whole head (only 1 is supported)");
  }

  // One flat RoPE dict (rope_parameters, rope_scaling or gemma3's full_attention) into c.
  // `top`: the whole config, for max_position_embeddings and a top-level
  // original_max_position_embeddings. `ctx`: the dict's path with a trailing dot.
  void flat(const json& o, const std::string& ctx, const json& top, ModelConfig& c) const {
    object(o, ctx);
    c.rope_type = type_of(o, ctx);
    if (has(o, "rope_theta")) c.rope_theta = number(o, "rope_theta", ctx);
    no_partial_rotary(o, ctx);
    const std::string& t = c.rope_type;
    if (t == "default") return;
    auto required = [&](const char* key) {
      if (!o.contains(key)) fail(ctx + key, "is missing (rope_type " + t + " requires it)");
    };
    required("factor");
    if (has(o, "factor"))
      c.rope_factor = number(o, "factor", ctx);
    else if (t != "yarn")
      fail(ctx + "factor", "must be a number (got null)");
    // dynamic scales from max_position_embeddings; transformers ignores this key there.
    if (t == "llama3" || t == "yarn") {
      if (has(o, "original_max_position_embeddings"))
        c.rope_original_max_position_embeddings =
            integer(o, "original_max_position_embeddings", ctx);
      if (has(top, "original_max_position_embeddings"))  // transformers gives it priority
        c.rope_original_max_position_embeddings =
            integer(top, "original_max_position_embeddings", "");
    }
    if (t == "llama3") {
      required("low_freq_factor");
      required("high_freq_factor");
      c.rope_low_freq_factor = number(o, "low_freq_factor", ctx);
      c.rope_high_freq_factor = number(o, "high_freq_factor", ctx);
    }
    if (t == "yarn") yarn(o, ctx, top, c);
  }

  void yarn(const json& o, const std::string& ctx, const json& top, ModelConfig& c) const {
    if (!has(o, "factor")) {  // null: transformers 5 derives it from the two lengths
      const int64_t max_pos = has(top, "max_position_embeddings")
                                  ? integer(top, "max_position_embeddings", "")
                                  : c.max_position_embeddings;
      const int64_t orig = c.rope_original_max_position_embeddings > 0
                               ? c.rope_original_max_position_embeddings
                               : max_pos;
      c.rope_factor = static_cast<double>(max_pos) / static_cast<double>(orig);
    }
    if (has(o, "attention_factor")) {
      c.rope_attention_factor = number(o, "attention_factor", ctx);
      if (!(c.rope_attention_factor > 0))
        fail(ctx + "attention_factor", "must be > 0 (got " + o["attention_factor"].dump() + ")");
    }
    // transformers: `get("beta_fast") or 32`, so 0 and null mean the default too.
    if (has(o, "beta_fast") && number(o, "beta_fast", ctx) != 0)
      c.rope_beta_fast = number(o, "beta_fast", ctx);
    if (has(o, "beta_slow") && number(o, "beta_slow", ctx) != 0)
      c.rope_beta_slow = number(o, "beta_slow", ctx);
    if (has(o, "mscale")) c.rope_mscale = number(o, "mscale", ctx);
    if (has(o, "mscale_all_dim")) c.rope_mscale_all_dim = number(o, "mscale_all_dim", ctx);
    if (has(o, "truncate")) {
      if (!o["truncate"].is_boolean())
        fail(ctx + "truncate", "must be true or false (got " + o["truncate"].dump() + ")");
      c.rope_truncate = o["truncate"].get<bool>();
    }
  }

  // gemma3's {"full_attention": {...}, "sliding_attention": {...}}; `scaling`: a top-level
  // rope_scaling, which transformers 5 merges into full_attention.
  void per_layer_type(const json& rp, const json* scaling, const json& top, ModelConfig& c) const {
    for (const auto& [k, v] : rp.items())
      if (k != "full_attention" && k != "sliding_attention")
        fail("rope_parameters." + k,
             "is not a layer type (a per-layer-type rope_parameters holds only full_attention "
             "and sliding_attention)");
    json full = has(rp, "full_attention") ? rp["full_attention"] : json::object();
    object(full, "rope_parameters.full_attention.");
    if (scaling) full.update(*scaling);
    flat(full, "rope_parameters.full_attention.", top, c);
    if (!has(rp, "sliding_attention")) return;
    const json& s = rp["sliding_attention"];
    const std::string ctx = "rope_parameters.sliding_attention.";
    object(s, ctx);
    no_partial_rotary(s, ctx);
    const std::string type = type_of(s, ctx);
    if (type == "default") {
      if (has(s, "rope_theta")) c.rope_local_base_freq = number(s, "rope_theta", ctx);
      return;
    }
    // Scaled sliding layers: lmtrain has them only as "the same RoPE as the full layers". The
    // dict stands alone (transformers takes nothing from full_attention; its base defaults to
    // the local one).
    ModelConfig same = c;
    reset_scaling(same);
    flat(s, ctx, top, same);
    if (!has(s, "rope_theta")) same.rope_theta = c.rope_local_base_freq;
    if (same.rope_theta != c.rope_theta || scaling_of(same) != scaling_of(c))
      fail(ctx + "rope_type", "is '" + type +
                                  "': lmtrain's sliding-window layers use either plain RoPE or "
                                  "exactly the full_attention settings");
    c.rope_local_base_freq = 0;
  }
};
}  // namespace

void read_hf_rope(const nlohmann::json& j, const std::string& where, ModelConfig& c) {
  reset_scaling(c);
  const Reader r{where};
  if (has(j, "rope_theta")) c.rope_theta = r.number(j, "rope_theta", "");
  if (has(j, "rope_local_base_freq"))
    c.rope_local_base_freq = r.number(j, "rope_local_base_freq", "");
  r.no_partial_rotary(j, "");
  const json* scaling = has(j, "rope_scaling") ? &j["rope_scaling"] : nullptr;
  if (scaling && !scaling->is_object())
    r.fail("rope_scaling", "must be an object or null (got " + scaling->dump() + ")");
  if (has(j, "rope_parameters")) {
    const json& rp = j["rope_parameters"];
    if (!rp.is_object())
      r.fail("rope_parameters", "must be an object or null (got " + rp.dump() + ")");
    if (rp.contains("full_attention") || rp.contains("sliding_attention")) {
      r.per_layer_type(rp, scaling, j, c);
      return;
    }
    if (!scaling) {  // with both, transformers 5 takes rope_scaling
      r.flat(rp, "rope_parameters.", j, c);
      return;
    }
  }
  if (scaling) r.flat(*scaling, "rope_scaling.", j, c);
}
void write_hf_rope(const ModelConfig& c, nlohmann::json& j) {
  const json scaling = scaling_of(c);
  json params = scaling.is_null() ? json{{"rope_type", "default"}} : scaling;
  params["rope_theta"] = c.rope_theta;
  j["rope_theta"] = c.rope_theta;
  if (!scaling.is_null()) j["rope_scaling"] = scaling;
  if (c.family != "gemma3") {
    j["rope_parameters"] = params;
    return;
  }
  // Gemma3TextConfig: full_attention holds rope_theta and the scaling, sliding_attention the
  // local base (or, with rope_local_base_freq 0, the same settings as full_attention).
  json sliding = params;
  if (c.rope_local_base_freq > 0) {
    sliding = json{{"rope_type", "default"}, {"rope_theta", c.rope_local_base_freq}};
    j["rope_local_base_freq"] = c.rope_local_base_freq;
  } else if (scaling.is_null()) {
    j["rope_local_base_freq"] = c.rope_theta;
  }
  j["rope_parameters"] = {{"full_attention", params}, {"sliding_attention", sliding}};
}

}  // namespace lmt
