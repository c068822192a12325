// The parameters of a model as named views into one flat buffer. Names are Hugging Face names, so
// import, export, checkpoints, optimizer state, LoRA targets and sharding share one language.
// Tensors that feed one GEMM sit next to each other (q|k|v, gate|up); the others start 64-element
// aligned.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"

namespace lmt {

// What a parameter is, for choices like weight decay.
enum class ParamKind : uint8_t { embedding, norm, bias, matrix };

struct ParamInfo {
  std::string name;    // e.g. "model.layers.3.mlp.up_proj.weight"
  Shape shape;         // as Hugging Face stores it ([out, in] for linear weights)
  int64_t offset = 0;  // element offset in the flat buffer
  ParamKind kind = ParamKind::matrix;
  // A matrix that fuses several projections along its columns (gpt2's c_attn: q, k and v): each
  // one's width, in order. Empty: one projection. Muon orthogonalises each block on its own.
  std::vector<int64_t> column_blocks;
  // Stored directly after the previous parameter and read with it as one matrix by one GEMM
  // (k and v after q, up after gate): what converts and reductions may then take as one.
  bool fused = false;

  int64_t numel() const { return shape.numel(); }
};

// The parameters of a config in flat-buffer order (names, Hugging Face shapes, offsets), and the
// flat buffer's size in elements, without allocating anything. gpt2 keeps its Conv1D weights as
// Hugging Face stores them ([in, out]).
std::vector<ParamInfo> param_layout(const ModelConfig& cfg, int64_t* flat_size = nullptr);

// `params` with each fused group (a parameter and the `fused` ones directly after it: q|k|v,
// gate|up) as one: the first one's name and kind, its rows stacked ([sum of rows, cols], or the
// sum of a vector's lengths). What a backend that takes the groups whole holds as one array.
std::vector<ParamInfo> fused_groups(const std::vector<ParamInfo>& params);

// [begin, end) of each layer's parameters in the flat buffer.
std::vector<std::pair<int64_t, int64_t>> layer_ranges(const std::vector<ParamInfo>& params,
                                                      const ModelConfig& cfg);

// Where a parameter of `elems` elements ends and the next unfused one may start.
constexpr int64_t kParamAlignElems = 64;
constexpr int64_t align_param(int64_t elems) {
  return (elems + kParamAlignElems - 1) / kParamAlignElems * kParamAlignElems;
}

}  // namespace lmt
