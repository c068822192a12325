// Model FLOPs utilisation, one definition for `lmtrain bench` and `lmtrain train`: the FLOPs a
// training step needs per token, and the backend's measured GEMM peak that MFU is taken against.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "backend/devices.h"
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
// backend, after one untimed warm-up.
double measure_gemm_peak(Backend* be, DType dt, int64_t n, int reps);

// The ceiling MFU is taken against, and what it is.
struct PeakFlops {
  double flops = 0;
  std::string source;  // "the nominal dense bf16 peak of ...", "a measured peak of ..."
};
// The nominal dense peak in dt of a device of the table (backend/devices.h: NVIDIA H100, H200,
// A100; Cloud TPU v4, v5e, v5p, v6e; docs/mfu.md lists the figures and their sources), or
// nullopt for none (spec null). f32 on NVIDIA GPUs is TF32 (XLA's default precision for f32
// products there); on TPUs f32 products run as bf16 passes: their bf16 peak.
std::optional<PeakFlops> nominal_peak(const DeviceSpec* spec, DType dt);
// The same by the device kind PJRT reports.
std::optional<PeakFlops> nominal_peak(const std::string& device_kind, DType dt);
// MFU's ceiling on this backend, the one train and bench divide by: `given_tflops` a device where
// the user set it (train.peak_tflops, > 0), else the nominal peak of the device the backend
// describes where the table knows it, else the best of 9 GEMMs of 2048^3 measured here (4096^3 on
// an accelerator the table does not know, large enough to fill it).
PeakFlops mfu_peak(Backend* be, DType dt, double given_tflops);

}  // namespace lmt
