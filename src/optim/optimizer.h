// The optimizers over the flat parameter buffer (optimizer.name): AdamW (adamw.h), Lion, SGD
// with momentum, and Muon for the hidden weight matrices with AdamW for the rest (muon.h). Each
// keeps its state in flat f32 buffers on the backend (StateBuffer, saved by the checkpointer as
// "<prefix><parameter name>"), clips by the global gradient norm on the device, and skips the
// whole update when that norm is not finite, so a step reads one number back: the norm.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/param_layout.h"
#include "optim/optimizer_spec.h"

namespace lmt {

// Whether a parameter of this kind gets weight decay: matrices always, embeddings and
// norms/biases only when asked.
bool decays(ParamKind kind, bool decay_embeddings, bool decay_norms_and_biases);

// One flat f32 buffer of optimizer state: parameter p's state is data[p.offset, + p.numel()) for
// p in `params` (offsets into this buffer, which may be the flat parameter layout or a compact
// one of its own).
struct StateBuffer {
  std::string prefix;  // checkpoint names: "exp_avg.", "exp_avg_sq.", "momentum_buffer."
  float* data = nullptr;
  int64_t size = 0;
  std::vector<ParamInfo> params;
};

// One parameter as the optimizer steps it: n elements at `param` in the flat parameter buffer and
// at `state` in the state buffers, and its decay choice. Each kernel call covers one tensor, never
// a run of neighbours: a compiling backend (pjrt) holds each tensor as its own array, and one call
// over several would be their concatenation, cut apart again.
struct Span {
  int64_t param = 0, state = 0, n = 0;
  bool decay = false;
  bool operator==(const Span&) const = default;
};

// The spans of `params` (sorted by offset; empty parameters have none). compact: state offsets
// are packed in parameter order (state_params gets those offsets and *state_size the total);
// otherwise they are the flat offsets. Throws for parameters that overlap or lie outside
// [0, total).
std::vector<Span> make_spans(const std::vector<ParamInfo>& params, int64_t total, bool compact,
                             const OptimizerSpec& spec,
                             std::vector<ParamInfo>* state_params = nullptr,
                             int64_t* state_size = nullptr);

// The tensors an optimizer's elementwise kernels run over, each its own span: every parameter,
// but each fused group (q|k|v, gate|up) as one where the backend takes the groups whole
// (Backend::fused_groups_whole): one GEMM computes a group's gradient as one array, which one
// update then reads whole instead of cutting it apart.
std::vector<ParamInfo> update_params(const Backend* be, const std::vector<ParamInfo>& params);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual const char* name() const = 0;

  // One step on params (f32) from grads (f32; not modified: clipping is a scale the kernels
  // apply). Returns the global gradient norm before clipping; grad_clip <= 0 disables clipping.
  // When the norm is not finite nothing is updated (parameters, state, step count).
  double clip_and_step(float* params, const float* grads, double lr, double grad_clip);
  // The same in two halves, so that the caller can say the gradients are dead (Backend::discard)
  // before the norm is read: step() queues the update on the device; finish_step() reads the
  // norm, counts the step when it is finite, and returns it.
  void step(float* params, const float* grads, double lr, double grad_clip);
  double finish_step();
  // What step() does on the host, without its kernels: writes the step's factors (from lr and the
  // step count) to the device and counts the step as queued. A replayed step's share of the
  // optimizer (Backend::replay), made where step() would write them.
  void write_step(double lr);
  // For a caller that queues the next step before reading this one's norm (TrainStep::launch):
  // copies the step's sum of squared gradients (f64, on the device) to dst, so that the next
  // step may overwrite the optimizer's own; confirm_step(finite) then counts the oldest queued
  // step as finish_step() would. A step queued after a non-finite one has counted it as done
  // (its bias correction is one ahead): the caller stops the run there.
  void copy_sum_squares(double* dst) const;
  void confirm_step(bool finite);

  // Completed steps (AdamW's bias correction uses step_count() + 1).
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  virtual std::vector<StateBuffer> state() const = 0;
  // Backend memory it holds for its state and scratch (optimizer_bytes computes the same without
  // allocating).
  virtual uint64_t bytes() const = 0;
  // A line for the run's log when the optimizer splits the parameters (muon), else "".
  virtual std::string assignment() const { return ""; }

