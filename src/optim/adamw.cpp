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
  double sum = 0.0;
  for (const ParamRange& r : ranges)
    sum += be->sum_squares(DType::f32, grads + r.begin, r.end - r.begin);
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
      v_(be, static_cast<size_t>(total_params) * sizeof(float)) {
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
  const double norm = grad_norm(be_, grads, norm_ranges_);
  if (!std::isfinite(norm)) return norm;
  const double scale = grad_clip > 0 ? std::min(1.0, grad_clip / (norm + 1e-6)) : 1.0;
  ++step_;
  float* m = m_data();
  float* v = v_data();
  for (const ParamRange& r : decay_ranges_)
    be_->adamw_step(params + r.begin, grads + r.begin, m + r.begin, v + r.begin, r.end - r.begin,
                    lr, cfg_.beta1, cfg_.beta2, cfg_.eps, r.decay ? cfg_.weight_decay : 0.0, step_,
                    scale);
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
