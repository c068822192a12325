// A decoder-only transformer with an explicit forward and backward per layer. Every family
// (llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3, gpt2) is the same block with switches
// (ModelConfig::traits(): norm kind and offset, q/k norm, sandwich norms, learned positions,
// biases, gated MLP, Conv1D weight layout), never a separate code path per family.
// Parameters and gradients each live in one flat buffer of the backend with Hugging Face named
// views; activations live in one arena planned once per (batch, seq_len). With activation
// checkpointing the arena keeps only each layer's input and one layer's working set, and backward
// recomputes the layer before differentiating it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/param_layout.h"

namespace lmt {

// Sum of per-token losses and the number of tokens that carry a label.
struct LossSum {
  double sum = 0;  // of the trained objective (set_loss)
  double ce = 0;   // of the plain cross-entropy (== sum for the plain loss)
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

  // dt: f32 for training on the CPU, f64 for gradient checks. It is the dtype of the weights,
  // gradients and adapters the model holds (what checkpoints, loaders and the optimizer see),
  // and the dtype it computes in unless set_compute_dtype() changes that.
  Transformer(Backend* be, const ModelConfig& cfg, DType dt = DType::f32);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  DType dtype() const { return sdt_; }         // of the weights, gradients and adapters held
  DType compute_dtype() const { return dt_; }  // of the kernels and activations
  // Mixed precision (train.precision: bf16): the model computes in `dt` (bf16; activations,
  // matrix products with f32 accumulation, per-layer gradients) from a copy of the f32 weights
  // made at the start of every forward pass, and each backward adds its bf16 gradients, widened,
  // into the f32 gradient buffer. So the weights, gradients, adapters, optimizer and checkpoints
  // stay f32 (the master copy), and an update smaller than bf16's resolution is not lost. `dt`
  // equal to dtype() turns it off. Needs an f32 model whose base is not held in bf16
  // (set_base_dtype), and a backend with bf16 kernels (pjrt; the CPU backend has none).
  void set_compute_dtype(DType dt);
  Backend* backend() const { return be_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& param(const std::string& name) const;
  int64_t num_params() const;                       // sum of parameter sizes (no padding)
  int64_t flat_size() const { return flat_size_; }  // elements in the flat buffer
  // The flat buffer of weights, in base_dtype() (dtype() unless set_base_dtype() changed it).
  void* params_data() const { return params_.empty() ? nullptr : weights_.data(); }
  // The gradient buffer: allocated (zeroed) by the first zero_grads() or forward_backward(), so
  // a model that never trains, or trains adapters only, never holds one.
  void* grads_data() const { return grads_.data(); }

  // LoRA: adds the adapters of `spec`, initialised as PEFT does (A uniform in +-1/sqrt(in), B
  // zero, so the model still computes what it did), and freezes the base: its gradient buffer
  // is released, backward computes no weight gradient GEMM for it, and the gradients are the
  // adapters' (lora_grads_data()). The modules of spec.modules_to_save train as copies in the
  // adapter buffer, which the model then reads instead of the base's. Throws UserError for a
  // bad spec (lora_layout()).
  void add_lora(const LoraSpec& spec, uint64_t seed);
  bool has_lora() const { return !lora_.params.empty(); }
  const LoraSpec& lora_spec() const { return lora_spec_; }
  const std::vector<ParamInfo>& lora_params() const { return lora_.params; }
  const std::vector<LoraTarget>& lora_targets() const { return lora_.targets; }
  const std::vector<SavedParam>& lora_saved() const { return lora_.saved; }
  int64_t lora_num_params() const;  // sum of adapter sizes (no padding); 0 without adapters
  int64_t lora_flat_size() const { return lora_.flat_size; }
  void* lora_data() const { return lora_weights_.data(); }
  void* lora_grads_data() const { return lora_grads_.data(); }
  // What an optimizer steps: the adapters with LoRA, else every parameter.
  const std::vector<ParamInfo>& trainable_params() const {
    return has_lora() ? lora_.params : params_;
  }
  int64_t trainable_flat_size() const { return has_lora() ? lora_.flat_size : flat_size_; }
  // LoRA: keeps the frozen base in `dt` (bf16: half the memory of its weights; f32: as it is).
  // Each layer's weights are converted to f32 when the layer runs (into one layer's staging
  // buffer) and the output head `head_block_rows` rows at a time (0: about 4M elements' worth);
  // the final norm and gpt2's position table stay f32. Call it after the base weights are
  // loaded (it rounds them) and after add_lora(): the base must be frozen and the model f32.
  void set_base_dtype(DType dt, int64_t head_block_rows = 0);
  DType base_dtype() const { return base_dt_; }
  // Bytes the base weights take with `base_dt` (f32: the flat buffer; bf16: its bf16 copy, the
  // staging buffer and the f32 copies), without a model.
  static size_t base_bytes(const ModelConfig& cfg, DType base_dt);
  // Throws UserError naming the parameter count, the bytes of its weights in `dt` and
  // `available` when the weights alone exceed it (0: no check). Commands that build a model call
  // it with the host's physical memory before the constructor (not the constructor itself: a
  // compile-only PJRT model allocates nothing).
  static void check_weights_fit(const ModelConfig& cfg, DType dt, uint64_t available);
  void* trainable_data() const { return has_lora() ? lora_data() : params_data(); }
  void* trainable_grads_data() const { return has_lora() ? lora_grads_data() : grads_data(); }

  // Normal(0, initializer_range) for matrices and embeddings, residual output projections
  // (o_proj, down_proj, gpt2's c_proj) scaled by 1/sqrt(2 * layers), biases 0, norm weights
  // norm_init(). Independent of threads.
  void init_weights(uint64_t seed);
  void zero_grads();
  // The gradients are no longer needed (the optimizer has stepped): until the next zero_grads()
  // or forward_backward() their values are unspecified. A compiling backend then keeps them
  // inside the step's program instead of writing them out.
  void discard_grads();

  // LoRA dropout: the masks of the next forward_backward are Philox streams under `seed`, one per
  // (micro_batch, adapter), so a layer recomputed under checkpointing, and a resumed run, draw
  // the same masks. Forward passes outside forward_backward apply no dropout.
  void set_dropout(uint64_t seed, uint64_t micro_batch) {
    dropout_seed_ = seed;
    dropout_micro_ = micro_batch;
  }

  void set_activation_checkpointing(bool on);
  // train.activation_bits: 0 keeps the MLP's pre-activation for the backward; 1 (ReLU or ReLU^2,
  // non-gated MLP only, see activation_bits_supported) keeps less and gives the same gradients:
  // ReLU a sign mask of 1 bit per element, ReLU^2 nothing beyond its output, which the down
  // projection's weight gradient needs anyway.
  void set_activation_bits(int bits);
  // Empty when activation_bits 1 applies to the config, else why not.
  static std::string activation_bits_unsupported(const ModelConfig& cfg);
  void set_loss_chunk_tokens(int64_t n) { loss_chunk_ = n; }
  // The objective (backend/loss.h) and, vocab_tile > 0, the cut cross-entropy's vocabulary tile
  // (HeadLossArgs::vocab_tile). Call before the first pass.
  void set_loss(const LossSpec& loss, int64_t vocab_tile);

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
  // With read_loss false the loss sum stays on the device (LossSum::sum is NaN) and adds to what
  // take_loss_sum() returns (zero_grads() zeroes it): a step's micro-batches and its update then
  // read nothing back until the step's end, so a compiling backend (pjrt) runs the step as one
  // program.
  LossSum forward_backward(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                           double grad_scale, const Packing* packing = nullptr,
                           bool read_loss = true);
  // The loss sum of the forward_backward calls (read_loss false) since zero_grads(), read back.
  double take_loss_sum();
  double take_ce_sum();  // the plain cross-entropy's sum, likewise
  // The same sum and that of the plain cross-entropy copied on the device to dst[0] and dst[1]
  // (f64), for a caller that reads them after the next step is queued (TrainStep::launch).
  void copy_loss_sum(double* dst);
  // Loss only (evaluation).
  LossSum forward_loss(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                       const Packing* packing = nullptr);
  // Logits of every position for one batch, copied to the host as f64 [B, T, V] (tests, small T).
  std::vector<double> forward_logits(const int32_t* ids, int64_t B, int64_t T,
                                     const Packing* packing = nullptr);

  // The same model (config, weights, adapters, base dtype) on another backend, copied through the
  // host: generation for a model trained where incremental decoding is not available. The copy
  // computes in dtype() (a mixed-precision model's copy runs on its f32 weights).
  std::unique_ptr<Transformer> clone(Backend* be) const;

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
                                 bool checkpointing, int64_t loss_chunk_tokens,
                                 int activation_bits = 0, int64_t loss_vocab_tile = 0);
  // Bytes of one layer's saved activations for B x T tokens (what each layer adds without
  // checkpointing), and of the part of them the MLP's pre-activation (or its mask) takes.
  struct LayerBytes {
    size_t layer = 0, mlp_pre_activation = 0;
  };
  static LayerBytes layer_activation_bytes(const ModelConfig& cfg, DType dt, int64_t B, int64_t T,
                                           int activation_bits = 0);
  // Elements of the LoRA scratch (lora_forward / lora_backward) for N tokens through adapters of
  // `rank` on an input `in` wide: u = x A^T and its gradient, and with dropout the dropped input.
  static int64_t lora_scratch_elems(int64_t N, int64_t rank, int64_t in, bool dropout) {
    return 2 * N * rank + (dropout ? N * in : 0);
  }

