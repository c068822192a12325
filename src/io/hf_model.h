// Loading a Hugging Face model directory (config.json plus model.safetensors, or shards listed in
// model.safetensors.index.json) into a Transformer. Tensors may be stored as f32, bf16, f16 or
// f64 and are converted to the model's dtype on load; every parameter must be present with its
// Hugging Face shape and nothing else may be, so a mismatched checkpoint is one UserError naming
// the file and tensor instead of a silently half-loaded model.
#pragma once

#include <memory>
#include <string>

#include "model/transformer.h"

namespace lmt {

// The model's shape from `dir`/config.json (every family: io/hf_config.h).
ModelConfig read_hf_model_config(const std::string& dir);

// Loads the weights of `dir` into `model` (its config must match the directory's).
void load_hf_weights(const std::string& dir, Transformer& model);

// config.json + weights -> a ready Transformer (dt: f32, or f64 for checks).
std::unique_ptr<Transformer> load_hf_model(const std::string& dir, Backend* be,
                                           DType dt = DType::f32);

}  // namespace lmt
