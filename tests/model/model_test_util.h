// Helpers of the model tests: random token ids, and a model's parameters all made random.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/rng.h"
#include "model/transformer.h"

namespace lmt::test {

inline std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& x : ids) x = static_cast<int32_t>(g() % vocab);
  return ids;
}

// Every parameter of an f64 model random, N(0, std); norm weights around their initial value
// (1, or 0 where the norm scales by (1 + w)), so they are not all the same.
inline void randomise(Transformer& m, uint64_t seed, double std) {
  std::vector<double> w(static_cast<size_t>(m.flat_size()), 0.0);
  fill_normal(w.data(), m.flat_size(), 0.0, std, seed, 7);
  for (const ParamInfo& p : m.params())
    if (p.kind == ParamKind::norm)
      for (int64_t i = 0; i < p.numel(); ++i) w[p.offset + i] += m.norm_init();
  m.backend()->from_host(m.params_data(), w.data(), w.size() * sizeof(double));
}

}  // namespace lmt::test
