// Writing a Hugging Face model directory (what `transformers` save_pretrained writes and
// from_pretrained / llama.cpp's converter read): config.json, generation_config.json, the weights
// as model.safetensors or as shards model-0000i-of-0000N.safetensors with
// model.safetensors.index.json, and the tokenizer files. Tensors go in by name and shape, never
// by family, so every family's parameter set exports through the same code. Weights are converted
// one shard at a time (f32 -> bf16 / f16 round to nearest even), so memory holds the model plus at
// most one shard. The directory is written under OUT.tmp-PID and renamed into place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"
#include "model/transformer.h"

namespace lmt {

// One tensor to export: Hugging Face name and shape, values as f32 (numel floats) that stay valid
// while save_hf_model runs (a host buffer or a mapped safetensors file).
struct HfTensor {
  std::string name;
  Shape shape;
  const float* data = nullptr;
};

struct HfExportOptions {
  DType dtype = DType::bf16;  // f32, bf16 or f16
  // Tensor bytes per shard at most (a tensor bigger than this gets a shard of its own); the
  // whole model at or under it is one model.safetensors. 5 GB as transformers 4 (5 uses 50 GB);
  // smaller files suit the Hub and machines with little memory.
  uint64_t max_shard_bytes = 5'000'000'000ull;
  std::string tokenizer;  // a tokenizer.json or SentencePiece .model to carry; "" = none
  // Jinja for tokenizer_config.json's "chat_template" (with a tokenizer only); "" = none.
  std::string chat_template;
};

struct HfExportResult {
  std::string dir;
  std::vector<std::string> files;  // written, in order
  int64_t shards = 0;              // weight files
  uint64_t tensor_bytes = 0;       // index "total_size"
};

// Writes the directory `out_dir` for a model of `cfg` whose parameters are `tensors` (exactly
// the names and shapes of param_layout(cfg), in any order). Refuses (UserError) a
// config that lmtrain could not read back, a tensor list that does not match the config, an f16
// export of values beyond f16's range, a tokenizer larger than the vocabulary, and an existing
// non-empty `out_dir` unless it is a previous lmtrain export (which it then replaces).
HfExportResult save_hf_model(const std::string& out_dir, const ModelConfig& cfg,
                             const std::vector<HfTensor>& tensors, const HfExportOptions& opt);
// A model's parameters as export tensors: its host memory where it is f32 there, else a copy in
// `storage` (f32).
std::vector<HfTensor> model_hf_tensors(const Transformer& model, std::vector<float>& storage);
// The same for a model's own parameters (copied to the host as f32 first).
HfExportResult save_hf_model(const std::string& out_dir, const Transformer& model,
                             const HfExportOptions& opt);

// Refuses (UserError) a tensor list that is not exactly param_layout(cfg)'s names and
// shapes.
void check_export_tensors(const ModelConfig& cfg, const std::vector<HfTensor>& tensors);

// "5GB", "500MB", "1.5GB", "2GiB", "123456" (bytes; B, KB, MB, GB, TB in powers of 1000,
// KiB, MiB, GiB, TiB in powers of 1024, case-insensitive). Throws UserError naming `what`.
uint64_t parse_byte_size(const std::string& s, const std::string& what);
// f32, bf16 or f16 (also float32, bfloat16, float16). Throws UserError naming `what`.
DType parse_export_dtype(const std::string& s, const std::string& what);
// "float32", "bfloat16" or "float16": config.json's torch_dtype / dtype.
const char* torch_dtype_name(DType t);

// Bytes of the weight tensors stored in a model directory (model.safetensors, or the shards its
// index names), and their file dtypes ("BF16", ...); 0 when it has no weights.
struct HfWeightsOnDisk {
  uint64_t bytes = 0;
  int64_t files = 0;
  std::vector<std::string> dtypes;
};
HfWeightsOnDisk hf_weights_on_disk(const std::string& dir);

}  // namespace lmt
