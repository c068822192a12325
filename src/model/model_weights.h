// The weights a Transformer holds, and every copy of them it computes from: the flat parameter
// buffer (param_layout.h) and its gradients, the LoRA adapters' flat buffer and theirs, the bf16
// compute copies of mixed precision, and a LoRA base held in bf16 with the f32 staging buffer its
// layers are converted into when they run. The layer code asks for a parameter by its index in
// params() and gets a pointer in the compute dtype, wherever the values live; how they got there
// (a copy made at the start of the pass, a layer converted from bf16, a trained copy of a
// modules_to_save tensor) is decided here.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/param_layout.h"

namespace lmt {

class ModelWeights {
 public:
  // held: f32, or f64 for gradient checks: the dtype of the weights, gradients and adapters
  // held (what checkpoints, loaders and the optimizer see), and the compute dtype until
  // set_compute_dtype() changes it. Allocates the flat buffer (zeros) and describes its tensors.
  ModelWeights(Backend* be, const ModelConfig& cfg, DType held);
  ModelWeights(const ModelWeights&) = delete;
  ModelWeights& operator=(const ModelWeights&) = delete;

  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t flat_size() const { return flat_size_; }
  DType held_dtype() const { return held_dt_; }
  DType compute_dtype() const { return compute_dt_; }
  DType base_dtype() const { return base_dt_; }
  // The flat buffer of weights, in base_dtype(); the gradient buffer (null until ensure_grads(),
  // and for a frozen base).
  void* data() const { return params_.empty() ? nullptr : weights_.data(); }
  void* grads() const { return grads_.data(); }

  // The adapters (add_adapters): their layout, and their flat buffers of values and gradients.
  const LoraLayout& adapters() const { return adapters_; }
  bool has_adapters() const { return !adapters_.params.empty(); }
  void* adapter_data() const { return adapter_weights_.data(); }
  void* adapter_grads() const { return adapter_grads_.data(); }

  // Mixed precision: the model computes in `dt` (bf16) from copies of the held f32 weights made
  // by to_compute() at the start of each pass, and fold_compute_grads() adds each backward's bf16
  // gradients, widened, into the held ones. `dt` equal to held_dtype() turns it off. Needs a base
  // that is not held in bf16.
  void set_compute_dtype(DType dt);
  bool mixed() const { return compute_dt_ != held_dt_; }
  void to_compute();
  // The compute copy of the trained gradients made zero (a backward adds into it; then
  // fold_compute_grads adds it into the held ones).
  void zero_compute_grads();
  void fold_compute_grads();

  // LoRA: the adapters of `layout` (lora_layout()), initialised as PEFT does (A uniform in
  // +-1/sqrt(in), B zero), the trained copies of modules_to_save starting as the base's values;
  // the base's gradient buffer is released (it is frozen).
  void add_adapters(LoraLayout layout, uint64_t seed);
  // Keeps a frozen base in `dt` (bf16: half the memory of its weights). A layer's weights are
  // converted to f32 into one staging buffer when the layer runs (stage_layer), the head
  // `head_block_rows` rows at a time (0: about 4M elements' worth); the final norm and gpt2's
  // position table are kept as f32 copies. Call after the base is loaded and the adapters added.
  void set_base_dtype(DType dt, int64_t head_block_rows = 0);
  // Whether parameter `index` of a bf16 base is read through staging (not one of the f32 copies,
  // nor a trained copy).
  bool staged(int index) const { return base_staged() && !trained_copy(index); }
  // Parameter `index` of the base as it is held, in base_dtype().
  const void* base_param(int index) const;
  int64_t head_block_rows() const { return head_rows_; }

  // Parameter `index` in the compute dtype, or its gradient; null for no parameter (-1), or for
  // the gradient of a frozen base. A trained copy (modules_to_save) stands for its base tensor.
  void* param(int index, bool grads) const;
  // Converts layer l's parameters of a bf16 base into the staging buffer; staged_param() then
  // addresses them there, until the next stage_layer or head block.
  void stage_layer(int64_t l);
  void* staged_param(int index, int64_t l) const;
  // Calls f(W rows [v0, v0 + rows) in the compute dtype, v0, rows) over the output head
  // (parameter `head`): one call with the weights themselves, or blocks converted from a bf16
  // base.
  template <class F>
  void for_head_blocks(int head, F&& f);
  // Where a frozen base's norm gradients go (computed by the kernel that computes dx, unused):
  // g itself unless it is null and the model has adapters.
  void* grad_sink(void* g, int which) const;
  // The adapters' tensor `index` (in adapters().params) in the compute dtype, and its gradient.
  void* adapter(int index) const;
  void* adapter_grad(int index) const;

