// Muon with AdamW for the parameters that are not hidden matrices; see muon.h.
#include "optim/muon.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optim/adamw.h"

namespace lmt {

namespace {

// The hidden weight matrices: 2-D matrices but the output head (embeddings are their own kind).
bool hidden_matrix(const ParamInfo& p) {
  return p.kind == ParamKind::matrix && p.shape.rank() == 2 && p.name != "lm_head.weight";
}

// A buffer of n f32 (at least one, so that every buffer is an allocation).
size_t f32_bytes(int64_t n) {
  return static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float);
}

}  // namespace

Muon::Muon(Backend* be, const std::vector<ParamInfo>& params, int64_t total, const OptimizerSpec& s,
           double weight_decay)
    : Optimizer(be, params, total), spec_(s), weight_decay_(weight_decay) {
  std::vector<ParamInfo> hidden, rest;
  for (const ParamInfo& p : params) (hidden_matrix(p) ? hidden : rest).push_back(p);
  if (hidden.empty())
    throw UserError(
        "optimizer.name: muon needs hidden weight matrices to train, and there are none "
        "among the trained parameters (use adamw, lion or sgd)");
  muon_spans_ = make_spans(hidden, total, true, s, &muon_params_, &momentum_size_);
  adamw_spans_ = make_spans(rest, total, true, s, &adamw_params_, &adamw_size_);
  for (size_t i = 0; i < hidden.size(); ++i) {
    const ParamInfo& p = hidden[i];
    const int64_t rows = p.shape[0], cols = p.shape[1];
    // muon_params_ holds the same parameters in offset order: find p's state offset there.
    const auto it = std::find_if(muon_params_.begin(), muon_params_.end(),
                                 [&](const ParamInfo& q) { return q.name == p.name; });
    std::vector<int64_t> widths =
        p.column_blocks.empty() ? std::vector<int64_t>{cols} : p.column_blocks;
    int64_t col = 0;
    for (int64_t w : widths) {
      blocks_.push_back({p.offset + col, it->offset + col, cols, rows, w,
                         decays(p.kind, s.decay_embeddings, s.decay_norms_and_biases)});
      col += w;
    }
    LMT_CHECK(col == cols, "Muon: column blocks of " + p.name + " do not add up to its width");
  }
  const Sizes z = sizes(params);  // what bytes_of counts
  auto f32 = [&](int64_t n) { return Buffer(be, f32_bytes(n)); };
  momentum_ = f32(z.hidden);
  m_ = f32(z.rest);
  v_ = f32(z.rest);
  u_ = f32(z.hidden);
  x_ = f32(2 * z.largest);
  work_ = f32(2 * z.widest * z.widest);
  norm_ = Buffer(be, sizeof(double));
  be->describe(norm_.data(), TensorDesc{"muon.norm_sum_squares", DType::f64, {}});
  make_factors("muon.factors", 3 + 2 * static_cast<int64_t>(blocks_.size()));
}

double Muon::shape_factor(const Block& b) {
  return kRmsMatch * std::sqrt(static_cast<double>(std::max(b.rows, b.cols)));
}

std::vector<float> Muon::factors_of(double lr) const {
  const std::array<float, 3> a =
      adamw_factors(lr, spec_.beta1, spec_.beta2, weight_decay_, update_count());
  std::vector<float> f(a.begin(), a.end());
  for (const Block& b : blocks_) {
    const double scale = shape_factor(b);
    const std::array<float, 2> d = decay_factors(lr * scale, weight_decay_ / scale);
    f.insert(f.end(), d.begin(), d.end());
  }
  return f;
}

uint64_t Muon::bytes() const {
  uint64_t n = norm_.bytes();
  for (const Buffer* b : {&momentum_, &m_, &v_, &u_, &x_, &work_}) n += b->bytes();
  return n;
}

Muon::Sizes Muon::sizes(const std::vector<ParamInfo>& params) {
  Sizes s;
  for (const ParamInfo& p : params) {
    if (!hidden_matrix(p)) {
      s.rest += p.numel();
      continue;
    }
    s.hidden += p.numel();
    const int64_t rows = p.shape[0];
    for (int64_t w : p.column_blocks.empty() ? std::vector<int64_t>{p.shape[1]} : p.column_blocks) {
      s.largest = std::max(s.largest, rows * w);
      s.widest = std::max(s.widest, std::min(rows, w));
    }
  }
  return s;
}

uint64_t Muon::bytes_of(const Sizes& s) {
  return 2 * f32_bytes(s.hidden) + 2 * f32_bytes(s.rest) + f32_bytes(2 * s.largest) +
         f32_bytes(2 * s.widest * s.widest) + sizeof(double);
}

