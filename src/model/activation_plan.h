// The activations of one forward and backward pass, planned once per (micro-batch, sequence
// length) and carved out of one arena, as llm.c's fill_in_activation_sizes plans them: the batch
// arrays, every layer's residual stream, the activations each layer keeps for its backward (every
// layer's set, or with activation checkpointing one set that each layer recomputes into), the
// final norm, the backward's scratch and the loss head's chunk. One function carves the arena,
// for measuring (lmtrain info, train's memory check) and for the real plan, so the two never
// disagree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/model_config.h"

namespace lmt {

// Sizes every layer function needs, derived once from the config.
struct ModelDims {
  int64_t C, F, V;     // hidden, MLP width, vocabulary
  int64_t Q, KV, QKV;  // query width Hq*D, key/value width Hkv*D, packed q|k|v row
  int64_t G;           // MLP up-projection width: 2F (gated) or F
  int Hq, Hkv, D;      // query heads, key/value heads, head dim
  static ModelDims of(const ModelConfig& c);
};

// Saved activations of one layer (N = B * T tokens); null where the family has no such step.
struct LayerActs {
  void* h1;       // [N, C]  first norm's output
  void* mean1;    // [N]     LayerNorm only
  void* rstd1;    // [N]
  void* qkv_raw;  // [N, QKV] projections before the q/k norm (qk_norm only)
  void* qk_rstd;  // [N, Hq + Hkv] (qk_norm only)
  void* qkv;      // [N, QKV] q|k|v as attention reads them (after norm and RoPE)
  void* att;      // [N, Q]  attention output (before o_proj)
  void* lse;      // [B, Hq, T]
  void* o_raw;    // [N, C]  o_proj output before the post-attention norm (sandwich only)
  void* rstd_pa;  // [N]     (sandwich only)
  void* x_mid;    // [N, C]  residual after attention
  void* h2;       // [N, C]  second norm's output
  void* mean2;    // [N]     LayerNorm only
  void* rstd2;    // [N]
  void* gu;       // [N, G]  gate | up (G = 2F), or fc (G = F); activation_bits 1: scratch
  void* a;        // [N, F]  act(gate) * up, or act(fc)
  void* mask;     // activation_bits 1 with ReLU: fc > 0, 1 bit each (sign_mask_bytes(N F))
  void* m_raw;    // [N, C]  MLP output before the post-MLP norm (sandwich only)
  void* rstd_pf;  // [N]     (sandwich only)
};

// What the plan depends on beside the config, the dtype and the batch shape.
struct ActivationSettings {
  bool checkpointing = false;        // keep each layer's input only; recompute the rest in backward
  int activation_bits = 0;           // 1: the MLP keeps ReLU's sign bits, or nothing for ReLU^2
  int64_t loss_chunk_tokens = 1024;  // rows of logits the head holds at once
  int64_t loss_vocab_tile = 0;       // > 0: the cut cross-entropy's tile of token ids
};

// Saved statistics (norms' rstd and mean, attention's log-sum-exp, per-token losses) are f32,
// or f64 when the model computes in f64.
constexpr size_t stat_size(DType compute) {
  return compute == DType::f64 ? sizeof(double) : sizeof(float);
}

class ActivationPlan {
 public:
  // The arena for B x T tokens computed in `dt`, allocated on `be` and carved; the batch arrays
  // are described to the backend ("batch.ids", ...).
  ActivationPlan(Backend* be, const ModelConfig& cfg, DType dt, int64_t B, int64_t T,
                 const ActivationSettings& s);
  ActivationPlan(const ActivationPlan&) = delete;
  ActivationPlan& operator=(const ActivationPlan&) = delete;

  // Bytes of the arena such a plan carves, without one.
  static size_t bytes(const ModelConfig& cfg, DType dt, int64_t B, int64_t T,
                      const ActivationSettings& s);
  // Bytes of one layer's saved activations for B x T tokens (what each layer adds without
  // checkpointing), and of the part of them the MLP's pre-activation (or its mask) takes.
  struct LayerBytes {
    size_t layer = 0, mlp_pre_activation = 0;
  };
  static LayerBytes layer_bytes(const ModelConfig& cfg, DType dt, int64_t B, int64_t T,
                                int activation_bits = 0);
  // One layer's working set for n tokens of one sequence, in `arena` (allocated here): what
  // incremental decoding runs a layer in.
  static LayerActs one_layer(Backend* be, const ModelConfig& cfg, DType dt, Buffer& arena,
                             int64_t n);

  // The activations layer l keeps (the shared set with checkpointing).
  const LayerActs& layer(int64_t l) const {
    return sets[checkpointing ? 0 : static_cast<size_t>(l)];
  }

  int64_t B = 0, T = 0, N = 0;
  bool checkpointing = false;
  int64_t chunk = 0;  // rows of the loss head's chunk
  Buffer arena;
  int32_t* ids = nullptr;        // [N]
  int32_t* labels = nullptr;     // [N]
  int32_t* pos = nullptr;        // [N]
  int32_t* doc_start = nullptr;  // [N] (packed samples: where each token's document starts)
  std::vector<void*> res;        // L + 1 residual streams [N, C]; res[l] is layer l's input
  std::vector<LayerActs> sets;   // L sets, or 1 shared set with checkpointing
  void* hf = nullptr;            // [N, C] final norm output
  void* meanf = nullptr;         // [N] (LayerNorm)
  void* rstdf = nullptr;         // [N]
  void* dx = nullptr;            // [N, C] gradient of the residual stream
  void* dh = nullptr;            // [N, C] gradient of a norm output / branch output; scratch
  void* dqkv = nullptr;          // [N, QKV]
  void* datt = nullptr;          // [N, Q]
  void* dgu = nullptr;           // [N, G]
  void* da = nullptr;            // [N, F]
  void* logits = nullptr;        // the head's chunk: head_loss_scratch(chunk, V, tile).logits
  void* losses = nullptr;        // and its losses

 private:
  ActivationPlan() = default;  // a plan that is only measured
  // Carves the arena at `base` (0: a dry run that only measures) into this plan's pointers;
  // returns the bytes it takes.
  size_t carve(uintptr_t base, const ModelConfig& cfg, DType dt, const ActivationSettings& s);
};

}  // namespace lmt