 protected:
  Optimizer(Backend* be, const std::vector<ParamInfo>& params, int64_t total);
  // The update of one step; grad_scale is the device scalar clip_scale wrote, and the step's
  // factors are at factors() (written before it from factors_of).
  virtual void update(float* params, const float* grads, const double* grad_scale) = 0;
  // The kernels' factors of the step being queued (backend.h: adamw_factors, decay_factors), as
  // `n` f32 the constructor asks for with make_factors; the device array `name` holds them from
  // each step's start (written then, dead after the update).
  virtual std::vector<float> factors_of(double lr) const = 0;
  void make_factors(const std::string& name, int64_t n);
  const float* factors() const { return factors_.as<float>(); }

  Backend* be_;
  std::vector<ParamInfo> params_;
  int64_t total_;
  int64_t step_ = 0;
  int64_t queued_ = 0;  // steps queued whose norm is not read yet

  // The step count the update being queued uses (AdamW's t): the queued steps before it counted.
  int64_t update_count() const { return step_ + queued_ + 1; }

 private:
  void write_factors(double lr);

  Buffer stats_;                  // device f64 [sum of squared gradients, clipping scale]
  Buffer factors_;                // device f32 [factors_of's]
  std::vector<Span> norm_spans_;  // every parameter, a fused group as one
};

// The optimizer `spec.name` over `params` (named views of a flat buffer of `total` elements),
// decaying with `weight_decay` (train.weight_decay) the parameters `spec` decays. Throws UserError
// for an unknown name, or muon over parameters without hidden matrices.
std::unique_ptr<Optimizer> make_optimizer(Backend* be, const std::vector<ParamInfo>& params,
                                          int64_t total, const OptimizerSpec& spec,
                                          double weight_decay);
// The bytes() of make_optimizer(be, params, total, spec, ...), computed without allocating (memory
// estimates: lmtrain info, train's memory check). AdamW: 2 x total f32; Lion and SGD: 1 x total;
// Muon: a momentum and its step's output per hidden-matrix element, AdamW's two moments per
// other element, and Newton-Schulz's scratch.
uint64_t optimizer_bytes(const OptimizerSpec& spec, const std::vector<ParamInfo>& params,
                         int64_t total);

// Lion (Chen et al. 2023): the sign of an interpolation of momentum and gradient; decoupled
// decay as AdamW's. It needs a learning rate 3 to 10 times smaller than AdamW's (and a weight
// decay as many times larger) for the same effect: its steps are +-lr in every coordinate.
class Lion : public Optimizer {
 public:
  Lion(Backend* be, const std::vector<ParamInfo>& params, int64_t total, const OptimizerSpec& s,
       double weight_decay);
  const char* name() const override { return "lion"; }
  std::vector<StateBuffer> state() const override;
  uint64_t bytes() const override { return m_.bytes(); }
  float* m_data() const { return m_.as<float>(); }

 private:
  void update(float* params, const float* grads, const double* grad_scale) override;
  std::vector<float> factors_of(double lr) const override;
  OptimizerSpec spec_;
  double weight_decay_;
  Buffer m_;
  std::vector<Span> spans_;
};

// SGD with momentum, as torch.optim.SGD with dampening 0 (weight decay added to the gradient).
class Sgd : public Optimizer {
 public:
  Sgd(Backend* be, const std::vector<ParamInfo>& params, int64_t total, const OptimizerSpec& s,
      double weight_decay);
  const char* name() const override { return "sgd"; }
  std::vector<StateBuffer> state() const override;
  uint64_t bytes() const override { return buf_.bytes(); }
  float* momentum_data() const { return buf_.as<float>(); }

 private:
  void update(float* params, const float* grads, const double* grad_scale) override;
  std::vector<float> factors_of(double lr) const override;
  OptimizerSpec spec_;
  double weight_decay_;
  Buffer buf_;
  std::vector<Span> spans_;
};

}  // namespace lmt
