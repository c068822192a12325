// Flash attention on the CPU: causal, grouped-query, sliding window, softcap, KV-cache offsets,
// document masking for packed samples.
// Work is cut into 64-query x 64-key tiles; only one tile of scores exists at a time, with a
// running max and sum per query row (online softmax), so memory is O(T) per head, never T x T.
// The backward is FlashAttention-2's: P is recomputed from the saved log-sum-exp.
//
// Determinism: every output element is owned by one work item that sums its contributions in a
// fixed order, so items can be scheduled dynamically (causal tiles differ in cost) and the bits
// do not depend on the thread count. Under GQA, dk/dv of a kv head gather from several query
// heads, so the backward's items are (sequence, kv head) pairs ("fused") or, when those are too
// few to occupy the threads, key tiles for dk/dv and then query tiles for dq ("split").
//
// The tile products are cpu::tile_gemm (register-blocked loops) inlined into cloned functions
// (see LMT_CLONES), which GCC turns into AVX2/AVX-512 FMA code.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"

namespace lmt {

namespace cpu {
namespace {
std::atomic<AttentionBackwardMode> g_backward_mode{AttentionBackwardMode::automatic};
}  // namespace
void set_attention_backward_mode(AttentionBackwardMode mode) {
  g_backward_mode = mode;
}
}  // namespace cpu

namespace {

constexpr int kBq = 64;  // queries per tile
constexpr int kBk = 64;  // keys per tile
template <class T>
constexpr int kGrain = cpu::kTileGrain<T>;  // packed row widths are multiples of this

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

using cpu::tile_gemm;

// ---- problem description ----
// T: the compute type of the tiles, softmax statistics and lse (float for bf16); S: the element
// type of q, k, v, out and their gradients (T, or bf16), converted as tiles are packed and stored.
template <class T, class S = T>
struct Attn {
  int64_t B, Tq, Tk, off, window, nqb, nkb;
  int Hq, Hkv, D, group;
  int64_t Dp;  // D rounded up to kGrain: row stride of packed tiles
  int64_t qrs, qbs, kvrs, kvbs, ors, obs;
  T scale, softcap;
  const S *q, *k, *v, *o, *dout;
  const T* lse_in;
  S *out, *dq, *dk, *dv;
  T* lse;
  // Keys and values packed once per call (pack_kv): per (b, kv head) pair, kt/vt are transposed
  // [D][ldt] and ks/vs row-major [ldt][Dp], zero-padded to ldt = Tk rounded up to a tile.
  int64_t ldt;
  const T *kt, *ks, *vt, *vs;
  int64_t pair(int64_t b, int g) const { return b * Hkv + g; }
  const T* kt_at(int64_t b, int g) const { return kt + pair(b, g) * D * ldt; }
  const T* vt_at(int64_t b, int g) const { return vt + pair(b, g) * D * ldt; }
  const T* ks_at(int64_t b, int g) const { return ks + pair(b, g) * ldt * Dp; }
  const T* vs_at(int64_t b, int g) const { return vs + pair(b, g) * ldt * Dp; }