std::vector<StateBuffer> Muon::state() const {
  return {{"momentum_buffer.", momentum_.as<float>(), momentum_size_, muon_params_},
          {"exp_avg.", m_.as<float>(), adamw_size_, adamw_params_},
          {"exp_avg_sq.", v_.as<float>(), adamw_size_, adamw_params_}};
}

std::string Muon::assignment() const {
  int64_t muon_n = 0, adamw_n = 0;
  for (const ParamInfo& p : muon_params_) muon_n += p.numel();
  for (const ParamInfo& p : adamw_params_) adamw_n += p.numel();
  std::string names;
  for (const ParamInfo& p : adamw_params_)
    if (p.kind == ParamKind::embedding || p.kind == ParamKind::matrix)
      names += (names.empty() ? "" : ", ") + p.name;
  return fmt::format(
      "optimizer: muon for {} hidden matrices ({} blocks, {} parameters; momentum {}{}, {} "
      "Newton-Schulz steps); adamw for the other {} tensors ({} parameters: {}{}norms and biases)",
      muon_params_.size(), blocks_.size(), muon_n, spec_.momentum,
      spec_.nesterov ? ", Nesterov" : "", spec_.ns_steps, adamw_params_.size(), adamw_n, names,
      names.empty() ? "" : ", ");
}

void Muon::newton_schulz(Backend* be, float* u, float* x, float* a, float* b, double* norm,
                         int64_t rows, int64_t cols, int64_t steps) {
  // X is [rows, cols]; the products are over the smaller side: A = X X^T ([rows, rows]) when
  // rows <= cols, else A = X^T X ([cols, cols]) and X B on the right.
  const bool wide = rows <= cols;
  const int64_t k = wide ? rows : cols;
  be->zero(norm, sizeof(double));
  be->sum_squares(DType::f32, norm, u, rows * cols);
  be->scale_by_rnorm(u, rows * cols, norm, 1e-7);
  float* cur = u;
  float* next = x;
  for (int64_t i = 0; i < steps; ++i) {
    if (wide)
      be->gemm(DType::f32, false, true, k, k, cols, 1.0, cur, cols, cur, cols, 0.0, a, k);
    else
      be->gemm(DType::f32, true, false, k, k, rows, 1.0, cur, cols, cur, cols, 0.0, a, k);
    // B = b A + c A A, then X' = a X + B X (or X B).
    be->copy(b, a, static_cast<size_t>(k * k) * sizeof(float));
    be->gemm(DType::f32, false, false, k, k, k, kC, a, k, a, k, kB, b, k);
    be->copy(next, cur, static_cast<size_t>(rows * cols) * sizeof(float));
    if (wide)
      be->gemm(DType::f32, false, false, rows, cols, rows, 1.0, b, k, cur, cols, kA, next, cols);
    else
      be->gemm(DType::f32, false, false, rows, cols, cols, 1.0, cur, cols, b, k, kA, next, cols);
    std::swap(cur, next);
  }
  if (cur != x) be->copy(x, cur, static_cast<size_t>(rows * cols) * sizeof(float));
}

void Muon::update(float* params, const float* grads, const double* grad_scale) {
  float* u = u_.as<float>();
  for (const Span& s : muon_spans_)
    be_->muon_momentum(u + s.state, momentum_.as<float>() + s.state, grads + s.param, s.n,
                       spec_.momentum, spec_.nesterov, grad_scale);
  float* block = x_.as<float>();
  float* out = block + (x_.bytes() / sizeof(float)) / 2;
  float* a = work_.as<float>();
  float* b2 = a + static_cast<int64_t>(work_.bytes() / sizeof(float)) / 2;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    // u is scratch: a whole matrix is orthogonalised in place; only a block of a fused one
    // (rows b.ld apart) is gathered into a dense copy first.
    float* x = u + b.state;
    if (b.ld != b.cols) {
      be_->copy_2d(block, b.cols, x, b.ld, b.rows, b.cols);
      x = block;
    }
    newton_schulz(be_, x, out, a, b2, norm_.as<double>(), b.rows, b.cols, spec_.ns_steps);
    // Step lr * scale along X; the decay stays 1 - lr wd (muon_apply decays by its lr times wd).
    be_->muon_apply(params + b.param, b.ld, out, b.rows, b.cols, factors() + 3 + 2 * i,
                    b.decay && weight_decay_ != 0, grad_scale);
  }
  adamw_spans(be_, adamw_spans_, params, grads, m_.as<float>(), v_.as<float>(), factors(),
              spec_.beta1, spec_.beta2, spec_.eps, weight_decay_, grad_scale);
  for (const Buffer* s : {&u_, &x_, &work_}) be_->discard(s->data());
}

}  // namespace lmt
