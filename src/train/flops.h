// Model FLOPs utilisation, one definition for `lmtrain bench` and `lmtrain train`: the FLOPs a
// training step needs per token, and the backend's measured GEMM peak that MFU is taken against.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/dtype.h"
#include "model/model_config.h"
#include "model/transformer.h"

namespace lmt {

// Training FLOPs per token: 6 * N + 12 * L * d * T (N: parameters that take part in matrix
// products, i.e. all but the input embedding table unless it is tied to the head).
double train_flops_per_token(const ModelConfig& m, int64_t seq_len, int64_t matmul_params);

// The same for `model` as it trains: its matrix-product parameters, and with LoRA adapters a
// frozen base (forward and input gradient only: 4 FLOPs per parameter and token instead of 6),
// fully trained adapters, and a saved head's weight gradient.
double train_flops_per_token(const Transformer& model, int64_t seq_len);

// FLOP/s of the best of `reps` n x n x n GEMMs in `dt` (f32, or bf16 for mixed precision) on this
// backend, after one untimed warm-up: the ceiling MFU is measured against.
double measure_gemm_peak(Backend* be, DType dt, int64_t n, int reps);

}  // namespace lmt
