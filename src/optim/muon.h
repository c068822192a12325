// Muon (Jordan et al. 2024) for the hidden weight matrices, AdamW for everything else (the
// embeddings, the output head, norms and biases). For each matrix G of a step: momentum
// buf = b buf + (1 - b) G, the update's direction u = (1 - b) G + b buf (Nesterov) or buf, then
// u orthogonalised by the quintic Newton-Schulz iteration (5 steps of X = a X + (b A + c A^2) X,
// A = X X^T, (a, b, c) = (3.4445, -4.7750, 2.0315), from X = u / ||u||_F), and
// p = p (1 - lr wd) - lr * 0.2 sqrt(max(rows, cols)) * X. The factor 0.2 sqrt(max(rows, cols))
// gives the update the RMS of a typical AdamW update (Liu et al. 2025, "Muon is scalable for LLM
// training"), so AdamW's learning rate and weight decay carry over. A matrix that fuses several
// projections (ParamInfo::column_blocks: gpt2's c_attn) is orthogonalised block by block, as if
// the projections were separate matrices; q|k|v and gate|up of the other families are separate
// parameters already. Newton-Schulz runs in f32 through the backend's GEMM.
#pragma once

#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace lmt {

class Muon : public Optimizer {
 public:
  // The Newton-Schulz coefficients and the update's shape factor.
  static constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315, kRmsMatch = 0.2;

  Muon(Backend* be, const std::vector<ParamInfo>& params, int64_t total, const OptimizerSpec& s,
       double weight_decay);
  const char* name() const override { return "muon"; }
  // momentum_buffer.<matrix> (Muon), exp_avg. and exp_avg_sq.<other> (AdamW); each compact.
  std::vector<StateBuffer> state() const override;
  uint64_t bytes() const override;
  std::string assignment() const override;
  // Element counts the buffers are sized from: hidden-matrix and other elements, the largest
  // block (rows x block width) and the widest min(rows, block width).
  struct Sizes {
    int64_t hidden = 0, rest = 0, largest = 0, widest = 0;
  };
  static Sizes sizes(const std::vector<ParamInfo>& params);
  // The bytes() of a Muon over these sizes.
  static uint64_t bytes_of(const Sizes& s);

  // The orthogonalised direction of u (dense [rows, cols], f32 on the backend; overwritten) into
  // x: `steps` Newton-Schulz iterations from u / ||u||_F. a and b are scratch of min(rows, cols)^2
  // elements each; norm is a device f64. Public for tests (the result's singular values).
  static void newton_schulz(Backend* be, float* u, float* x, float* a, float* b, double* norm,
                            int64_t rows, int64_t cols, int64_t steps);

 private:
  // One block (a projection) of a hidden matrix.
  struct Block {
    int64_t param;  // its first element in the flat buffer
    int64_t state;  // and in the momentum buffer
    int64_t ld;     // row stride in both
    int64_t rows, cols;
    bool decay;
  };
  void update(float* params, const float* grads, const double* grad_scale) override;
  // AdamW's factors (adamw_factors), then each block's {1 - lr s wd / s, lr s} for its shape
  // factor s (decay_factors of lr s and wd / s).
  std::vector<float> factors_of(double lr) const override;
  static double shape_factor(const Block& b);

  OptimizerSpec spec_;
  double weight_decay_;
  std::vector<ParamInfo> muon_params_, adamw_params_;  // offsets into their state buffers
  std::vector<Span> muon_spans_, adamw_spans_;
  std::vector<Block> blocks_;
  Buffer momentum_, m_, v_;
  int64_t momentum_size_ = 0, adamw_size_ = 0;
  Buffer u_, x_, work_, norm_;  // scratch: the momentum step's output, one block, NS's products
};

}  // namespace lmt