  const int32_t* doc_start;  // [B, Tq] or null: first key of query i's document
  // Keys visible to query i of sequence b: [lo(b, i), hi(i)], empty when lo > hi. lo is
  // non-decreasing in i (windows slide, documents follow each other), so lo(b, i0) bounds a tile.
  int64_t lo(int64_t b, int64_t i) const {
    int64_t l = window > 0 ? std::max<int64_t>(0, off + i - window + 1) : 0;
    if (doc_start) l = std::max<int64_t>(l, doc_start[b * Tq + i]);
    return l;
  }
  int64_t hi(int64_t i) const { return std::min(off + i, Tk - 1); }
  int64_t qoff(int64_t b, int64_t i, int h) const { return b * qbs + i * qrs + int64_t{h} * D; }
  int64_t kvoff(int64_t b, int64_t j, int g) const { return b * kvbs + j * kvrs + int64_t{g} * D; }
  int64_t ooff(int64_t b, int64_t i, int h) const { return b * obs + i * ors + int64_t{h} * D; }
  // Whether key tile [j, j + nk) holds a key visible to some query of [i0, i0 + nq).
  bool tile_live(int64_t b, int64_t i0, int nq, int64_t j, int nk) const {
    return j <= hi(i0 + nq - 1) && j + nk - 1 >= lo(b, i0);
  }
};

// Per-thread buffers: one query tile (qs, dos [kBq][Dp]), its accumulator, score tiles, row
// statistics, and for the fused backward dk/dv of a whole kv head [ldt][Dp].
template <class T>
struct Scratch {
  std::vector<T> qs, dos, acc, s, p, pt, tt, m, l, di, lse, dk, dv;
  template <class S>
  Scratch(const Attn<T, S>& a, int64_t kv_rows, bool backward) {
    const auto z = [](int64_t n) { return std::vector<T>(static_cast<size_t>(n)); };
    qs = z(kBq * a.Dp), acc = z(kBq * a.Dp), s = z(kBq * kBk), m = z(kBq), l = z(kBq);
    if (backward) {
      dos = z(kBq * a.Dp), p = z(kBq * kBk), pt = z(kBk * kBq), tt = z(kBq * kBk);
      di = z(kBq), lse = z(kBq), dk = z(kv_rows * a.Dp), dv = z(kv_rows * a.Dp);
    } else {
      tt = z(kBq * kBk);
    }
  }
};

// Packs the keys and values of every (b, kv head) pair, once per call and in parallel over key
// tiles, into the layouts of Attn::kt/ks/vt/vs (kt and vs for the forward; kt, ks and vt for the
// backward). Padding keys and dims are zero. Same size as k and v: O(T) memory.
template <class T, class S>
void pack_kv(Attn<T, S>& a, bool backward, std::vector<T>& kt, std::vector<T>& ks,
             std::vector<T>& vt, std::vector<T>& vs) {
  a.ldt = round_up(a.Tk, kBk);
  const int64_t pairs = a.B * a.Hkv, tiles = a.ldt / kBk, D = a.D, Dp = a.Dp, ldt = a.ldt;
  kt.resize(static_cast<size_t>(pairs * D * ldt));
  (backward ? vt : vs).resize(static_cast<size_t>(pairs * (backward ? D : Dp) * ldt));
  if (backward) ks.resize(static_cast<size_t>(pairs * ldt * Dp));
#pragma omp parallel for schedule(static) if (pairs * ldt * D >= cpu::kParallelMin)
  for (int64_t item = 0; item < pairs * tiles; ++item) {
    const int64_t bg = item / tiles, j0 = (item % tiles) * kBk;
    const int64_t b = bg / a.Hkv;
    const int g = static_cast<int>(bg % a.Hkv);
    for (int64_t j = j0; j < j0 + kBk; ++j) {
      const bool real = j < a.Tk;
      const S* kr = real ? a.k + a.kvoff(b, j, g) : nullptr;
      const S* vr = real ? a.v + a.kvoff(b, j, g) : nullptr;
      for (int64_t d = 0; d < D; ++d) kt[(bg * D + d) * ldt + j] = real ? T(kr[d]) : T(0);
      T* rs = backward ? &ks[(bg * ldt + j) * Dp] : &vs[(bg * ldt + j) * Dp];
      const S* src = backward ? kr : vr;
      for (int64_t d = 0; d < Dp; ++d) rs[d] = real && d < D ? T(src[d]) : T(0);
      if (backward)
        for (int64_t d = 0; d < D; ++d) vt[(bg * D + d) * ldt + j] = real ? T(vr[d]) : T(0);
    }
  }
  a.kt = kt.data(), a.ks = ks.data(), a.vt = vt.data(), a.vs = vs.data();
}

// Query rows [i0, i0 + nq) of head h into qs [nq][Dp]; for the backward also dout into dos,
// Di = rowsum(dout * out) and the saved lse.
template <class T, class S>
LMT_INLINE void pack_q(const Attn<T, S>& a, Scratch<T>& s, int64_t b, int h, int64_t i0, int nq,
                       bool backward) {
  for (int ii = 0; ii < nq; ++ii) {
    const S* qr = a.q + a.qoff(b, i0 + ii, h);
    for (int d = 0; d < a.D; ++d) s.qs[ii * a.Dp + d] = qr[d];
    if (!backward) continue;
    const S* dr = a.dout + a.ooff(b, i0 + ii, h);
    const S* orow = a.o + a.ooff(b, i0 + ii, h);
    double di = 0;
    for (int d = 0; d < a.D; ++d) {
      s.dos[ii * a.Dp + d] = dr[d];
      di += static_cast<double>(dr[d]) * orow[d];
    }
    s.di[ii] = static_cast<T>(di);
    s.lse[ii] = a.lse_in[(b * a.Hq + h) * a.Tq + i0 + ii];
  }
}

// Visible columns [first, last) of query i in key tile [j, j + nk).
struct Span {
  int first, last;
};
template <class T, class S>
LMT_INLINE Span visible(const Attn<T, S>& a, int64_t b, int64_t i, int64_t j, int nk) {
  const int64_t f = std::clamp<int64_t>(a.lo(b, i) - j, 0, nk);
  const int64_t e = std::clamp<int64_t>(a.hi(i) - j + 1, 0, nk);
  return {static_cast<int>(f), static_cast<int>(std::max(f, e))};
}

// Scores of one row in place: scale, softcap, mask (-inf outside the span). tanh values to `t`.
template <class T, class S>
LMT_INLINE void score_row(const Attn<T, S>& a, T* row, T* t, Span sp) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const T scale = a.scale, cap = a.softcap;  // locals: row may alias a's members for the compiler
  const int first = sp.first, last = sp.last;
  if (cap > T(0)) {
    const T inv = T(1) / cap;
    for (int jj = 0; jj < kBk; ++jj) {
      const T th = cpu::tanh_t(row[jj] * scale * inv);
      t[jj] = th;
      row[jj] = (jj >= first && jj < last) ? cap * th : kNegInf;
    }
  } else {
    for (int jj = 0; jj < kBk; ++jj)
      row[jj] = (jj >= first && jj < last) ? row[jj] * scale : kNegInf;
  }
}

// ---- forward: one (sequence, query head, query tile) item ----
template <class T, class S>
LMT_INLINE void forward_item(const Attn<T, S>& a, Scratch<T>& s, int64_t item) {
  const int64_t bh = item / a.nqb, ib = a.nqb - 1 - item % a.nqb;  // costly tiles first
  const int64_t b = bh / a.Hq, i0 = ib * kBq;
  const int h = static_cast<int>(bh % a.Hq), g = h / a.group;
  const int nq = static_cast<int>(std::min<int64_t>(kBq, a.Tq - i0));
  const int64_t Dp = a.Dp;
  const T* kt = a.kt_at(b, g);
  const T* vs = a.vs_at(b, g);
  pack_q(a, s, b, h, i0, nq, false);
  std::fill(s.acc.begin(), s.acc.end(), T(0));
  std::fill(s.m.begin(), s.m.end(), -std::numeric_limits<T>::infinity());
  std::fill(s.l.begin(), s.l.end(), T(0));
  for (int64_t j = a.lo(b, i0) / kBk * kBk; j <= a.hi(i0 + nq - 1); j += kBk) {
    const int nk = static_cast<int>(std::min<int64_t>(kBk, a.Tk - j));
    if (!a.tile_live(b, i0, nq, j, nk)) continue;
    tile_gemm<T, false>(s.s.data(), kBk, s.qs.data(), Dp, kt + j, a.ldt, nq, kBk, a.D);
    for (int ii = 0; ii < nq; ++ii) {
      T* row = s.s.data() + ii * kBk;
      const Span sp = visible(a, b, i0 + ii, j, nk);
      if (sp.first >= sp.last) {
        std::fill(row, row + kBk, T(0));
        continue;
      }
      score_row(a, row, s.tt.data() + ii * kBk, sp);
      constexpr int G = kGrain<T>;
      T lane_max[G];
      for (int u = 0; u < G; ++u) lane_max[u] = row[u];
      for (int jj = G; jj < kBk; jj += G)
        for (int u = 0; u < G; ++u) lane_max[u] = std::max(lane_max[u], row[jj + u]);
      T mx = s.m[ii];
      for (int u = 0; u < G; ++u) mx = std::max(mx, lane_max[u]);
      const T alpha = cpu::exp_t(s.m[ii] - mx);  // 0 on the first live tile (m = -inf)
      T lanes[kGrain<T>] = {};
      for (int jj = 0; jj < kBk; jj += kGrain<T>)
        for (int u = 0; u < kGrain<T>; ++u) {
          const T p = cpu::exp_t(row[jj + u] - mx);
          row[jj + u] = p;
          lanes[u] += p;
        }
      T sum = 0;
      for (int u = 0; u < kGrain<T>; ++u) sum += lanes[u];
      s.l[ii] = s.l[ii] * alpha + sum;
      s.m[ii] = mx;
      if (alpha != T(1)) {
        T* o = s.acc.data() + ii * Dp;
        for (int64_t d = 0; d < Dp; ++d) o[d] *= alpha;
      }
    }
    tile_gemm<T, true>(s.acc.data(), Dp, s.s.data(), kBk, vs + j * Dp, Dp, nq, static_cast<int>(Dp),
                       nk);
  }
  for (int ii = 0; ii < nq; ++ii) {
    S* orow = a.out + a.ooff(b, i0 + ii, h);
    const T l = s.l[ii];
    const T inv = l > T(0) ? T(1) / l : T(0);  // a row with no visible key gives 0
    for (int d = 0; d < a.D; ++d) orow[d] = s.acc[ii * Dp + d] * inv;
    a.lse[(b * a.Hq + h) * a.Tq + i0 + ii] =
        l > T(0) ? s.m[ii] + std::log(l) : -std::numeric_limits<T>::infinity();
  }
}

LMT_CLONES void forward_item_mv(const Attn<float>& a, Scratch<float>& s, int64_t item) {
  forward_item(a, s, item);
}
LMT_CLONES void forward_item_mv(const Attn<double>& a, Scratch<double>& s, int64_t item) {
  forward_item(a, s, item);
}
LMT_CLONES void forward_item_mv(const Attn<float, cpu::bf16>& a, Scratch<float>& s, int64_t item) {
  forward_item(a, s, item);
}

// ---- backward: one (query tile, key tile) pair ----
// The packed query tile is in s (pack_q); the key tile starts at key j of kv head g. Adds
// dS K to dq_acc [nq][Dp], dS^T Q to dk_acc and P^T dO to dv_acc [nk][Dp] (each when non-null).
template <class T, class E>
LMT_INLINE void backward_tile(const Attn<T, E>& a, Scratch<T>& s, int64_t b, int g, int64_t i0,
                              int nq, int64_t j, int nk, T* dq_acc, T* dk_acc, T* dv_acc) {
  const int64_t Dp = a.Dp, ldt = a.ldt;
  T* S = s.s.data();
  T* P = s.p.data();
  tile_gemm<T, false>(S, kBk, s.qs.data(), Dp, a.kt_at(b, g) + j, ldt, nq, kBk, a.D);
  for (int ii = 0; ii < nq; ++ii) {
    T* row = S + ii * kBk;
    T* prow = P + ii * kBk;
    const Span sp = visible(a, b, i0 + ii, j, nk);
    score_row(a, row, s.tt.data() + ii * kBk, sp);
    const T lse = s.lse[ii];
    for (int jj = 0; jj < kBk; ++jj)
      prow[jj] = (jj >= sp.first && jj < sp.last) ? cpu::exp_t(row[jj] - lse) : T(0);
  }
  if (dv_acc) {
    for (int jj = 0; jj < nk; ++jj)
      for (int ii = 0; ii < nq; ++ii) s.pt[jj * kBq + ii] = P[ii * kBk + jj];
    tile_gemm<T, true>(dv_acc, Dp, s.pt.data(), kBq, s.dos.data(), Dp, nk, static_cast<int>(Dp),
                       nq);
  }
  // dP = dO V^T into S, then dS = P (dP - Di) (1 - tanh^2) * scale into P.
  tile_gemm<T, false>(S, kBk, s.dos.data(), Dp, a.vt_at(b, g) + j, ldt, nq, kBk, a.D);
  const bool capped = a.softcap > T(0);
  for (int ii = 0; ii < nq; ++ii) {
    T* prow = P + ii * kBk;
    const T* dprow = S + ii * kBk;
    const T* trow = s.tt.data() + ii * kBk;
    const T di = s.di[ii];
    for (int jj = 0; jj < kBk; ++jj) {
      const T cap_grad = capped ? T(1) - trow[jj] * trow[jj] : T(1);
      prow[jj] = prow[jj] * (dprow[jj] - di) * cap_grad * a.scale;
    }
  }
  if (dq_acc)
    tile_gemm<T, true>(dq_acc, Dp, P, kBk, a.ks_at(b, g) + j * Dp, Dp, nq, static_cast<int>(Dp),
                       nk);
  if (dk_acc) {
    for (int jj = 0; jj < nk; ++jj)
      for (int ii = 0; ii < nq; ++ii) s.pt[jj * kBq + ii] = P[ii * kBk + jj];
    tile_gemm<T, true>(dk_acc, Dp, s.pt.data(), kBq, s.qs.data(), Dp, nk, static_cast<int>(Dp), nq);
  }
}

template <class T, class S>
void store_rows(const T* acc, int64_t Dp, int n, int D, S* dst, int64_t dst_row_stride) {
  for (int r = 0; r < n; ++r) std::copy(acc + r * Dp, acc + r * Dp + D, dst + r * dst_row_stride);
}

// dq rows of query tile ib of head h, summing over its live key tiles in order; with dk_all and
// dv_all ([ldt][Dp] of the kv head), also accumulates into those.
template <class T, class S>
LMT_INLINE void dq_for_query_tile(const Attn<T, S>& a, Scratch<T>& s, int64_t b, int h, int64_t ib,
                                  T* dk_all, T* dv_all) {
  const int64_t i0 = ib * kBq;
  const int nq = static_cast<int>(std::min<int64_t>(kBq, a.Tq - i0));
  pack_q(a, s, b, h, i0, nq, true);
  std::fill(s.acc.begin(), s.acc.end(), T(0));
  for (int64_t j = a.lo(b, i0) / kBk * kBk; j <= a.hi(i0 + nq - 1); j += kBk) {
    const int nk = static_cast<int>(std::min<int64_t>(kBk, a.Tk - j));
    if (!a.tile_live(b, i0, nq, j, nk)) continue;
    backward_tile(a, s, b, h / a.group, i0, nq, j, nk, s.acc.data(),
                  dk_all ? dk_all + j * a.Dp : nullptr, dv_all ? dv_all + j * a.Dp : nullptr);
  }
  store_rows(s.acc.data(), a.Dp, nq, a.D, a.dq + a.qoff(b, i0, h), a.qrs);
}

// Fused item: (sequence, kv head) -> dq of its query heads, dk and dv, in one sweep.
template <class T, class S>
LMT_INLINE void backward_fused_item(const Attn<T, S>& a, Scratch<T>& s, int64_t item) {
  const int64_t b = item / a.Hkv;
  const int g = static_cast<int>(item % a.Hkv);
  std::fill(s.dk.begin(), s.dk.end(), T(0));
  std::fill(s.dv.begin(), s.dv.end(), T(0));
  for (int h = g * a.group; h < (g + 1) * a.group; ++h)
    for (int64_t ib = 0; ib < a.nqb; ++ib)
      dq_for_query_tile(a, s, b, h, ib, s.dk.data(), s.dv.data());
  const int tk = static_cast<int>(a.Tk);
  store_rows(s.dk.data(), a.Dp, tk, a.D, a.dk + a.kvoff(b, 0, g), a.kvrs);
  store_rows(s.dv.data(), a.Dp, tk, a.D, a.dv + a.kvoff(b, 0, g), a.kvrs);
}

// Split pass 1 item: (sequence, kv head, key tile) -> dk, dv rows of that tile.
template <class T, class S>
LMT_INLINE void backward_kv_item(const Attn<T, S>& a, Scratch<T>& s, int64_t item) {
  const int64_t bg = item / a.nkb, j = (item % a.nkb) * kBk;
  const int64_t b = bg / a.Hkv;
  const int g = static_cast<int>(bg % a.Hkv);
  const int nk = static_cast<int>(std::min<int64_t>(kBk, a.Tk - j));
  std::fill(s.dk.begin(), s.dk.end(), T(0));
  std::fill(s.dv.begin(), s.dv.end(), T(0));
  for (int h = g * a.group; h < (g + 1) * a.group; ++h)
    for (int64_t ib = 0; ib < a.nqb; ++ib) {
      const int64_t i0 = ib * kBq;
      const int nq = static_cast<int>(std::min<int64_t>(kBq, a.Tq - i0));
      if (!a.tile_live(b, i0, nq, j, nk)) continue;
      pack_q(a, s, b, h, i0, nq, true);
      backward_tile(a, s, b, g, i0, nq, j, nk, static_cast<T*>(nullptr), s.dk.data(), s.dv.data());
    }
  store_rows(s.dk.data(), a.Dp, nk, a.D, a.dk + a.kvoff(b, j, g), a.kvrs);
  store_rows(s.dv.data(), a.Dp, nk, a.D, a.dv + a.kvoff(b, j, g), a.kvrs);
}

// Split pass 2 item: (sequence, query head, query tile) -> dq rows of that tile.
template <class T, class S>
LMT_INLINE void backward_q_item(const Attn<T, S>& a, Scratch<T>& s, int64_t item) {
  const int64_t bh = item / a.nqb, ib = a.nqb - 1 - item % a.nqb;
  dq_for_query_tile(a, s, bh / a.Hq, static_cast<int>(bh % a.Hq), ib, static_cast<T*>(nullptr),
                    static_cast<T*>(nullptr));
}

// pass: 0 fused, 1 split dk/dv, 2 split dq.
template <class T, class S>
LMT_INLINE void backward_item(const Attn<T, S>& a, Scratch<T>& s, int pass, int64_t item) {
  if (pass == 0)
    backward_fused_item(a, s, item);
  else if (pass == 1)
    backward_kv_item(a, s, item);
  else
    backward_q_item(a, s, item);
}
LMT_CLONES void backward_item_mv(const Attn<float>& a, Scratch<float>& s, int pass, int64_t item) {
  backward_item(a, s, pass, item);
}
LMT_CLONES void backward_item_mv(const Attn<double>& a, Scratch<double>& s, int pass,
                                 int64_t item) {
  backward_item(a, s, pass, item);
}
LMT_CLONES void backward_item_mv(const Attn<float, cpu::bf16>& a, Scratch<float>& s, int pass,
                                 int64_t item) {
  backward_item(a, s, pass, item);
}

template <class T, class S>
Attn<T, S> make_attn(const AttentionArgs& x, const char* kernel) {
  const std::string k = std::string("CpuBackend::") + kernel + ": ";
  LMT_CHECK(x.batch >= 0 && x.q_len >= 0 && x.kv_len >= 0, k + "negative size");
  LMT_CHECK(x.num_heads > 0 && x.num_kv_heads > 0 && x.num_heads % x.num_kv_heads == 0,
            k + "num_heads must be a positive multiple of num_kv_heads");
  LMT_CHECK(x.head_dim > 0, k + "head_dim must be positive");
  LMT_CHECK(x.window >= 0, k + "window must be >= 0");
  Attn<T, S> a{};
  a.B = x.batch, a.Tq = x.q_len, a.Tk = x.kv_len, a.off = x.q_offset, a.window = x.window;
  a.Hq = x.num_heads, a.Hkv = x.num_kv_heads, a.D = x.head_dim, a.group = a.Hq / a.Hkv;
  a.Dp = round_up(a.D, kGrain<T>);
  a.nqb = (a.Tq + kBq - 1) / kBq, a.nkb = (a.Tk + kBk - 1) / kBk;
  a.qrs = x.q_row_stride, a.qbs = x.q_batch_stride;
  a.kvrs = x.kv_row_stride, a.kvbs = x.kv_batch_stride;
  a.ors = x.out_row_stride, a.obs = x.out_batch_stride;
  a.scale = static_cast<T>(x.scale), a.softcap = static_cast<T>(x.softcap);
  a.doc_start = x.doc_start;
  if (x.doc_start)
    for (int64_t b = 0; b < a.B; ++b)
      for (int64_t i = 0; i < a.Tq; ++i) {
        const int32_t d = x.doc_start[b * a.Tq + i];
        LMT_CHECK(d >= 0 && d <= a.off + i && (i == 0 || d >= x.doc_start[b * a.Tq + i - 1]),
                  k + "doc_start must be non-decreasing and at most the query's own key");
      }
  return a;
}

// Tiny problems (decoding a few tokens, tests) run on the calling thread.
template <class T, class S>
bool worth_threads(const Attn<T, S>& a) {
  return a.B * a.Hq * a.Tq * a.Tk * a.D >= 64 * cpu::kParallelMin;
}

}  // namespace