  // Initial value of a norm weight: 1 for plain norms, 0 where the norm scales by (1 + w).
  double norm_init() const { return 1.0 - tr_.norm_offset; }

 private:
  struct Plan;
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
  // Sizes every layer function needs, derived once from the config.
  struct Dims {
    int64_t C, F, V;     // hidden, MLP width, vocabulary
    int64_t Q, KV, QKV;  // query width Hq*D, key/value width Hkv*D, packed q|k|v row
    int64_t G;           // MLP up-projection width: 2F (gated) or F
    int Hq, Hkv, D;      // query heads, key/value heads, head dim
  };
  static Dims dims_of(const ModelConfig& c);
  // Where each of a layer's parameters sits in params_ (-1: the family has none). q|k|v and
  // gate|up are each one contiguous group ([q; k; v] and [gate; up] rows, or gpt2's single
  // c_attn / c_fc), so each is one GEMM.
  struct LayerIndex {
    int ln1 = -1, ln1_b = -1, qkv = -1, qkv_b = -1, q_norm = -1, k_norm = -1, o = -1, o_b = -1,
        post_attn = -1, ln2 = -1, ln2_b = -1, up = -1, up_b = -1, down = -1, down_b = -1,
        post_ffw = -1;
  };
  // The adapters of one layer per fused GEMM (indices into lora_.targets).
  struct LayerLora {
    std::vector<int> qkv, o, up, down;
  };
  // The weights (or their gradients) of one layer; null where LayerIndex is -1, or for the
  // gradients of a frozen base.
  struct LayerWeights {
    void *ln1, *ln1_b, *qkv, *qkv_b, *q_norm, *k_norm, *o, *o_b, *post_attn, *ln2, *ln2_b, *up,
        *up_b, *down, *down_b, *post_ffw;
    const LayerLora* lora = nullptr;  // the layer's adapters (forward and backward alike)
  };
  // The RoPE table of one kind of layer (f32 [D / 2] on the backend) and its cos/sin factor.
  struct Rope {
    Buffer inv_freq;
    double attention_factor = 1.0;
  };

