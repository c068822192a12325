// Cross-entropy over one chunk of logits for the CPU backend, loss and gradient in one pass over
// each row. Numerically stable (max subtracted before exp); the row's sum of exponentials
// accumulates in double over eight fixed lanes, so results do not depend on the thread count.
// The gradient overwrites the logits in place, which is what lets the loss be chunked.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"
#include "backend/cpu/cpu_row_logsumexp.h"
#include "backend/loss.h"

namespace lmt {

// logits[N,V] (overwritten by the gradient when grad_scale != 0), losses[N], labels[N].
void CpuBackend::cross_entropy(DType dt, void* logits, void* losses, const int32_t* labels,
                               int64_t N, int64_t V, int32_t ignore_index, double grad_scale,
                               double softcap, const LossSpec& spec, void* ce_losses) {
  for (int64_t n = 0; n < N; ++n)
    LMT_CHECK(labels[n] == ignore_index || (labels[n] >= 0 && labels[n] < V),
              "CpuBackend::cross_entropy: label " + std::to_string(labels[n]) + " at row " +
                  std::to_string(n) + " is outside [0, " + std::to_string(V) +
                  ") and is not ignore_index " + std::to_string(ignore_index));
  const bool want_sum = spec.label_smoothing > 0;
  cpu::dispatch_compute(dt, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    using C = cpu::compute_t<T>;  // also the losses' type
    T* lg = static_cast<T*>(logits);
    C* loss = static_cast<C*>(losses);
    C* ce = static_cast<C*>(ce_losses);
#pragma omp parallel if (N * V >= cpu::kParallelMin)
    {
      std::vector<C> z(static_cast<size_t>(V)), e(static_cast<size_t>(V));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        T* row = lg + n * V;
        const int32_t label = labels[n];
        if (label == ignore_index) {
          loss[n] = C(0);
          if (ce) ce[n] = C(0);
          if (grad_scale != 0) std::fill(row, row + V, T(0));
          continue;
        }
        double sum = 0;
        const double lse = cpu::row_logsumexp(row, z.data(), e.data(), V, softcap, &sum);
        double z_sum = 0;
        if (want_sum)
          for (int64_t j = 0; j < V; ++j) z_sum += static_cast<double>(z[j]);
        const RowLoss<double> r = row_loss(spec, lse, static_cast<double>(z[label]), z_sum, V);
        loss[n] = static_cast<C>(r.objective);
        if (ce) ce[n] = static_cast<C>(r.ce);
        if (grad_scale == 0) continue;
        // d loss / d z_j = a softmax_j + b [j == label] + c (backend/loss.h); the softcap adds a
        // factor 1 - (z_j / cap)^2. The label's element is computed whole before it is stored:
        // bf16 holds p - 1 only to 2^-9 of p, not of the difference, if p is rounded first.
        const C p_scale = static_cast<C>(grad_scale * r.a / sum);
        const C gc = static_cast<C>(grad_scale * r.c), gb = static_cast<C>(grad_scale * r.b);
        if (softcap > 0) {
          const C inv = static_cast<C>(1.0 / softcap);
          for (int64_t j = 0; j < V; ++j) {
            const C t = z[j] * inv;
            row[j] = (e[j] * p_scale + gc) * (C(1) - t * t);
          }
          const C t = z[label] * inv;
          row[label] = C(e[label] * p_scale + gc + gb) * (C(1) - t * t);
        } else {
          for (int64_t j = 0; j < V; ++j) row[j] = e[j] * p_scale + gc;
          row[label] = C(e[label] * p_scale + gc + gb);
        }
      }
    }
  });
}

}  // namespace lmt
