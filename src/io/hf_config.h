// Hugging Face config.json <-> ModelConfig. Checkpoints carry a config.json so that generate,
// export and Hugging Face tools read the model's shape from the same file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/model_config.h"

namespace lmt {

nlohmann::json model_config_to_hf(const ModelConfig& cfg);
// `where` names the file in error messages. Reads the keys lmtrain knows; fails on an unsupported
// model_type or a key it cannot honour.
ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& where);
ModelConfig read_hf_config(const std::string& path);
// A multimodal gemma3 config (Gemma3ForConditionalGeneration): lmtrain reads and trains its text
// model (text_config; the vision tower's tensors are left out when loading).
bool is_multimodal_gemma3(const nlohmann::json& j);

}  // namespace lmt