  void build_layout();
  // Tells the backend the named tensors of a flat buffer of `dt` at `base` (Backend::describe).
  void describe_flat(const void* base, const std::vector<ParamInfo>& params, DType dt,
                     const std::string& prefix) const;
  void ensure_grads();
  void set_rope(int64_t seq_len);
  void plan(int64_t B, int64_t T);
  // Pointers to layer l's weights (or gradients); with a bf16 base, the weights are converted
  // into the staging buffer first (valid until the next layer_weights or head call).
  LayerWeights layer_weights(int64_t l, bool grads);
  // logits[n, V] = h[n, C] W_head^T, and dh[n, C] = dlogits[n, V] W_head (beta 0).
  void head_forward(const void* h, void* logits, int64_t n);
  void head_backward_input(const void* dlogits, void* dh, int64_t n);
  // Calls f(W rows [v0, v0 + rows) as f32, v0, rows) over the head: one call with the weights
  // themselves, or blocks converted from a bf16 base.
  template <class F>
  void for_head_blocks(F&& f);
  // Where parameter `index` starts in the flat buffer, in base_dtype().
  const void* base_at(int64_t offset) const;
  // [begin, end) of each layer's parameters in the flat buffer, and the largest such range.
  static std::vector<std::pair<int64_t, int64_t>> layer_ranges(const std::vector<ParamInfo>& params,
                                                               const ModelConfig& cfg);
  LayerActs layer_acts(int64_t l) const;
  // One layer's working set for n tokens of one sequence, in `arena` (allocated here).
  LayerActs alloc_layer_acts(Buffer& arena, int64_t n) const;
  void* param_ptr(int index, bool grads) const;
  void upload_batch(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                    const Packing* packing);
  void embed(void* out, const int32_t* ids, const int32_t* pos, void* scratch, int64_t N);
  void embed_backward(void* dx, const int32_t* ids, const int32_t* pos, int64_t N);
  void final_norm(void* out, void* mean, void* rstd, const void* x, int64_t N);
  void forward_trunk();
  // y[N,out] = x[N,in] W^T (+ b) for a weight stored as Hugging Face stores it, plus the
  // adapters `lora` (null: none) on their slices of y.
  void linear(const void* x, const void* w, const void* b, void* y, int64_t N, int64_t in,
              int64_t out, const std::vector<int>* lora = nullptr);
  // dx[N,in] = dy W (beta 0) plus the adapters' share, dw += x^T dy in the weight's layout, db +=
  // column sums (dw, db null: not computed); the adapters' gradients accumulate.
  void linear_backward(const void* dy, const void* x, const void* w, void* dx, void* dw, void* db,
                       int64_t N, int64_t in, int64_t out, const std::vector<int>* lora = nullptr);
  // The adapters' part of linear() and linear_backward() for output rows of stride ldy.
  void lora_forward(const std::vector<int>& ids, const void* x, void* y, int64_t N, int64_t in,
                    int64_t ldy);
  void lora_backward(const std::vector<int>& ids, const void* dy, const void* x, void* dx,
                     int64_t N, int64_t in, int64_t ldy);
  // The scratch of lora_forward / lora_backward: u and du, [N, rank] each, then (with dropout)
  // the adapter's input through its mask, [N, in].
  void* lora_scratch(int64_t N, int64_t in);

