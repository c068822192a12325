// A row of logits' log-sum-exp for the CPU backend's losses (cpu_cross_entropy.cpp, the whole
// row; cpu_cut_cross_entropy.cpp, a tile of it at a time).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/cpu/cpu_dispatch.h"

namespace lmt::cpu {

// One row: z = softcap(logits) into `z`, exp(z - max) into `e` (both in the compute type C);
// returns (log-sum-exp, sum).
template <class T, class C>
double row_logsumexp(const T* logits, C* z, C* e, int64_t V, double softcap, double* sum_out) {
  if (softcap > 0) {
    const C cap = static_cast<C>(softcap), inv = static_cast<C>(1.0 / softcap);
    for (int64_t j = 0; j < V; ++j) z[j] = cap * tanh_t(C(logits[j]) * inv);
  } else {
    std::copy(logits, logits + V, z);
  }
  C mx = -std::numeric_limits<C>::infinity();
  for (int64_t j = 0; j < V; ++j) mx = std::max(mx, z[j]);
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= V; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      e[j + l] = exp_t(z[j + l] - mx);
      lane[l] += e[j + l];
    }
  for (; j < V; ++j) {
    e[j] = exp_t(z[j] - mx);
    lane[0] += e[j];
  }
  double sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  *sum_out = sum;
  return static_cast<double>(mx) + std::log(sum);
}

}  // namespace lmt::cpu
