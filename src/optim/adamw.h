// AdamW over the flat parameter buffer, with global-norm gradient clipping. The moments m and v
// are two more flat f32 buffers in the parameter layout, so a step is a few adamw_step kernel
// calls over ranges of adjacent parameters that share a weight-decay choice, and the
// checkpointer saves per-parameter views of them. The update follows torch.optim.AdamW
// (decoupled decay first: p *= 1 - lr * wd, then the Adam step; clipping as
// torch.nn.utils.clip_grad_norm_: scale = min(1, clip / (norm + 1e-6))).
// src/optim does not include src/train: AdamWConfig carries the optimizer section's fields, and
// a template constructor accepts train's OptimizerConfig directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/param_layout.h"

namespace lmt {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decay_embeddings = false;
  bool decay_norms_and_biases = false;
};

// Whether a parameter of this kind gets weight decay: matrices always, embeddings and
// norms/biases only when asked.
bool decays(ParamKind kind, const AdamWConfig& cfg);

// A run of adjacent elements [begin, end) of the flat buffer with one decay choice.
struct ParamRange {
  int64_t begin = 0, end = 0;
  bool decay = false;
  bool operator==(const ParamRange&) const = default;
};

// Sqrt of the sum of squares of grads over the given ranges (f32, on the backend), summed in
// double in range order.
double grad_norm(Backend* be, const float* grads, const std::vector<ParamRange>& ranges);

// A named view of optimizer state, e.g. {"exp_avg.model.norm.weight", f32 [C] at m + offset}.
// Pointers are backend (device) pointers.
struct OptimStateView {
  std::string name;
  Tensor tensor;
};

class AdamW {
 public:
  // params: the named views of the flat buffer (any order; they must not overlap and must lie
  // inside [0, total_params)); elements outside every parameter (padding) are never touched.
  AdamW(Backend* be, const std::vector<ParamInfo>& params, int64_t total_params,
        const AdamWConfig& cfg);
  // From train's OptimizerConfig (any struct with beta1, beta2, eps, decay_embeddings,
  // decay_norms_and_biases) and train.weight_decay.
  template <class C>
  AdamW(Backend* be, const std::vector<ParamInfo>& params, int64_t total_params, const C& c,
        double weight_decay)
      : AdamW(be, params, total_params,
              AdamWConfig{c.beta1, c.beta2, c.eps, weight_decay, c.decay_embeddings,
                          c.decay_norms_and_biases}) {}

  // One optimizer step on params[total_params] (f32) from grads[total_params] (f32; not
  // modified: clipping is a scale passed to the kernel). Returns the global gradient norm before
  // clipping. grad_clip <= 0 disables clipping. When the norm is NaN or Inf nothing is updated
  // (not the parameters, the moments or the step count) and the norm is returned.
  double clip_and_step(float* params, const float* grads, double lr, double grad_clip);

  // Completed steps; the next step's bias correction uses step_count() + 1.
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  float* m_data() const { return m_.as<float>(); }  // [total_params], backend memory
  float* v_data() const { return v_.as<float>(); }
  int64_t total_params() const { return total_; }
  const AdamWConfig& config() const { return cfg_; }
  // Adjacent parameters merged by decay choice; the ranges the kernel runs over.
  const std::vector<ParamRange>& decay_ranges() const { return decay_ranges_; }
  // "exp_avg.<name>" and "exp_avg_sq.<name>" views for every parameter, in the params' order.
  std::vector<OptimStateView> state_views() const;

 private:
  Backend* be_;
  std::vector<ParamInfo> params_;
  int64_t total_;
  AdamWConfig cfg_;
  Buffer m_, v_;
  Buffer stats_;  // device f64 [sum of squared gradients, clipping scale]
  int64_t step_ = 0;
  std::vector<ParamRange> decay_ranges_;  // split where the decay choice changes or at gaps
  std::vector<ParamRange> norm_ranges_;   // the same merged across decay choices (for the norm)
};

}  // namespace lmt
