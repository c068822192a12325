// AdamW with global-norm clipping over the flat parameter buffer; see adamw.h.
#include "optim/adamw.h"

#include <cmath>

namespace lmt {

bool decays(ParamKind kind, const AdamWConfig& cfg) {
  return decays(kind, cfg.decay_embeddings, cfg.decay_norms_and_biases);
}

double grad_norm(Backend* be, const float* grads, const std::vector<ParamRange>& ranges) {
  Buffer acc(be, sizeof(double));
  for (const ParamRange& r : ranges)
    be->sum_squares(DType::f32, acc.as<double>(), grads + r.begin, r.end - r.begin);
  double sum = 0.0;
  be->to_host(&sum, acc.data(), sizeof(double));
  return std::sqrt(sum);
}

std::vector<OptimStateView> state_views(const std::vector<StateBuffer>& state) {
  std::vector<OptimStateView> views;
  for (const StateBuffer& s : state)
    for (const ParamInfo& p : s.params)
      views.push_back({s.prefix + p.name, Tensor{s.data + p.offset, DType::f32, p.shape}});
  return views;
}

namespace {

// What make_spans reads: the decay choices.
OptimizerSpec spec_of(const AdamWConfig& c) {
  OptimizerSpec s;
  s.decay_embeddings = c.decay_embeddings, s.decay_norms_and_biases = c.decay_norms_and_biases;
  return s;
}

}  // namespace

AdamW::AdamW(Backend* be, const std::vector<ParamInfo>& params, int64_t total_params,
             const AdamWConfig& cfg)
    : Optimizer(be, params, total_params),
      cfg_(cfg),
      m_(be, static_cast<size_t>(total_params) * sizeof(float)),
      v_(be, static_cast<size_t>(total_params) * sizeof(float)),
      spans_(make_spans(update_params(be, params), total_params, false, spec_of(cfg))) {
  make_factors("adamw.factors", 3);
}

std::vector<ParamRange> AdamW::decay_ranges() const {
  // One span per parameter; adjacent spans with the same decay read as one range.
  std::vector<ParamRange> r;
  for (const Span& s : spans_) {
    if (!r.empty() && r.back().end == s.param && r.back().decay == s.decay)
      r.back().end = s.param + s.n;
    else
      r.push_back({s.param, s.param + s.n, s.decay});
  }
  return r;
}

void adamw_spans(Backend* be, const std::vector<Span>& spans, float* params, const float* grads,
                 float* m, float* v, const float* factors, double beta1, double beta2, double eps,
                 double weight_decay, const double* grad_scale) {
  for (const Span& s : spans)
    be->adamw_step(params + s.param, grads + s.param, m + s.state, v + s.state, s.n, factors, beta1,
                   beta2, eps, s.decay && weight_decay != 0, grad_scale);
}

std::vector<float> AdamW::factors_of(double lr) const {
  const std::array<float, 3> f =
      adamw_factors(lr, cfg_.beta1, cfg_.beta2, cfg_.weight_decay, update_count());
  return {f.begin(), f.end()};
}

void AdamW::update(float* params, const float* grads, const double* grad_scale) {
  adamw_spans(be_, spans_, params, grads, m_data(), v_data(), factors(), cfg_.beta1, cfg_.beta2,
              cfg_.eps, cfg_.weight_decay, grad_scale);
}

std::vector<StateBuffer> AdamW::state() const {
  return {{"exp_avg.", m_data(), total_, params_}, {"exp_avg_sq.", v_data(), total_, params_}};
}

}  // namespace lmt
