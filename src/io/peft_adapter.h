// PEFT LoRA adapter directories: adapter_config.json and adapter_model.safetensors, as PEFT's
// save_pretrained writes them and PeftModel.from_pretrained reads them. A LoRA run's checkpoint is
// such a directory (plus optimizer state), and so is `lmtrain export` of one.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "model/transformer.h"

namespace lmt {

// adapter_config.json for `model`'s adapters; `base` becomes base_model_name_or_path.
nlohmann::json peft_adapter_config(const Transformer& model, const std::string& base);

// The adapter spec of DIR/adapter_config.json. Throws UserError naming the file and field for
// what lmtrain does not read: another peft_type, a regex target_modules, biases, DoRA,
// modules_to_save, per-layer ranks or layers_to_transform.
LoraSpec read_peft_adapter_config(const std::string& dir);

// Adds DIR's adapters to `model` (which has none) and loads their weights. A tensor missing from
// adapter_model.safetensors, or of another shape (an adapter of another base), is a UserError. The
// directory is verified against its checksums.json (io/dir_checksums.h) while they load.
void load_peft_adapter(const std::string& dir, Transformer& model);
// The same for a model that has those adapters already (a LoRA checkpoint being resumed).
void load_peft_adapter_weights(const std::string& dir, Transformer& model);

// Writes DIR/adapter_model.safetensors (as `dtype`: f32, bf16 or f16) and adapter_config.json.
void save_peft_adapter(const std::string& dir, const Transformer& model, const std::string& base,
                       DType dtype);

// Folds the adapters into the base weights (W += s B A, transposed for Conv1D), as PEFT's
// merge_and_unload does; the model keeps its adapters, which must then be dropped (the caller
// exports the base weights).
void merge_lora_into_base(Transformer& model);

}  // namespace lmt