  // Whether adapters read their input through dropout now (LoRA dropout, in forward_backward),
  // and the mask stream of adapter `id`.
  bool lora_dropping() const { return training_ && lora_spec_.dropout > 0; }
  uint64_t dropout_stream(int id) const;
  // Where a frozen base's norm weight gradients go: computed with dx by the same kernel, unused.
  void* grad_sink(void* g, int which = 0) const;
  void norm_forward(const void* w, const void* b, void* out, void* mean, void* rstd, const void* x,
                    int64_t N);
  void norm_backward(const void* w, void* dw, void* db, void* dx, const void* dout, const void* x,
                     const void* mean, const void* rstd, int64_t N);
  void block_qkv(int64_t l, const LayerWeights& w, const LayerActs& a, const void* x,
                 const int32_t* pos, int64_t N);
  void block_rest(const LayerWeights& w, const LayerActs& a, const void* x, void* y, int64_t N,
                  const AttentionArgs& args, const void* k, const void* v);
  void layer_forward(int64_t l);
  void layer_backward(int64_t l);
  // Adds the batch's loss sum to loss_acc() (on the device); returns the labelled tokens.
  LossSum head_loss(bool backward, double grad_scale);
  void staged_head_loss(const HeadLossArgs& a, double* ce_sum);
  double* loss_acc();
  double* ce_acc();  // the plain cross-entropy's sum; loss_acc() for the plain loss
  void zero_loss_sums();
  // Tells the backend that the activation arena and the other per-pass scratch are dead.
  void discard_scratch();
  const Rope& rope_of(int64_t l) const;
  // Attention arguments of layer l for a batch (window, scale, soft-cap, document masking).
  AttentionArgs attention_args(int64_t l, int64_t B, int64_t T) const;
  // n logits of the backend's buffer on the host as f64, soft-capped where the family caps them.
  std::vector<double> host_logits(const void* logits, int64_t n) const;
  void* at(void* base, int64_t elems) const;        // elems of the compute dtype after base
  void* sat(void* base, int64_t elems) const;       // elems of the held dtype after base
  void* stat_at(void* base, int64_t elems) const {  // elems of saved statistics after base
    return static_cast<char*>(base) + static_cast<size_t>(elems) * ss_;
  }
  bool mixed() const { return dt_ != sdt_; }
  bool base_staged() const { return base_dt_ != sdt_; }  // a bf16 base of an f32 model
  // What the kernels read and write: the compute copies when mixed, else the held buffers.
  void* run_weights() const { return (mixed() ? cw_ : weights_).data(); }
  void* run_grads() const { return (mixed() ? cg_ : grads_).data(); }
  void* run_lora() const { return (mixed() ? clw_ : lora_weights_).data(); }
  void* run_lora_grads() const { return (mixed() ? clg_ : lora_grads_).data(); }
  // Mixed precision: the compute copies of the weights (and adapters) from the held ones, at the
  // start of a forward pass; and after a backward, its gradients widened into the held ones.
  void sync_compute_weights();
  void fold_compute_grads();

