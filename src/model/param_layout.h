// The named views into the flat parameter buffer. Names are Hugging Face names, so import,
// export, checkpoints, optimizer state and (later) LoRA targets and sharding share one language.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

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

  int64_t numel() const { return shape.numel(); }
};

}  // namespace lmt
