// LoRA adapters (Hu et al. 2021, as PEFT implements them): a targeted projection y = x W^T + b
// gains s * (x A^T) B^T with A [rank, in], B [out, rank] and s = alpha / rank (alpha / sqrt(rank)
// with rsLoRA). The adapters live in their own flat buffer, named as PEFT names them in
// adapter_model.safetensors ("base_model.model.<module>.lora_A.weight"), so export, import,
// checkpoints and the optimizer read them by name. The fused q|k|v and gate|up projections take
// one adapter per Hugging Face module (q, k, v; gate, up), each writing its slice of the output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/lora_spec.h"
#include "model/model_config.h"
#include "model/param_layout.h"

namespace lmt {

// Which group of a block's weights a projection belongs to (the layer code's fused GEMMs).
enum class LoraGroup : uint8_t { qkv, o, up, down };

// One projection a family has in every block: its Hugging Face module path inside the block
// ("self_attn.q_proj", "mlp.c_fc"), the fused GEMM it is part of and its slice of that GEMM's
// output columns.
struct LoraModule {
  std::string path;
  LoraGroup group;
  int64_t out_offset = 0;  // first output column inside the group's GEMM
  int64_t in = 0, out = 0;
};
std::vector<LoraModule> lora_modules(const ModelConfig& cfg);

// One adapter: layer, module, and the indices of its A and B in the adapter parameter list.
struct LoraTarget {
  int64_t layer = 0;
  LoraModule module;
  int a = -1, b = -1;
};

// A base parameter trained beside the adapters (modules_to_save): a copy of it lives in the
// adapter buffer as params[index], named "base_model.model.<base_name>" (PEFT's name in
// adapter_model.safetensors).
struct SavedParam {
  std::string base_name;
  int index = -1;
};

struct LoraLayout {
  std::vector<ParamInfo> params;  // lora_A and lora_B of every target, then the saved modules
  std::vector<LoraTarget> targets;
  std::vector<SavedParam> saved;
  int64_t flat_size = 0;
};

// The adapters `spec` puts on a model of `cfg`. Throws UserError naming lora.rank,
// lora.target_modules (a name no projection of the family matches, listing those it has),
// lora.modules_to_save (a name that matches nothing, a projection, or a table tied to another)
// or lora.alpha.
LoraLayout lora_layout(const ModelConfig& cfg, const LoraSpec& spec);

// The block module prefix of layer l ("model.layers.3." / "transformer.h.3.").
std::string block_prefix(const ModelConfig& cfg, int64_t layer);

// Elements of the scratch the adapters of a pass take for N tokens through adapters of `rank`
// on an input `in` wide: u = x A^T and its gradient, and with dropout the dropped input.
constexpr int64_t lora_scratch_elems(int64_t N, int64_t rank, int64_t in, bool dropout) {
  return 2 * N * rank + (dropout ? N * in : 0);
}

}  // namespace lmt
