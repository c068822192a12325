// Hugging Face config.json <-> ModelConfig. Checkpoints carry a config.json so that generate,
// export and Hugging Face tools read the model's shape from the same file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/model_config.h"

namespace lmt {

nlohmann::json model_config_to_hf(const ModelConfig& cfg);
// `where` names the file in error messages. Reads the keys lmtrain knows; fails on an unsupported
// model_type.
ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& where);
ModelConfig read_hf_config(const std::string& path);

}  // namespace lmt