// out[B,Tq,Hq,D] (out strides), lse[B,Hq,Tq]; q[B,Tq,Hq,D] (q strides), k, v[B,Tk,Hkv,D].
void CpuBackend::attention_forward(DType dt, const AttentionArgs& args, void* out, void* lse,
                                   const void* q, const void* k, const void* v) {
  cpu::dispatch_compute(dt, "attention_forward", [&](auto tag) {
    using S = decltype(tag);
    using T = cpu::compute_t<S>;
    Attn<T, S> a = make_attn<T, S>(args, "attention_forward");
    a.q = static_cast<const S*>(q), a.k = static_cast<const S*>(k), a.v = static_cast<const S*>(v);
    a.out = static_cast<S*>(out), a.lse = static_cast<T*>(lse);
    const int64_t items = a.B * a.Hq * a.nqb;
    if (items == 0) return;
    std::vector<T> kt, ks, vt, vs;
    pack_kv(a, false, kt, ks, vt, vs);
#pragma omp parallel if (worth_threads(a))
    {
      Scratch<T> s(a, 0, false);
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < items; ++it) forward_item_mv(a, s, it);
    }
  });
}

// dq (q strides), dk, dv (kv strides) overwritten; dout, out (out strides), lse[B,Hq,Tq].
void CpuBackend::attention_backward(DType dt, const AttentionArgs& args, void* dq, void* dk,
                                    void* dv, const void* dout, const void* q, const void* k,
                                    const void* v, const void* out, const void* lse) {
  cpu::dispatch_compute(dt, "attention_backward", [&](auto tag) {
    using S = decltype(tag);
    using T = cpu::compute_t<S>;
    Attn<T, S> a = make_attn<T, S>(args, "attention_backward");
    a.q = static_cast<const S*>(q), a.k = static_cast<const S*>(k), a.v = static_cast<const S*>(v);
    a.o = static_cast<const S*>(out), a.dout = static_cast<const S*>(dout);
    a.lse_in = static_cast<const T*>(lse);
    a.dq = static_cast<S*>(dq), a.dk = static_cast<S*>(dk), a.dv = static_cast<S*>(dv);
    const int64_t pairs = a.B * a.Hkv;
    auto mode = cpu::g_backward_mode.load();
    if (mode == cpu::AttentionBackwardMode::automatic)
      mode = pairs >= 2 * omp_get_max_threads() ? cpu::AttentionBackwardMode::fused
                                                : cpu::AttentionBackwardMode::split;
    const bool fused = mode == cpu::AttentionBackwardMode::fused;
    std::vector<T> kt, ks, vt, vs;
    pack_kv(a, true, kt, ks, vt, vs);
    for (int pass = fused ? 0 : 1; pass <= (fused ? 0 : 2); ++pass) {
      const int64_t items = pass == 0 ? pairs : pass == 1 ? pairs * a.nkb : a.B * a.Hq * a.nqb;
      if (items == 0) continue;
#pragma omp parallel if (worth_threads(a))
      {
        Scratch<T> s(a, pass == 0 ? a.ldt : kBk, true);
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; ++it) backward_item_mv(a, s, pass, it);
      }
    }
  });
}

}  // namespace lmt
