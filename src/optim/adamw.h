// AdamW over the flat parameter buffer, with global-norm gradient clipping (optimizer.h). The
// moments m and v are two more flat f32 buffers in the parameter layout, so a step is a few
// adamw_step kernel calls over ranges of adjacent parameters that share a weight-decay choice, and
// the checkpointer saves per-parameter views of them. The update follows torch.optim.AdamW
// (decoupled decay first: p *= 1 - lr * wd, then the Adam step; clipping as
// torch.nn.utils.clip_grad_norm_: scale = min(1, clip / (norm + 1e-6))).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/param_layout.h"
#include "optim/optimizer.h"

namespace lmt {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decay_embeddings = false;
  bool decay_norms_and_biases = false;
};

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

// The views of state buffers, "<prefix><name>" for every parameter of each, buffer by buffer.
std::vector<OptimStateView> state_views(const std::vector<StateBuffer>& state);

class AdamW : public Optimizer {
 public:
  // params: the named views of the flat buffer (any order; they must not overlap and must lie
  // inside [0, total_params)); elements outside every parameter (padding) are never touched.
  AdamW(Backend* be, const std::vector<ParamInfo>& params, int64_t total_params,
        const AdamWConfig& cfg);
  // From the optimizer section and train.weight_decay.
  AdamW(Backend* be, const std::vector<ParamInfo>& params, int64_t total_params,
        const OptimizerSpec& s, double weight_decay)
      : AdamW(be, params, total_params,
              AdamWConfig{s.beta1, s.beta2, s.eps, weight_decay, s.decay_embeddings,
                          s.decay_norms_and_biases}) {}

  const char* name() const override { return "adamw"; }
  float* m_data() const { return m_.as<float>(); }  // [total_params], backend memory
  float* v_data() const { return v_.as<float>(); }
  int64_t total_params() const { return total_; }
  const AdamWConfig& config() const { return cfg_; }
  // Adjacent parameters merged by decay choice; the ranges the kernel runs over.
  std::vector<ParamRange> decay_ranges() const;
  // "exp_avg.<name>" and "exp_avg_sq.<name>" for every parameter, in the params' order.
  std::vector<StateBuffer> state() const override;
  uint64_t bytes() const override { return m_.bytes() + v_.bytes(); }
  std::vector<OptimStateView> state_views() const { return lmt::state_views(state()); }

 private:
  void update(float* params, const float* grads, const double* grad_scale) override;
  std::vector<float> factors_of(double lr) const override;
  AdamWConfig cfg_;
  Buffer m_, v_;
  std::vector<Span> spans_;  // split where the decay choice changes or at gaps
};

// AdamW's update over spans whose state lives at `state` offsets of m and v (a whole AdamW, or
// the AdamW part of muon), with the step's factors (adamw_factors) on the device; a span decays
// where it says so and weight_decay is not 0.
void adamw_spans(Backend* be, const std::vector<Span>& spans, float* params, const float* grads,
                 float* m, float* v, const float* factors, double beta1, double beta2, double eps,
                 double weight_decay, const double* grad_scale);

}  // namespace lmt
