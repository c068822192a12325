// A decoder-only transformer (the Llama family) with an explicit forward and backward per layer.
// Parameters and gradients each live in one flat buffer of the backend with Hugging Face named
// views; activations live in one arena planned once per (batch, seq_len). With activation
// checkpointing the arena keeps only each layer's input and one layer's working set, and backward
// recomputes the layer before differentiating it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model_config.h"
#include "model/param_layout.h"

namespace lmt {

// Sum of per-token losses and the number of tokens that carry a label.
struct LossSum {
  double sum = 0;
  int64_t tokens = 0;
};

// Keys and values of past positions for incremental decoding (batch 1).
struct KvCache {
  int64_t max_len = 0;
  int64_t length = 0;        // positions filled
  std::vector<Buffer> k, v;  // per layer [max_len, KV]
};

class Transformer {
 public:
  static constexpr int32_t kIgnoreIndex = -100;  // = kNoLabel of data/packing.h

  // dt: f32 for training on the CPU, f64 for gradient checks.
  Transformer(Backend* be, const ModelConfig& cfg, DType dt = DType::f32);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  DType dtype() const { return dt_; }
  Backend* backend() const { return be_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& param(const std::string& name) const;
  int64_t num_params() const;                       // sum of parameter sizes (no padding)
  int64_t flat_size() const { return flat_size_; }  // elements in the flat buffer
  void* params_data() const { return params_.empty() ? nullptr : weights_.data(); }
  void* grads_data() const { return grads_.data(); }

  // Normal(0, initializer_range) for matrices and embeddings, residual output projections
  // (o_proj, down_proj) scaled by 1/sqrt(2 * layers), norm weights 1. Independent of threads.
  void init_weights(uint64_t seed);
  void zero_grads();

  void set_activation_checkpointing(bool on);
  void set_loss_chunk_tokens(int64_t n) { loss_chunk_ = n; }

  // Packed samples (host arrays [B, T]): positions restart at every document (RoPE), and
  // doc_start says where each token's document begins, so attention stays inside it. A row then
  // computes exactly what its documents would compute as separate sequences. Null: positions
  // 0..T-1 and plain causal attention over the whole row.
  struct Packing {
    const int32_t* positions = nullptr;
    const int32_t* doc_start = nullptr;
  };

  // One micro-batch: ids and labels are host arrays [B, T] (labels == kIgnoreIndex: no loss).
  // Adds grad_scale * d(sum of token losses)/dparams to the gradient buffer.
  LossSum forward_backward(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                           double grad_scale, const Packing* packing = nullptr);
  // Loss only (evaluation).
  LossSum forward_loss(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                       const Packing* packing = nullptr);
  // Logits of every position for one batch, copied to the host as f64 [B, T, V] (tests, small T).
  std::vector<double> forward_logits(const int32_t* ids, int64_t B, int64_t T,
                                     const Packing* packing = nullptr);

  // Generation with a KV cache (batch 1). feed() runs n new tokens at positions
  // [cache.length, cache.length + n) and returns the last token's logits (f32, [V]).
  std::unique_ptr<KvCache> make_kv_cache(int64_t max_len) const;
  std::vector<float> feed(KvCache& cache, const int32_t* ids, int64_t n);

  // Bytes of the activation arena for a batch shape, as planned.
  size_t activation_bytes(int64_t B, int64_t T) const;

  // The parameters of a config in flat-buffer order (names, Hugging Face shapes, offsets), and
  // the flat buffer's size in elements, without allocating anything.
  static std::vector<ParamInfo> param_layout(const ModelConfig& cfg, int64_t* flat_size = nullptr);
  // Bytes of the activation arena a model of this config plans for (B, T), without one.
  static size_t activation_bytes(const ModelConfig& cfg, DType dt, int64_t B, int64_t T,
                                 bool checkpointing, int64_t loss_chunk_tokens);

 private:
  struct Plan;
  // Saved activations of one layer (N = B * T tokens).
  struct LayerActs {
    void* h1;     // [N, C]  input_layernorm output
    void* rstd1;  // [N]
    void* qkv;    // [N, Q + 2 KV]  after RoPE
    void* att;    // [N, Q]  attention output (before o_proj)
    void* lse;    // [B, Hq, T]
    void* x_mid;  // [N, C]  residual after attention
    void* h2;     // [N, C]  post_attention_layernorm output
    void* rstd2;  // [N]
    void* gu;     // [N, 2F] gate | up
    void* a;      // [N, F]  act(gate) * up
  };
  // Sizes every layer function needs, derived once from the config.
  struct Dims {
    int64_t C, F, V;     // hidden, MLP width, vocabulary
    int64_t Q, KV, QKV;  // query width Hq*D, key/value width Hkv*D, packed q|k|v row
    int Hq, Hkv, D;      // query heads, key/value heads, head dim
  };
  // Weights (or their gradients) of one layer. qkv and gate_up are contiguous groups in the flat
  // buffer ([q; k; v] and [gate; up] rows), so each is one GEMM.
  struct LayerWeights {
    void* ln1;      // [C]
    void* qkv;      // [Q + 2 KV, C]
    void* o;        // [C, Q]
    void* ln2;      // [C]
    void* gate_up;  // [2F, C]
    void* down;     // [C, F]
    void* qkv_bias;  // [Q + 2 KV] (q|k|v biases, fused), or null without attention_bias
  };
  // Parameters per layer in params_ (9, plus the 3 q/k/v biases with attention_bias).
  size_t per_layer() const { return cfg_.attention_bias ? 12 : 9; }

  void build_layout();
  void plan(int64_t B, int64_t T);
  LayerWeights layer_weights(int64_t l, bool grads) const;
  LayerActs layer_acts(int64_t l) const;
  void upload_batch(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                    const Packing* packing);
  void forward_trunk();
  void block_qkv(const LayerWeights& w, const LayerActs& a, const void* x, const int32_t* pos,
                 int64_t N);
  void block_rest(const LayerWeights& w, const LayerActs& a, const void* x, void* y, int64_t N,
                  const AttentionArgs& args, const void* k, const void* v);
  void layer_forward(int64_t l);
  void layer_backward(int64_t l);
  LossSum head_loss(bool backward, double grad_scale);
  AttentionArgs attention_args(int64_t B, int64_t T) const;
  void* at(void* base, int64_t elems) const;

  Backend* be_;
  ModelConfig cfg_;
  DType dt_;
  size_t es_;  // element size of dt_
  Dims dims_;
  std::vector<ParamInfo> params_;
  int64_t flat_size_ = 0;
  Buffer weights_, grads_;
  Buffer inv_freq_;  // f32 [head_dim / 2]
  bool checkpointing_ = false;
  int64_t loss_chunk_ = 1024;
  std::unique_ptr<Plan> plan_;
  std::vector<int32_t> doc_start_;  // host [B, T] of the current batch, or empty (no packing)
};

}  // namespace lmt