  // The gradient buffer exists (zeroed when made; none with adapters, whose base is frozen).
  void ensure_grads();
  void zero_grads();
  // The trained gradients are dead until the next zero_grads (Backend::discard).
  void discard_grads();
  // The per-pass scratch (staging, the gradient sink, the compute copies) is dead.
  void discard_scratch();

  // Normal(0, initializer_range) for matrices and embeddings, residual output projections
  // (o_proj, down_proj, gpt2's c_proj) scaled by 1/sqrt(2 * layers), biases 0, norm weights
  // norm_init(). Independent of threads.
  void init(uint64_t seed);
  // Initial value of a norm weight: 1 for plain norms, 0 where the norm scales by (1 + w).
  double norm_init() const { return 1.0 - cfg_.traits().norm_offset; }
  // The held values (weights, f32 copies, adapters) of `from`, a model of the same config,
  // adapters and base dtype on any backend, copied through the host.
  void copy_values_from(const ModelWeights& from);

  // Bytes the base weights take with `base_dt` (f32: the flat buffer; bf16: its bf16 copy, the
  // staging buffer and the f32 copies), without a model.
  static size_t base_bytes(const ModelConfig& cfg, DType base_dt);
  // Throws UserError naming the parameter count, the bytes of its weights in `dt` and `available`
  // when the weights alone exceed it (0: no check). Commands that build a model call it with the
  // host's physical memory first (not the constructor itself: a compile-only PJRT model
  // allocates nothing).
  static void check_fits(const ModelConfig& cfg, DType dt, uint64_t available);

 private:
  bool base_staged() const { return base_dt_ != held_dt_; }  // a bf16 base of an f32 model
  bool trained_copy(int index) const {
    return index >= 0 && !trained_copy_at_.empty() &&
           trained_copy_at_[static_cast<size_t>(index)] >= 0;
  }
  void* compute_at(void* base, int64_t elems) const;  // elems of the compute dtype after base
  void* held_at(void* base, int64_t elems) const;     // elems of the held dtype after base
  // What the kernels read and write: the compute copies when mixed, else the held buffers.
  void* compute_weights() const { return (mixed() ? compute_weights_ : weights_).data(); }
  void* compute_grads() const { return (mixed() ? compute_grads_ : grads_).data(); }
  void* compute_adapters() const { return (mixed() ? compute_adapters_ : adapter_weights_).data(); }
  void* compute_adapter_grads() const {
    return (mixed() ? compute_adapter_grads_ : adapter_grads_).data();
  }
  // Tells the backend the named tensors of a flat buffer of `dt` at `base` (Backend::describe).
  void describe_flat(const void* base, const std::vector<ParamInfo>& params, DType dt,
                     const std::string& prefix) const;

  Backend* be_;
  ModelConfig cfg_;
  std::vector<ParamInfo> params_;
  int64_t flat_size_ = 0;
  DType held_dt_, compute_dt_, base_dt_;
  Buffer weights_, grads_;  // the flat buffers (weights_ in base_dt_)
  LoraLayout adapters_;
  Buffer adapter_weights_, adapter_grads_;
  // Mixed precision: the compute copies of weights_, grads_ and the adapters' buffers.
  Buffer compute_weights_, compute_grads_, compute_adapters_, compute_adapter_grads_;
  // A bf16 base: per layer [begin, end) in weights_; one layer's weights (or a block of head
  // rows) in f32; f32 copies of the parameters kept whole (the final norm, gpt2's positions) and
  // each parameter's offset there (-1: staged); head rows converted at a time.
  std::vector<std::pair<int64_t, int64_t>> layer_range_;
  Buffer staging_, kept_f32_;
  std::vector<int64_t> kept_f32_at_;
  int64_t head_rows_ = 0;
  // Per parameter: its trained copy's offset in adapter_weights_ (modules_to_save), or -1.
  std::vector<int64_t> trained_copy_at_;
  Buffer grad_sink_;  // 2 x [max(C, D)], for the norms of a frozen base
};

template <class F>
void ModelWeights::for_head_blocks(int head, F&& f) {
  const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size;
  if (!staged(head)) return f(static_cast<const void*>(param(head, false)), int64_t{0}, V);
  const int64_t offset = params_[static_cast<size_t>(head)].offset;
  for (int64_t v0 = 0; v0 < V; v0 += head_rows_) {
    const int64_t rows = std::min(head_rows_, V - v0);
    be_->convert(compute_dt_, staging_.data(), base_dt_,
                 static_cast<const char*>(weights_.data()) +
                     static_cast<size_t>(offset + v0 * C) * dtype_size(base_dt_),
                 rows * C);
    f(static_cast<const void*>(staging_.data()), v0, rows);
  }
}

}  // namespace lmt
