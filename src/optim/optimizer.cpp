// The optimizer base (clipping, the non-finite skip, the step count), the span layout every
// optimizer runs its kernels over, Lion and SGD; see optimizer.h.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optim/adamw.h"
#include "optim/muon.h"

namespace lmt {

bool decays(ParamKind kind, bool decay_embeddings, bool decay_norms_and_biases) {
  switch (kind) {
    case ParamKind::matrix:
      return true;
    case ParamKind::embedding:
      return decay_embeddings;
    case ParamKind::norm:
    case ParamKind::bias:
      return decay_norms_and_biases;
  }
  return true;
}

std::vector<Span> make_spans(const std::vector<ParamInfo>& params, int64_t total, bool compact,
                             const OptimizerSpec& spec,
                             std::vector<ParamInfo>* state_params, int64_t* state_size) {
  std::vector<const ParamInfo*> sorted;
  for (const ParamInfo& p : params) sorted.push_back(&p);
  std::sort(sorted.begin(), sorted.end(),
            [](const ParamInfo* a, const ParamInfo* b) { return a->offset < b->offset; });
  std::vector<Span> spans;
  int64_t prev_end = 0, state = 0;
  for (const ParamInfo* p : sorted) {
    const int64_t begin = p->offset, end = p->offset + p->numel();
    LMT_CHECK(begin >= prev_end && end <= total,
              "parameter " + p->name + " overlaps another or lies outside the flat buffer");
    prev_end = end;
    const int64_t at = compact ? state : begin;
    if (state_params) {
      state_params->push_back(*p);
      state_params->back().offset = at;
    }
    state = at + p->numel();
    if (begin == end) continue;
    spans.push_back(Span{begin, at, end - begin,
                         decays(p->kind, spec.decay_embeddings, spec.decay_norms_and_biases)});
  }
  if (state_size) *state_size = compact ? state : total;
  return spans;
}

std::vector<ParamInfo> update_params(const Backend* be, const std::vector<ParamInfo>& params) {
  return be->fused_groups_whole() ? fused_groups(params) : params;
}

Optimizer::Optimizer(Backend* be, const std::vector<ParamInfo>& params, int64_t total)
    : be_(be),
      params_(params),
      total_(total),
      stats_(be, 2 * sizeof(double)),
      norm_spans_(make_spans(update_params(be, params), total, false, OptimizerSpec{})) {
  be->describe(stats_.data(), TensorDesc{"grad_sum_squares", DType::f64, {}});
  be->describe(stats_.as<double>() + 1, TensorDesc{"clip_scale", DType::f64, {}});
}

double Optimizer::clip_and_step(float* params, const float* grads, double lr, double grad_clip) {
  step(params, grads, lr, grad_clip);
  return finish_step();
}

void Optimizer::make_factors(const std::string& name, int64_t n) {
  factors_ = Buffer(be_, static_cast<size_t>(n) * sizeof(float));
  be_->describe(factors_.data(), TensorDesc{name, DType::f32, {n}});
}

void Optimizer::write_factors(double lr) {
  const std::vector<float> f = factors_of(lr);
  LMT_CHECK(f.size() * sizeof(float) == factors_.bytes(), "Optimizer: factors of the wrong size");
  be_->from_host(factors_.data(), f.data(), factors_.bytes());
}

// Norm, clipping scale and the non-finite skip stay on the device; the norm is read once, after
// the update is queued, and decides the step count. The factors are the step's first write.
void Optimizer::step(float* params, const float* grads, double lr, double grad_clip) {
  write_factors(lr);
  double* sum_squares = stats_.as<double>();
  double* scale = sum_squares + 1;
  be_->zero(sum_squares, sizeof(double));
  for (const Span& s : norm_spans_) be_->sum_squares(DType::f32, sum_squares, grads + s.param, s.n);
  be_->clip_scale(scale, sum_squares, grad_clip);
  update(params, grads, scale);
  be_->discard(factors_.data());  // read by the update only: not kept past the step
  ++queued_;
}

void Optimizer::write_step(double lr) {
  write_factors(lr);
  ++queued_;
}

double Optimizer::finish_step() {
  double host = 0;
  be_->to_host(&host, stats_.data(), sizeof(double));
  const double norm = std::sqrt(host);
  confirm_step(std::isfinite(norm));
  return norm;
}

void Optimizer::copy_sum_squares(double* dst) const {
  be_->copy(dst, stats_.data(), sizeof(double));
}

void Optimizer::confirm_step(bool finite) {
  LMT_CHECK(queued_ > 0, "Optimizer::confirm_step without a queued step");
  --queued_;
  if (finite) ++step_;
}

// ---- Lion ----

Lion::Lion(Backend* be, const std::vector<ParamInfo>& params, int64_t total, const OptimizerSpec& s,
           double weight_decay)
    : Optimizer(be, params, total),
      spec_(s),
      weight_decay_(weight_decay),
      m_(be, static_cast<size_t>(total) * sizeof(float)),
      spans_(make_spans(update_params(be, params), total, false, s)) {
  make_factors("lion.factors", 2);
}

std::vector<float> Lion::factors_of(double lr) const {
  const std::array<float, 2> f = decay_factors(lr, weight_decay_);
  return {f.begin(), f.end()};
}

void Lion::update(float* params, const float* grads, const double* grad_scale) {
  for (const Span& s : spans_)
    be_->lion_step(params + s.param, grads + s.param, m_data() + s.state, s.n, factors(),
                   spec_.beta1, spec_.beta2, s.decay && weight_decay_ != 0, grad_scale);
}

std::vector<StateBuffer> Lion::state() const {
  return {{"exp_avg.", m_data(), total_, params_}};
}

// ---- SGD ----

Sgd::Sgd(Backend* be, const std::vector<ParamInfo>& params, int64_t total, const OptimizerSpec& s,
         double weight_decay)
    : Optimizer(be, params, total),
      spec_(s),
      weight_decay_(weight_decay),
      buf_(be, static_cast<size_t>(total) * sizeof(float)),
      spans_(make_spans(update_params(be, params), total, false, s)) {
  make_factors("sgd.lr", 1);
}

std::vector<float> Sgd::factors_of(double lr) const {
  return {static_cast<float>(lr)};
}

void Sgd::update(float* params, const float* grads, const double* grad_scale) {
  for (const Span& s : spans_)
    be_->sgd_step(params + s.param, grads + s.param, momentum_data() + s.state, s.n, factors(),
                  spec_.momentum, spec_.nesterov, s.decay ? weight_decay_ : 0.0, grad_scale);
}

std::vector<StateBuffer> Sgd::state() const {
  return {{"momentum_buffer.", momentum_data(), total_, params_}};
}

namespace {

std::unique_ptr<Optimizer> construct(Backend* be, const std::vector<ParamInfo>& params,
                                     int64_t total, const OptimizerSpec& spec,
                                     double weight_decay) {
  if (spec.name == "adamw") return std::make_unique<AdamW>(be, params, total, spec, weight_decay);
  if (spec.name == "lion") return std::make_unique<Lion>(be, params, total, spec, weight_decay);
  if (spec.name == "sgd") return std::make_unique<Sgd>(be, params, total, spec, weight_decay);
  if (spec.name == "muon") return std::make_unique<Muon>(be, params, total, spec, weight_decay);
  throw UserError("optimizer.name '" + spec.name + "' is not one of adamw, lion, sgd, muon");
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(Backend* be, const std::vector<ParamInfo>& params,
                                          int64_t total, const OptimizerSpec& spec,
                                          double weight_decay) {
  std::unique_ptr<Optimizer> opt = construct(be, params, total, spec, weight_decay);
  for (const StateBuffer& s : opt->state())  // each moment its own tensor, named as saved
    for (const ParamInfo& p : update_params(be, s.params))
      if (p.numel() > 0)
        be->describe(s.data + p.offset, TensorDesc{s.prefix + p.name, DType::f32, p.shape.dims()});
  return opt;
}

uint64_t optimizer_bytes(const OptimizerSpec& spec, const std::vector<ParamInfo>& params,
                         int64_t total) {
  const uint64_t one = static_cast<uint64_t>(total) * sizeof(float);
  if (spec.name == "adamw") return 2 * one;
  if (spec.name == "lion" || spec.name == "sgd") return one;
  if (spec.name == "muon") return Muon::bytes_of(Muon::sizes(params));
  throw UserError("optimizer.name '" + spec.name + "' is not one of adamw, lion, sgd, muon");
}

}  // namespace lmt
