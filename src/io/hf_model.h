// Loading a Hugging Face model directory (config.json plus model.safetensors, or shards listed in
// model.safetensors.index.json) into a Transformer. Tensors may be stored as f32, bf16, f16 or
// f64 and are converted to the model's dtype on load; every parameter must be present with its
// Hugging Face shape and nothing else may be, so a mismatched checkpoint is one UserError naming
// the file and tensor instead of a silently half-loaded model.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/transformer.h"

namespace lmt {

// The model's shape from `dir`/config.json (every family: io/hf_config.h).
ModelConfig read_hf_model_config(const std::string& dir);

// The weight files of `dir`, mapped: model.safetensors, or every shard that
// model.safetensors.index.json names (plain file names that exist, each holding the tensors the
// index places there and no others). Keyed by path. Throws when the directory has neither file.
std::map<std::string, SafetensorsFile> open_hf_weight_files(const std::string& dir);

// The weights of `dir` matched to the parameters of `cfg`, mapped, not read: for each parameter
// (param_layout order) the file and the name it is stored under (lmtrain's name, a
// bare gpt2's, or a multimodal gemma3's language-model name), checked present, floating point and
// of the parameter's shape. Any other tensor is refused unless it is a known non-parameter (RoPE
// caches, gpt2's mask buffers, a tied model's copy of the head, a multimodal gemma3's vision
// tower). load_hf_weights and export both read through this.
struct HfWeights {
  struct Entry {
    ParamInfo param;
    const SafetensorsFile* file;  // into `files`
    std::string stored;           // the tensor's name in `file`
  };
  std::vector<Entry> entries;
  std::map<std::string, SafetensorsFile> files;
};
HfWeights open_hf_weights(const std::string& dir, const ModelConfig& cfg);

// Loads the weights of `dir` into `model` (its config must match the directory's), verifying the
// directory against its checksums.json while they load (io/dir_checksums.h).
void load_hf_weights(const std::string& dir, Transformer& model);
// The same for a caller that verifies the directory itself (a checkpoint's resume).
void load_hf_weights_unverified(const std::string& dir, Transformer& model);

// config.json + weights -> a ready Transformer (dt: f32, or f64 for checks), the directory verified
// against its checksums.json.
std::unique_ptr<Transformer> load_hf_model(const std::string& dir, Backend* be,
                                           DType dt = DType::f32);

}  // namespace lmt