  Backend* be_;
  ModelConfig cfg_;
  DType dt_;    // compute dtype
  size_t es_;   // element size of dt_
  size_t ss_;   // element size of saved statistics (rstd, mean, lse, losses): f64 or f32
  DType sdt_;   // dtype of the held weights, gradients and adapters
  size_t ses_;  // element size of sdt_
  Dims dims_;
  std::vector<ParamInfo> params_;
  int64_t flat_size_ = 0;
  Buffer weights_, grads_;
  Buffer cw_, cg_, clw_, clg_;  // mixed precision: compute copies of weights_, grads_ and the
                                // adapters' (lora_weights_, lora_grads_)
  DType base_dt_;               // dtype of weights_
  std::vector<std::pair<int64_t, int64_t>> layer_range_;  // per layer [begin, end) in weights_
  Buffer staging_;  // bf16 base: one layer's weights, or a block of head rows, in f32
  Buffer small_;    // bf16 base: f32 copies of the final norm and position table
  std::vector<int64_t> small_at_;  // per parameter: its offset in small_, or -1
  std::vector<int64_t> saved_at_;  // per parameter: its trained copy's offset in lora_weights_
  bool saved(int index) const {
    return index >= 0 && !saved_at_.empty() && saved_at_[static_cast<size_t>(index)] >= 0;
  }
  int64_t head_rows_ = 0;  // bf16 base: head rows converted at a time
  ModelConfig::Traits tr_;
  std::vector<LayerIndex> layers_;
  int embed_ = -1, pos_embed_ = -1, norm_ = -1, norm_b_ = -1, head_ = -1;
  Rope rope_global_, rope_local_;  // local: sliding layers of a model with rope_local_base_freq
  int64_t rope_len_ = -1;          // the length the tables were made for (rope_type dynamic)
  bool checkpointing_ = false;
  int activation_bits_ = 0;
  Activation act_ = Activation::silu;  // the MLP's, from cfg_.hidden_act
  int64_t loss_chunk_ = 1024;
  LossSpec loss_;
  int64_t loss_vocab_tile_ = 0;
  std::unique_ptr<Plan> plan_;
  bool packed_ = false;  // the current batch is packed: attention reads plan_->doc_start
  LoraSpec lora_spec_;
  LoraLayout lora_;
  std::vector<LayerLora> layer_lora_;  // per layer, with adapters
  Buffer lora_weights_, lora_grads_;
  Buffer lora_scratch_;  // u = x A^T and its gradient, [N, rank] each, grown on demand
  Buffer grad_sink_;     // 2 x [max(C, D)]
  Buffer ce_acc_;        // device f64, beside loss_acc_ when the loss is not plain
  Buffer loss_acc_;      // device f64: the loss sum since zero_grads() or the last read_loss pass
  uint64_t dropout_seed_ = 0, dropout_micro_ = 0;
  bool training_ = false;  // inside forward_backward
};

}  // namespace lmt
