// AdamW with global-norm clipping over the flat parameter buffer; see adamw.h.
#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lmt {

bool decays(ParamKind kind, const AdamWConfig& cfg) {
  switch (kind) {
    case ParamKind::matrix:
      return true;
    case ParamKind::embedding:
      return cfg.decay_embeddings;
    case ParamKind::norm:
    case ParamKind::bias:
      return cfg.decay_norms_and_biases;
  }
  return true;
}

double grad_norm(Backend* be, const float* grads, const std::vector<ParamRange>& ranges) {
  Buffer acc(be, sizeof(double));
  for (const ParamRange& r : ranges)
    be->sum_squares(DType::f32, acc.as<double>(), grads + r.begin, r.end - r.begin);
  double sum = 0.0;
  be->to_host(&sum, acc.data(), sizeof(double));
  return std::sqrt(sum);
}

namespace {

// Appends [begin, end) to ranges, merging with the last range when adjacent with the same decay
// (or always when ignore_decay).
void append_range(std::vector<ParamRange>& ranges, ParamRange r, bool ignore_decay) {
  if (!ranges.empty() && ranges.back().end == r.begin &&
      (ignore_decay || ranges.back().decay == r.decay)) {
    ranges.back().end = r.end;
    return;
  }
  ranges.push_back(r);
}

}  // namespace

AdamW::AdamW(Backend* be, const std::vector<ParamInfo>& params, int64_t total_params,
             const AdamWConfig& cfg)
    : be_(be),
      params_(params),
      total_(total_params),
      cfg_(cfg),
      m_(be, static_cast<size_t>(total_params) * sizeof(float)),
      v_(be, static_cast<size_t>(total_params) * sizeof(float)),
      stats_(be, 2 * sizeof(double)) {
  std::vector<const ParamInfo*> sorted;
  for (const ParamInfo& p : params_) sorted.push_back(&p);
  std::sort(sorted.begin(), sorted.end(),
            [](const ParamInfo* a, const ParamInfo* b) { return a->offset < b->offset; });
  int64_t prev_end = 0;
  for (const ParamInfo* p : sorted) {
    const int64_t begin = p->offset, end = p->offset + p->numel();
    LMT_CHECK(begin >= prev_end && end <= total_params,
              "parameter " + p->name + " overlaps another or lies outside the flat buffer");
    prev_end = end;
    if (begin == end) continue;
    ParamRange r{begin, end, decays(p->kind, cfg_)};
    append_range(decay_ranges_, r, false);
    append_range(norm_ranges_, r, true);
  }
}

double AdamW::clip_and_step(float* params, const float* grads, double lr, double grad_clip) {
  // Norm, clipping scale and the non-finite skip stay on the device; the norm is read once, after
  // the update is queued, and decides the step count.
  double* sum_squares = stats_.as<double>();
  double* scale = sum_squares + 1;
  be_->zero(sum_squares, sizeof(double));
  for (const ParamRange& r : norm_ranges_)
    be_->sum_squares(DType::f32, sum_squares, grads + r.begin, r.end - r.begin);
  be_->clip_scale(scale, sum_squares, grad_clip);
  float* m = m_data();
  float* v = v_data();
  for (const ParamRange& r : decay_ranges_)
    be_->adamw_step(params + r.begin, grads + r.begin, m + r.begin, v + r.begin, r.end - r.begin,
                    lr, cfg_.beta1, cfg_.beta2, cfg_.eps, r.decay ? cfg_.weight_decay : 0.0,
                    step_ + 1, scale);
  double host = 0;
  be_->to_host(&host, sum_squares, sizeof(double));
  const double norm = std::sqrt(host);
  if (std::isfinite(norm)) ++step_;
  return norm;
}

std::vector<OptimStateView> AdamW::state_views() const {
  std::vector<OptimStateView> views;
  for (const char* which : {"exp_avg.", "exp_avg_sq."}) {
    float* base = std::string(which) == "exp_avg." ? m_data() : v_data();
    for (const ParamInfo& p : params_)
      views.push_back({which + p.name, Tensor{base + p.offset, DType::f32, p.shape}});
  }
  return views;
}

}  // namespace lmt
