// The cut cross-entropy on the CPU backend (Backend::head_loss with a.cut()): the head's product
// fused with the loss, a tile of `chunk` rows by `vocab_tile` token ids at a time. A first walk
// over the vocabulary keeps each row's running log-sum-exp (each tile's added in: the online
// log-sum-exp), sum of logits and label logit; the row's loss follows
// (backend/loss.h). With a gradient a second walk computes each tile's logits again, turns them
// into d loss / d logits (a p_j + b [j == y] + c) and adds their products into dh and dw, so no
// more than one tile of logits ever exists. Row statistics accumulate in double, each row on one
// thread: the results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"
#include "backend/cpu/cpu_row_logsumexp.h"
#include "backend/loss.h"

namespace lmt {

namespace {

// A row's statistics over the vocabulary walked so far.
struct RowStats {
  double lse = -std::numeric_limits<double>::infinity(), z_sum = 0, z_label = 0;
};

// log(exp(a) + exp(b)), a possibly -inf (nothing walked yet).
double log_add_exp(double a, double b) {
  if (a == -std::numeric_limits<double>::infinity()) return b;
  return std::max(a, b) + std::log1p(std::exp(-std::fabs(a - b)));
}

// The soft-capped logit (or the logit) and d capped / d logit.
template <class C>
inline C capped(C x, double softcap, C* deriv) {
  if (softcap <= 0) {
    *deriv = C(1);
    return x;
  }
  const C cap = static_cast<C>(softcap);
  const C t = cpu::tanh_t(x / cap);
  *deriv = C(1) - t * t;
  return cap * t;
}

}  // namespace

void CpuBackend::head_loss(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                           const int32_t* labels, double* loss_sum, void* dh, void* dw,
                           void* logits, void* losses, double* ce_sum) {
  if (!a.cut()) {
    Backend::head_loss(dt, a, h, w, labels, loss_sum, dh, dw, logits, losses, ce_sum);
    return;
  }
  for (int64_t n = 0; n < a.N; ++n)
    LMT_CHECK(labels[n] == a.ignore_index || (labels[n] >= 0 && labels[n] < a.V),
              "CpuBackend::head_loss: label " + std::to_string(labels[n]) + " at row " +
                  std::to_string(n) + " is outside [0, " + std::to_string(a.V) + ")");
  const bool grads = a.grad_scale != 0;
  const size_t es = dtype_size(dt);
  const int64_t C = a.C, V = a.V, VT = a.vocab_tile;
  auto at = [es](const void* p, int64_t elements) {
    return static_cast<char*>(const_cast<void*>(p)) + static_cast<size_t>(elements) * es;
  };
  cpu::dispatch_compute(dt, "head_loss", [&](auto tag) {
    using T = decltype(tag);
    using Cm = cpu::compute_t<T>;
    T* tile = static_cast<T*>(logits);
    for (int64_t s = 0; s < a.N; s += a.chunk) {
      const int64_t n = std::min(a.chunk, a.N - s);
      const int32_t* lab = labels + s;
      const void* hs = at(h, s * C);
      std::vector<RowStats> st(static_cast<size_t>(n));
      for (int64_t v0 = 0; v0 < V; v0 += VT) {
        const int64_t vt = std::min(VT, V - v0);
        gemm(dt, false, true, n, vt, C, 1.0, hs, C, at(w, v0 * C), C, 0.0, tile, vt);
#pragma omp parallel if (n * vt >= cpu::kParallelMin)
        {
          std::vector<Cm> z(static_cast<size_t>(vt)), e(static_cast<size_t>(vt));
#pragma omp for schedule(static)
          for (int64_t i = 0; i < n; ++i) {
            if (lab[i] == a.ignore_index) continue;
            RowStats& r = st[static_cast<size_t>(i)];
            double sum = 0;  // the tile's log-sum-exp, added into the row's online
            r.lse = log_add_exp(
                r.lse, cpu::row_logsumexp(tile + i * vt, z.data(), e.data(), vt, a.softcap, &sum));
            for (int64_t j = 0; j < vt; ++j) r.z_sum += static_cast<double>(z[j]);
            if (lab[i] >= v0 && lab[i] < v0 + vt) r.z_label = static_cast<double>(z[lab[i] - v0]);
          }
        }
      }
      // Each row's loss and the coefficients of its gradient.
      std::vector<RowLoss<double>> rl(static_cast<size_t>(n));
      double objective = 0, ce = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (lab[i] == a.ignore_index) continue;
        const RowStats& r = st[static_cast<size_t>(i)];
        rl[i] = row_loss(a.loss, r.lse, r.z_label, r.z_sum, V);
        objective += rl[i].objective;
        ce += rl[i].ce;
      }
      *loss_sum += objective;
      if (ce_sum) *ce_sum += ce;
      if (!grads) continue;
      void* dhs = at(dh, s * C);
      for (int64_t v0 = 0; v0 < V; v0 += VT) {
        const int64_t vt = std::min(VT, V - v0);
        gemm(dt, false, true, n, vt, C, 1.0, hs, C, at(w, v0 * C), C, 0.0, tile, vt);
#pragma omp parallel for schedule(static) if (n * vt >= cpu::kParallelMin)
        for (int64_t i = 0; i < n; ++i) {
          T* row = tile + i * vt;
          if (lab[i] == a.ignore_index) {
            std::fill(row, row + vt, T(0));
            continue;
          }
          const RowLoss<double>& r = rl[static_cast<size_t>(i)];
          const Cm ga = static_cast<Cm>(a.grad_scale * r.a),
                   gc = static_cast<Cm>(a.grad_scale * r.c);
          const Cm l = static_cast<Cm>(st[static_cast<size_t>(i)].lse);
          const bool has_label = lab[i] >= v0 && lab[i] < v0 + vt;
          const Cm label_logit = has_label ? Cm(row[lab[i] - v0]) : Cm(0);
          Cm d;
          for (int64_t j = 0; j < vt; ++j) {
            const Cm z = capped(Cm(row[j]), a.softcap, &d);
            row[j] = static_cast<T>((ga * cpu::exp_t(static_cast<Cm>(z - l)) + gc) * d);
          }
          if (has_label) {  // computed whole before it is stored, as cross_entropy does
            const Cm z = capped(label_logit, a.softcap, &d);
            const Cm gb = static_cast<Cm>(a.grad_scale * r.b);
            row[lab[i] - v0] =
                static_cast<T>((ga * cpu::exp_t(static_cast<Cm>(z - l)) + gc + gb) * d);
          }
        }
        gemm(dt, false, false, n, C, vt, 1.0, tile, vt, at(w, v0 * C), C, v0 == 0 ? 0.0 : 1.0, dhs,
             C);
        if (dw) gemm(dt, true, false, vt, C, n, 1.0, tile, vt, hs, C, 1.0, at(dw, v0 * C), C);
      }
    }
  });
  (void)losses;  // the cut loss keeps its row statistics on the host
}

}  // namespace lmt
