// Per-token scores on the CPU backend (Backend::token_logprobs, head_logprobs): each labelled
// row's log_softmax at its label and whether the label is the row's argmax, what an evaluation
// harness (lm-evaluation-harness's loglikelihood) asks of a model. The row's log-sum-exp is the
// loss's (cpu_row_logsumexp.h: max subtracted, the sum in double over fixed lanes), so a score is
// exactly -(the cross-entropy's loss) of the row. The argmax keeps the first maximum it meets, so
// ties go to the lowest id as torch.argmax's do. With vocabulary tiles (a.cut()) the head walks
// the vocabulary once, the log-sum-exp online as the cut cross-entropy keeps it, the maximum and
// its id carried from tile to tile: no more than one tile of logits exists.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"
#include "backend/cpu/cpu_row_logsumexp.h"

namespace lmt {

namespace {

// A row's statistics over the vocabulary walked so far.
struct RowScore {
  double lse = -std::numeric_limits<double>::infinity(), z_label = 0;
  double max = -std::numeric_limits<double>::infinity();
  int64_t argmax = -1;
};

// The tile z[n] (ids v0..v0+n-1) walked into r: only a strictly greater value moves the argmax,
// so the lowest id of equal maxima stays (tiles are walked in increasing ids).
template <class C>
void walk_scores(RowScore& r, const C* z, int64_t n, int64_t v0, double tile_lse, int32_t label) {
  const double inf = std::numeric_limits<double>::infinity();
  r.lse = r.lse == -inf
              ? tile_lse
              : std::max(r.lse, tile_lse) + std::log1p(std::exp(-std::fabs(r.lse - tile_lse)));
  for (int64_t j = 0; j < n; ++j)
    if (static_cast<double>(z[j]) > r.max || r.argmax < 0) {
      r.max = static_cast<double>(z[j]);
      r.argmax = v0 + j;
    }
  if (label >= v0 && label < v0 + n) r.z_label = static_cast<double>(z[label - v0]);
}

void check_score_labels(const char* op, const int32_t* labels, int64_t N, int64_t V,
                        int32_t ignore_index) {
  for (int64_t n = 0; n < N; ++n)
    LMT_CHECK(labels[n] == ignore_index || (labels[n] >= 0 && labels[n] < V),
              std::string("CpuBackend::") + op + ": label " + std::to_string(labels[n]) +
                  " at row " + std::to_string(n) + " is outside [0, " + std::to_string(V) +
                  ") and is not ignore_index " + std::to_string(ignore_index));
}

// Row i's results from its statistics (0 and 0 for an ignored row).
template <class C>
void store_score(C* logprobs, int32_t* greedy, int64_t i, const RowScore& r, bool ignored,
                 int32_t label) {
  logprobs[i] = ignored ? C(0) : static_cast<C>(r.z_label - r.lse);
  greedy[i] = !ignored && r.argmax == label ? 1 : 0;
}

}  // namespace

// logits[N,V], labels[N]; logprobs[N] (compute type), greedy[N] i32.
void CpuBackend::token_logprobs(DType dt, const void* logits, const int32_t* labels, int64_t N,
                                int64_t V, int32_t ignore_index, double softcap, void* logprobs,
                                void* greedy) {
  check_score_labels("token_logprobs", labels, N, V, ignore_index);
  cpu::dispatch_compute(dt, "token_logprobs", [&](auto tag) {
    using T = decltype(tag);
    using C = cpu::compute_t<T>;
    const T* lg = static_cast<const T*>(logits);
#pragma omp parallel if (N * V >= cpu::kParallelMin)
    {
      std::vector<C> z(static_cast<size_t>(V)), e(static_cast<size_t>(V));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        const bool ignored = labels[n] == ignore_index;
        RowScore r;
        if (!ignored) {
          double sum = 0;
          const double lse = cpu::row_logsumexp(lg + n * V, z.data(), e.data(), V, softcap, &sum);
          walk_scores(r, z.data(), V, 0, lse, labels[n]);
        }
        store_score(static_cast<C*>(logprobs), static_cast<int32_t*>(greedy), n, r, ignored,
                    labels[n]);
      }
    }
  });
}

void CpuBackend::head_logprobs(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                               const int32_t* labels, void* logprobs, void* greedy, void* logits) {
  if (!a.cut()) {
    Backend::head_logprobs(dt, a, h, w, labels, logprobs, greedy, logits);
    return;
  }
  check_score_labels("head_logprobs", labels, a.N, a.V, a.ignore_index);
  const size_t es = dtype_size(dt);
  const int64_t C = a.C, V = a.V, VT = a.vocab_tile;
  auto at = [es](const void* p, int64_t elements) {
    return static_cast<const char*>(p) + static_cast<size_t>(elements) * es;
  };
  cpu::dispatch_compute(dt, "head_logprobs", [&](auto tag) {
    using T = decltype(tag);
    using Cm = cpu::compute_t<T>;
    T* tile = static_cast<T*>(logits);
    for (int64_t s = 0; s < a.N; s += a.chunk) {
      const int64_t n = std::min(a.chunk, a.N - s);
      const int32_t* lab = labels + s;
      std::vector<RowScore> st(static_cast<size_t>(n));
      for (int64_t v0 = 0; v0 < V; v0 += VT) {
        const int64_t vt = std::min(VT, V - v0);
        gemm(dt, false, true, n, vt, C, 1.0, at(h, s * C), C, at(w, v0 * C), C, 0.0, tile, vt);
#pragma omp parallel if (n * vt >= cpu::kParallelMin)
        {
          std::vector<Cm> z(static_cast<size_t>(vt)), e(static_cast<size_t>(vt));
#pragma omp for schedule(static)
          for (int64_t i = 0; i < n; ++i) {
            if (lab[i] == a.ignore_index) continue;
            double sum = 0;
            const double lse =
                cpu::row_logsumexp(tile + i * vt, z.data(), e.data(), vt, a.softcap, &sum);
            walk_scores(st[static_cast<size_t>(i)], z.data(), vt, v0, lse, lab[i]);
          }
        }
      }
      for (int64_t i = 0; i < n; ++i)
        store_score(static_cast<Cm*>(logprobs) + s, static_cast<int32_t*>(greedy) + s, i,
                    st[static_cast<size_t>(i)], lab[i] == a.ignore_index, lab[i]);
    }
  });
}

}  // namespace lmt
