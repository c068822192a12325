// The RoPE keys of config.json, to and from ModelConfig's rope_* fields, read the way
// transformers 5 reads them (RotaryEmbeddingConfigMixin, Gemma3TextConfig):
//   - rope_parameters (transformers 5), or the older rope_scaling (its type under "rope_type" or
//     "type"; when both are present rope_scaling wins, as in transformers 5), with rope_theta
//     inside the dict or at the top level (the dict's wins);
//   - gemma3's per-layer-type rope_parameters {"full_attention": {...}, "sliding_attention": {...}}
//     (full: rope_theta and the scaling; sliding: plain RoPE whose base is rope_local_base_freq),
//     and its older top-level rope_local_base_freq beside rope_theta / rope_scaling;
//   - a top-level original_max_position_embeddings (Phi-3 style), which wins for llama3 and yarn.
// Supported types: default, linear, dynamic, llama3, yarn; any other (longrope, ...) is one
// UserError naming the file and the key.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/model_config.h"

namespace lmt {

// Reads the RoPE keys of `j` into c (the scaling fields start from ModelConfig's defaults;
// rope_theta and rope_local_base_freq keep c's values where the file has none, so family defaults
// survive). `where` names the file in messages.
void read_hf_rope(const nlohmann::json& j, const std::string& where, ModelConfig& c);

// Writes c's RoPE settings so that transformers 5 computes the same frequencies: rope_theta and
// rope_parameters (for gemma3 the per-layer-type form, plus rope_local_base_freq), and, for older
// readers (transformers 4, llama.cpp's converter), rope_scaling with the same contents.
void write_hf_rope(const ModelConfig& c, nlohmann::json& j);

}  // namespace lmt
