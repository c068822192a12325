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
// Checkpoints and exports are config.json directories, so a model must read back from its
// config.json as the same model. Throws UserError "WHAT: ..." naming each setting the family's
// config.json cannot hold (a window on llama, soft-capping on qwen2, attention soft-capping on
// gemma3), or when lmtrain cannot yet read back what it writes.
void check_config_json_holds(const ModelConfig& cfg, const std::string& what);
// A multimodal gemma3 config (Gemma3ForConditionalGeneration): lmtrain reads and trains its text
// model (text_config; the vision tower's tensors are left out when loading).
bool is_multimodal_gemma3(const nlohmann::json& j);

}  // namespace lmt
