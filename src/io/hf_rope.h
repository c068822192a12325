// The RoPE keys of config.json: transformers 5's rope_parameters (also its per-layer-type form,
// {"full_attention": {...}, "sliding_attention": {...}}, of gemma3) and the older rope_theta /
// rope_scaling, to and from ModelConfig's rope_* fields.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/model_config.h"

namespace lmt {

// Reads the RoPE keys of `j` into c; `where` names the file in messages.
void read_hf_rope(const nlohmann::json& j, const std::string& where, ModelConfig& c);
// Writes c's RoPE settings as transformers reads them (rope_theta and rope_scaling).
void write_hf_rope(const ModelConfig& c, nlohmann::json& j);

}  // namespace lmt
