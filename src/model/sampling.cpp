#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace lmt {

int32_t sample_token(const std::vector<float>& logits, const SamplingParams& p, Rng& rng) {
  LMT_CHECK(!logits.empty(), "sample_token: empty logits");
  const int64_t V = static_cast<int64_t>(logits.size());
  if (p.temperature <= 0.0)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  // Candidates sorted by logit, highest first (ties by id, for determinism).
  std::vector<int32_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t k = p.top_k > 0 ? std::min(p.top_k, V) : V;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), by_logit);
  idx.resize(static_cast<size_t>(k));
  std::vector<double> prob(idx.size());
  const double mx = logits[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    prob[i] = std::exp((logits[idx[i]] - mx) / p.temperature);
    sum += prob[i];
  }
  for (double& q : prob) q /= sum;
  size_t keep = prob.size();
  if (p.top_p < 1.0) {
    double cum = 0;
    for (size_t i = 0; i < prob.size(); ++i) {
      cum += prob[i];
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += prob[i];
  double u = rng.uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    u -= prob[i];
    if (u < 0) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace lmt
