// The sharding plan: for every tensor a training step holds, by its Hugging Face name, the mesh
// axes each dimension is split on. One table (sharding_plan.cpp) for every family:
//   - the batch over data x fsdp (its sequences), and so the activations the backend is told to
//     keep whole between layers ("activation.residual": the residual stream and its gradient,
//     rows of tokens): their rows over data x fsdp, as MaxText's logical axis rules put weights
//     and activations in one table;
//   - every parameter, its gradient ("grad.<name>") and its optimizer state ("exp_avg.<name>",
//     ...) alike: over fsdp (ZeRO-3: XLA gathers a layer's weights before use and reduces their
//     gradients back), and over tensor the Megatron way: q, k, v, gate and up (gpt2: c_attn, c_fc)
//     by output features, o and down (gpt2: the c_proj's) by input features, embeddings and the
//     head by vocabulary;
//   - LoRA adapters follow their base: A [r, in] splits `in` as the base does, B [out, r] `out`;
//   - norms, other biases and scalars whole on every device.
// A dimension the axes do not divide stays whole (the config's checks name the ones users set).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/mesh.h"

namespace lmt {

// The axes ("data", "fsdp", "tensor") each dimension of the tensor `name` with `dims` is split
// on; {} for a tensor the plan keeps whole.
TensorSharding plan_sharding(const std::string& name, const std::vector<int64_t>& dims);

}  // namespace lmt
