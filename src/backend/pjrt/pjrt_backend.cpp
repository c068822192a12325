// The PJRT backend (see pjrt_backend.h): allocations, the pending program, and each kernel as its
// lowering between reads and writes of byte ranges.
#include "backend/pjrt/pjrt_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include "backend/pjrt/lowering.h"
#include "backend/pjrt/pjrt_client.h"
#include "core/error.h"
#include "core/timer.h"

namespace lmt {
namespace {

using Value = HloValue;
using Dims = std::vector<int64_t>;

// Where allocations live: far above anything a 64-bit process maps, so a PJRT address is never
// mistaken for host memory. Allocations are 256-byte aligned with a gap between them, so a
// pointer one past an allocation's end is not the next one's start.
constexpr uintptr_t kAddressBase = uintptr_t{1} << 56;
constexpr uintptr_t kAlign = 256;

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

bool is_low_float(DType t) {
  return t == DType::bf16 || t == DType::f16;
}

}  // namespace

class PjrtBackend final : public Backend {
 public:
  explicit PjrtBackend(const std::string& plugin_path)
      : client_(resolve_pjrt_plugin_path(plugin_path)) {}
  ~PjrtBackend() override = default;

  std::string name() const override { return "pjrt"; }
  bool incremental_decoding() const override { return false; }
  PjrtBackendStats stats() const { return stats_; }

  // ---- memory ----
  void* alloc(size_t bytes) override {
    const uintptr_t at = next_;
    next_ += (bytes + 2 * kAlign - 1) / kAlign * kAlign;
    Alloc& a = allocs_[at];
    a.at = at;
    a.bytes = static_cast<int64_t>(bytes);
    return reinterpret_cast<void*>(at);
  }

  void free(void* p) override {
    auto it = allocs_.find(reinterpret_cast<uintptr_t>(p));
    LMT_CHECK(it != allocs_.end(), "PjrtBackend::free: not an allocation of this backend");
    Alloc& a = it->second;
    if (a.input >= 0) {  // the pending program still reads it
      keep_.push_back(std::move(a.dev));
      args_[static_cast<size_t>(a.input)].kept = static_cast<int>(keep_.size()) - 1;
    }
    allocs_.erase(it);
  }

  void to_host(void* host_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    int64_t off = 0;
    Alloc* a = &find(src, static_cast<int64_t>(bytes), &off);
    if (a->in_program) {
      flush();
      a = &find(src, static_cast<int64_t>(bytes), &off);
    }
    host_copy(*a);
    std::memcpy(host_dst, a->host.data() + off, bytes);
  }

  void from_host(void* dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return;
    int64_t off = 0;
    Alloc& a = find(dst, static_cast<int64_t>(bytes), &off);
    // Inside a program's span (a batch uploaded mid-step) the data is an argument of the
    // program; before any (weights at start-up) it patches a host copy uploaded on first use.
    if (builder_ || a.dev.valid()) {
      write_bytes(a, off, off + static_cast<int64_t>(bytes),
                  runtime(host_src, bytes, DType::u8, {static_cast<int64_t>(bytes)}));
      return;
    }
    host_copy(a);
    std::memcpy(a.host.data() + off, host_src, bytes);
    a.dev = PjrtBuffer();  // the host now holds the only up-to-date copy
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    int64_t so = 0, d_off = 0;
    Alloc& s = find(src, static_cast<int64_t>(bytes), &so);
    const Value v = read_bytes(s, so, so + static_cast<int64_t>(bytes),
                               natural_type(s, so, so + static_cast<int64_t>(bytes)));
    Alloc& d = find(dst, static_cast<int64_t>(bytes), &d_off);
    write_bytes(d, d_off, d_off + static_cast<int64_t>(bytes), v);
  }

  void zero(void* p, size_t bytes) override {
    if (bytes == 0) return;
    int64_t off = 0;
    Alloc& a = find(p, static_cast<int64_t>(bytes), &off);
    b();  // a program is pending from here on, though no op is in it yet
    put(a, Segment{off, off + static_cast<int64_t>(bytes), Value{}, true});
  }

  // Dead scratch is not an output of the program (an input it was stays one, unchanged).
  void discard(void* p) override {
    auto it = allocs_.find(reinterpret_cast<uintptr_t>(p));
    LMT_CHECK(it != allocs_.end(), "PjrtBackend::discard: not an allocation of this backend");
    Alloc& a = it->second;
    a.segments.clear();
    a.written = false;
    a.dead = true;
  }

  void synchronize() override { flush(); }

  // ---- dense algebra ----
  void gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
            const void* A, int64_t lda, const void* B, int64_t ldb, double beta, void* C,
            int64_t ldc) override {
    if (M == 0 || N == 0) return;
    Value r;
    if (K == 0) {
      r = b().constant(0.0, compute_type(dt), {M, N});
    } else {
      // bf16 and f16 operands stay narrow (the device's fast products), summed in f32.
      const Value a = view(A, dt, trans_a ? Dims{K, M} : Dims{M, K}, {lda, 1});
      const Value bb = view(B, dt, trans_b ? Dims{N, K} : Dims{K, N}, {ldb, 1});
      r = b().dot_general(a, bb, {}, {}, {trans_a ? 0 : 1}, {trans_b ? 1 : 0}, compute_type(dt));
    }
    if (alpha != 1.0) r = b().multiply(r, b().constant(alpha, r.dtype, r.dims));
    if (beta != 0.0) {
      Value c = up(view(C, dt, {M, N}, {ldc, 1}));
      if (beta != 1.0) c = b().multiply(c, b().constant(beta, c.dtype, c.dims));
      r = b().add(r, c);
    }
    set(C, down(r, dt), {ldc, 1});
  }

  void add_bias(DType dt, void* out, const void* bias, int64_t N, int64_t O) override {
    if (N == 0 || O == 0) return;
    const Value x = view(out, dt, {N, O});
    set(out, b().add(x, b().broadcast_in_dim(view(bias, dt, {O}), {N, O}, {1})));
  }

  void bias_backward(DType dt, void* dbias, const void* dout, int64_t N, int64_t O) override {
    if (N == 0 || O == 0) return;
    accumulate_into(dbias, dt, b().reduce_sum(view(dout, dt, {N, O}), {0}));
  }

  // ---- elementwise ----
  void add(DType dt, void* out, const void* a, const void* bb, int64_t n) override {
    if (n == 0) return;
    set(out, b().add(view(a, dt, {n}), view(bb, dt, {n})));
  }
  void accumulate(DType dt, void* y, const void* x, int64_t n) override {
    if (n == 0) return;
    accumulate_into(y, dt, view(x, dt, {n}));
  }
  void scale(DType dt, void* x, double s, int64_t n) override {
    if (n == 0) return;
    const Value v = view(x, dt, {n});
    set(x, b().multiply(v, b().constant(s, dt, {n})));
  }
  void sum(DType dt, double* acc, const void* x, int64_t n) override {
    if (n == 0) return;
    accumulate_into(acc, DType::f64,
                    b().reduce_sum(b().convert(view(x, dt, {n}), DType::f64), {0}));
  }
  void sum_squares(DType dt, double* acc, const void* x, int64_t n) override {
    if (n == 0) return;
    const Value v = b().convert(view(x, dt, {n}), DType::f64);
    accumulate_into(acc, DType::f64, b().reduce_sum(b().multiply(v, v), {0}));
  }
  // Seed and stream are runtime arguments: the stream names the micro-batch, new every step.
  void dropout(DType dt, void* out, const void* x, int64_t n, double p, uint64_t seed,
               uint64_t stream) override {
    if (n == 0) return;
    const uint32_t words[4] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                               static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
    const Value key = runtime(words, sizeof words, DType::i32, {4});
    set(out, hlo::dropout(b(), view(x, dt, {n}), p, key));
  }
  void convert(DType dst_dt, void* dst, DType src_dt, const void* src, int64_t n) override {
    if (n == 0) return;
    const Value v = view(src, src_dt, {n});
    set(dst, src_dt == dst_dt ? v : b().convert(v, dst_dt));
  }

  // ---- embedding ----
  // The table's row count is not an argument of the forward: the gather reads the rows up to
  // the largest id, so the view spans the whole allocation from `table` on, cut to whole rows.
  void embedding_forward(DType dt, void* out, const int32_t* ids, const void* table, int64_t N,
                         int64_t C) override {
    if (N == 0) return;
    const int64_t rows = rows_from(table, dt, C);
    set(out, hlo::embedding_forward(b(), view(ids, DType::i32, {N}), view(table, dt, {rows, C})));
  }
  void embedding_backward(DType dt, void* dtable, const void* dout, const int32_t* ids, int64_t N,
                          int64_t C, int64_t V) override {
    if (N == 0) return;
    accumulate_into(dtable, dt,
                    down(hlo::embedding_backward(b(), up(view(dout, dt, {N, C})),
                                                 view(ids, DType::i32, {N}), V),
                         dt));
  }

  // ---- normalisation ----
  void rmsnorm_forward(DType dt, void* out, void* rstd, const void* x, const void* w, int64_t N,
                       int64_t C, double eps, double w_offset) override {
    if (N == 0) return;
    const hlo::NormOut o =
        hlo::rmsnorm_forward(b(), up(view(x, dt, {N, C})), up(view(w, dt, {C})), eps, w_offset);
    set(out, down(o.out, dt));
    set(rstd, stat(o.rstd, dt));
  }
  void rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout, const void* x,
                        const void* w, const void* rstd, int64_t N, int64_t C,
                        double w_offset) override {
    if (N == 0) return;
    const hlo::NormGrads g =
        hlo::rmsnorm_backward(b(), up(view(dout, dt, {N, C})), up(view(x, dt, {N, C})),
                              up(view(w, dt, {C})), up(view(rstd, stat_type(dt), {N})), w_offset);
    accumulate_into(dx, dt, down(g.dx, dt));
    if (dw) accumulate_into(dw, dt, down(g.dw, dt));
  }
  void layernorm_forward(DType dt, void* out, void* mean, void* rstd, const void* x, const void* w,
                         const void* bias, int64_t N, int64_t C, double eps) override {
    if (N == 0) return;
    const hlo::LayerNormOut o = hlo::layernorm_forward(
        b(), up(view(x, dt, {N, C})), up(view(w, dt, {C})), up(view(bias, dt, {C})), eps);
    set(out, down(o.out, dt));
    set(mean, stat(o.mean, dt));
    set(rstd, stat(o.rstd, dt));
  }
  void layernorm_backward(DType dt, void* dx, void* dw, void* db, const void* dout, const void* x,
                          const void* w, const void* mean, const void* rstd, int64_t N,
                          int64_t C) override {
    if (N == 0) return;
    const hlo::LayerNormGrads g = hlo::layernorm_backward(
        b(), up(view(dout, dt, {N, C})), up(view(x, dt, {N, C})), up(view(w, dt, {C})),
        up(view(mean, stat_type(dt), {N})), up(view(rstd, stat_type(dt), {N})));
    accumulate_into(dx, dt, down(g.dx, dt));
    if (dw) accumulate_into(dw, dt, down(g.dw, dt));
    if (db) accumulate_into(db, dt, down(g.db, dt));
  }
  void head_rmsnorm_forward(DType dt, void* out, void* rstd, const void* x, const void* w,
                            int64_t N, int64_t row_stride, int heads, int head_dim, double eps,
                            double w_offset) override {
    if (N == 0) return;
    const hlo::NormOut o =
        hlo::head_rmsnorm_forward(b(), up(head_rows(x, dt, N, row_stride, heads, head_dim)),
                                  up(view(w, dt, {head_dim})), eps, w_offset);
    set_head_rows(out, down(o.out, dt), row_stride);
    set(rstd, stat(o.rstd, dt));
  }
  void head_rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout, const void* x,
                             const void* w, const void* rstd, int64_t N, int64_t row_stride,
                             int heads, int head_dim, double w_offset) override {
    if (N == 0) return;
    const hlo::NormGrads g = hlo::head_rmsnorm_backward(
        b(), up(head_rows(dout, dt, N, row_stride, heads, head_dim)),
        up(head_rows(x, dt, N, row_stride, heads, head_dim)), up(view(w, dt, {head_dim})),
        up(view(rstd, stat_type(dt), {N, heads})), w_offset);
    set_head_rows(dx, down(g.dx, dt), row_stride);
    if (dw) accumulate_into(dw, dt, down(g.dw, dt));
  }

  // ---- rotary position embedding ----
  void rope(DType dt, void* x, const int32_t* pos, const float* inv_freq, int64_t N,
            int64_t row_stride, int heads, int head_dim, int rotary_dim, double attn_factor,
            bool inverse) override {
    if (N == 0) return;
    const Value r = hlo::rope(
        b(), up(head_rows(x, dt, N, row_stride, heads, head_dim)), view(pos, DType::i32, {N}),
        view(inv_freq, DType::f32, {rotary_dim / 2}), rotary_dim, attn_factor, inverse);
    set_head_rows(x, down(r, dt), row_stride);
  }

  // ---- attention ----
  void attention_forward(DType dt, const AttentionArgs& a, void* out, void* lse, const void* q,
                         const void* k, const void* v) override {
    check_attention(a);
    const Value* doc = doc_start(a);
    const Value qv = up(qview(dt, a, q)), kv = up(kvview(dt, a, k)), vv = up(kvview(dt, a, v));
    const hlo::AttentionOut o =
        blocked(a) ? hlo::attention_forward_blocked(b(), hlo_args(a), qv, kv, vv, doc, kBlock)
                   : hlo::attention_forward(b(), hlo_args(a), qv, kv, vv, doc);
    set_rows(out, a, a.out_row_stride, a.out_batch_stride, down(o.out, dt));
    set(lse, stat(o.lse, dt));
  }
  void attention_backward(DType dt, const AttentionArgs& a, void* dq, void* dk, void* dv,
                          const void* dout, const void* q, const void* k, const void* v,
                          const void* out, const void* lse) override {
    check_attention(a);
    const Value* doc = doc_start(a);
    const Value d = outview(dt, a, dout);
    const Value qv = up(qview(dt, a, q)), kv = up(kvview(dt, a, k)), vv = up(kvview(dt, a, v));
    const hlo::AttentionGrads g =
        blocked(a) ? hlo::attention_backward_blocked(
                         b(), hlo_args(a), up(d), qv, kv, vv, up(outview(dt, a, out)),
                         view(lse, stat_type(dt), {a.batch, a.num_heads, a.q_len}), doc, kBlock)
                   : hlo::attention_backward(b(), hlo_args(a), up(d), qv, kv, vv, doc);
    // The model's fused layout (rows of q|k|v): one dense write, so the program never reads the
    // old contents between the three.
    const int64_t Q = int64_t{a.num_heads} * a.head_dim, KV = int64_t{a.num_kv_heads} * a.head_dim;
    const int64_t es = static_cast<int64_t>(dtype_size(dt));
    const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
    if (addr(dk) == addr(dq) + Q * es && addr(dv) == addr(dk) + KV * es &&
        a.q_row_stride == Q + 2 * KV && a.kv_row_stride == a.q_row_stride &&
        a.q_batch_stride == a.q_len * a.q_row_stride && a.kv_batch_stride == a.q_batch_stride) {
      auto flat = [&](const Value& v, int64_t w) {
        return b().reshape(down(v, dt), {a.batch, a.q_len, w});
      };
      set(dq, b().concatenate({flat(g.dq, Q), flat(g.dk, KV), flat(g.dv, KV)}, 2));
      return;
    }
    set_rows(dq, a, a.q_row_stride, a.q_batch_stride, down(g.dq, dt));
    set_rows(dk, a, a.kv_row_stride, a.kv_batch_stride, down(g.dk, dt));
    set_rows(dv, a, a.kv_row_stride, a.kv_batch_stride, down(g.dv, dt));
  }

  // ---- activations ----
  void glu_forward(DType dt, Activation act, void* out, const void* gate_up, int64_t N,
                   int64_t F) override {
    if (N == 0) return;
    set(out, down(hlo::glu_forward(b(), act, up(view(gate_up, dt, {N, 2 * F}))), dt));
  }
  void glu_backward(DType dt, Activation act, void* dgate_up, const void* dout, const void* gate_up,
                    int64_t N, int64_t F) override {
    if (N == 0) return;
    set(dgate_up, down(hlo::glu_backward(b(), act, up(view(dout, dt, {N, F})),
                                         up(view(gate_up, dt, {N, 2 * F}))),
                       dt));
  }
  void act_forward(DType dt, Activation act, void* out, const void* x, int64_t n) override {
    if (n == 0) return;
    set(out, down(hlo::act_forward(b(), act, up(view(x, dt, {n}))), dt));
  }
  void act_backward(DType dt, Activation act, void* dx, const void* dout, const void* x,
                    int64_t n) override {
    if (n == 0) return;
    set(dx, down(hlo::act_backward(b(), act, up(view(dout, dt, {n})), up(view(x, dt, {n}))), dt));
  }

  void relu_mask(DType dt, void* mask, const void* x, int64_t n) override {
    if (n == 0) return;
    set(mask, hlo::relu_mask(b(), up(view(x, dt, {n}))));
  }
  void relu_backward_masked(DType dt, void* dx, const void* dout, const void* mask,
                            int64_t n) override {
    if (n == 0) return;
    set(dx, down(hlo::relu_backward_masked(b(), up(view(dout, dt, {n})),
                                           view(mask, DType::i32, {(n + 31) / 32})),
                 dt));
  }
  void relu2_backward_from_output(DType dt, void* dx, const void* dout, const void* y,
                                  int64_t n) override {
    if (n == 0) return;
    set(dx, down(hlo::relu2_backward_from_output(b(), up(view(dout, dt, {n})), up(view(y, dt, {n})),
                                                 dt),
                 dt));
  }

  // ---- cross-entropy ----
  // The gradient scale changes every step (1 / labelled tokens): the lowering runs with 1 and
  // the runtime scale multiplies its gradient.
  void cross_entropy(DType dt, void* logits, void* losses, const int32_t* labels, int64_t N,
                     int64_t V, int32_t ignore_index, double grad_scale, double softcap) override {
    if (N == 0) return;
    const hlo::CrossEntropy ce =
        hlo::cross_entropy(b(), up(view(logits, dt, {N, V})), view(labels, DType::i32, {N}),
                           ignore_index, grad_scale != 0 ? 1.0 : 0.0, softcap);
    set(losses, stat(ce.losses, dt));
    if (grad_scale == 0) return;
    const Value s = runtime_scalar(grad_scale, ce.dlogits.dtype);
    set(logits, down(b().multiply(ce.dlogits, b().broadcast_in_dim(s, {N, V}, {})), dt));
  }

  // ---- optimizer ----
  void clip_scale(double* scale, const double* sum_squares, double max_norm) override {
    set(scale, hlo::clip_scale(b(), view(sum_squares, DType::f64, {}), max_norm));
  }
  // clip_scale's device scalar as the f32 the optimizer steps multiply by.
  Value scale_f32(const double* grad_scale) {
    return b().convert(view(grad_scale, DType::f64, {}), DType::f32);
  }
  // The per-step constants are runtime scalars, formed as the CPU kernel forms them.
  void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t step,
                  const double* grad_scale) override {
    if (n == 0) return;
    const double t = static_cast<double>(step);
    const Value decay = runtime_scalar(1.0 - lr * weight_decay, DType::f32);
    const Value step_size = runtime_scalar(lr / (1.0 - std::pow(beta1, t)), DType::f32);
    const Value bc2 = runtime_scalar(1.0 / std::sqrt(1.0 - std::pow(beta2, t)), DType::f32);
    const Value scale = scale_f32(grad_scale);
    const hlo::AdamWOut o = hlo::adamw_step(b(), view(p, DType::f32, {n}), view(g, DType::f32, {n}),
                                            view(m, DType::f32, {n}), view(v, DType::f32, {n}),
                                            beta1, beta2, eps, decay, step_size, bc2, scale);
    set(p, o.p);
    set(m, o.m);
    set(v, o.v);
  }
  void lion_step(float* p, const float* g, float* m, int64_t n, double lr, double beta1,
                 double beta2, double weight_decay, const double* grad_scale) override {
    if (n == 0) return;
    const hlo::LionOut o = hlo::lion_step(b(), view(p, DType::f32, {n}), view(g, DType::f32, {n}),
                                          view(m, DType::f32, {n}), beta1, beta2,
                                          runtime_scalar(1.0 - lr * weight_decay, DType::f32),
                                          runtime_scalar(lr, DType::f32), scale_f32(grad_scale));
    set(p, o.p);
    set(m, o.m);
  }
  void sgd_step(float* p, const float* g, float* buf, int64_t n, double lr, double momentum,
                bool nesterov, double weight_decay, const double* grad_scale) override {
    if (n == 0) return;
    const hlo::SgdOut o = hlo::sgd_step(
        b(), view(p, DType::f32, {n}), view(g, DType::f32, {n}), view(buf, DType::f32, {n}),
        momentum, nesterov, weight_decay, runtime_scalar(lr, DType::f32), scale_f32(grad_scale));
    set(p, o.p);
    set(buf, o.buf);
  }
  void muon_momentum(float* u, float* buf, const float* g, int64_t n, double beta, bool nesterov,
                     const double* grad_scale) override {
    if (n == 0) return;
    const hlo::MuonMomentumOut o =
        hlo::muon_momentum(b(), view(buf, DType::f32, {n}), view(g, DType::f32, {n}), beta,
                           nesterov, scale_f32(grad_scale));
    set(buf, o.buf);
    set(u, o.u);
  }
  void scale_by_rnorm(float* x, int64_t n, const double* sum_squares, double eps) override {
    if (n == 0) return;
    set(x,
        hlo::scale_by_rnorm(b(), view(x, DType::f32, {n}), view(sum_squares, DType::f64, {}), eps));
  }
  void muon_apply(float* p, int64_t ldp, const float* x, int64_t rows, int64_t cols, double lr,
                  double weight_decay, const double* grad_scale) override {
    if (rows == 0 || cols == 0) return;
    const Value pi = hlo::muon_apply(b(), view(p, DType::f32, {rows, cols}, {ldp, 1}),
                                     view(x, DType::f32, {rows, cols}),
                                     runtime_scalar(1.0 - lr * weight_decay, DType::f32),
                                     runtime_scalar(lr, DType::f32), scale_f32(grad_scale));
    set(p, pi, {ldp, 1});
  }
  void copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
               int64_t cols) override {
    if (rows == 0 || cols == 0) return;
    set(dst, view(src, DType::f32, {rows, cols}, {lds, 1}), {ldd, 1});
  }

 private:
  // One byte range of an allocation with the value last written there in the pending program:
  // a flat tensor of its own element type covering exactly [begin, end), or zeros (zero()),
  // which take the type of whatever reads them: a buffer zeroed before its first typed use (the
  // gradients of step 1) then gives the same program as on every later step.
  struct Segment {
    int64_t begin = 0, end = 0;
    Value v;
    bool zeros = false;
  };
  struct Alloc {
    uintptr_t at = 0;  // its address
    int64_t bytes = 0;
    PjrtBuffer dev;             // the contents on the device (a flat array), when valid
    std::vector<uint8_t> host;  // the contents on the host, when host_valid
    bool host_valid = false;
    // In the pending program:
    bool in_program = false, written = false;
    bool dead = false;  // discarded, not written since: its arrays are freed after the program
    int input = -1;     // the argument holding the contents at the program's start, once read
    Value input_value;
    std::map<int64_t, Segment> segments;  // by begin; disjoint
  };
  // An argument of the pending program: an allocation's device array, or host data uploaded
  // when the program runs.
  struct Arg {
    uintptr_t alloc = 0;
    int kept = -1;  // the allocation was freed: its array is keep_[kept]
    std::vector<uint8_t> host;
    DType dtype = DType::u8;
    Dims dims;
  };

  // ---- allocations ----
  // Whole rows of C elements from p to the end of p's allocation.
  int64_t rows_from(const void* p, DType dt, int64_t C) {
    int64_t off = 0;
    const Alloc& a = find(p, 0, &off);
    return (a.bytes - off) / (C * static_cast<int64_t>(dtype_size(dt)));
  }

  Alloc& find(const void* p, int64_t bytes, int64_t* offset) {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    auto it = allocs_.upper_bound(addr);
    LMT_CHECK(it != allocs_.begin(), "PjrtBackend: a pointer that is not this backend's");
    --it;
    Alloc& a = it->second;
    *offset = static_cast<int64_t>(addr - it->first);
    LMT_CHECK(*offset + bytes <= a.bytes, "PjrtBackend: an access past the end of an allocation");
    return a;
  }

  // Makes a.host hold the contents (a mirror of the device array, or zeros if never written).
  void host_copy(Alloc& a) {
    if (a.host_valid) return;
    a.host.assign(static_cast<size_t>(a.bytes), 0);
    if (a.dev.valid()) a.dev.to_host(a.host.data(), a.host.size());
    a.host_valid = true;
  }

  // ---- the pending program ----
  StablehloBuilder& b() {
    if (!builder_) builder_ = std::make_unique<StablehloBuilder>();
    return *builder_;
  }

  Value runtime(const void* data, size_t bytes, DType dt, Dims dims) {
    Arg arg;
    arg.host.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
    arg.dtype = dt;
    arg.dims = dims;
    args_.push_back(std::move(arg));
    return b().param(dt, std::move(dims));
  }
  Value runtime_scalar(double v, DType dt) {
    if (dt == DType::f64) return runtime(&v, sizeof v, dt, {});
    LMT_CHECK(dt == DType::f32, "PjrtBackend: runtime scalars are f32 or f64");
    const float f = static_cast<float>(v);
    return runtime(&f, sizeof f, dt, {});
  }

  void touch(Alloc& a) {
    if (a.in_program) return;
    a.in_program = true;
    touched_.push_back(a.at);
  }

  // The contents at the program's start, as an argument (uploaded to the device first if they
  // are only on the host, or zeros if never written; typed as `hint` where the size allows).
  const Value& input(Alloc& a, DType hint) {
    if (a.input >= 0) return a.input_value;
    touch(a);
    if (!a.dev.valid()) {
      host_copy(a);
      const DType t = a.bytes % static_cast<int64_t>(dtype_size(hint)) == 0 ? hint : DType::u8;
      a.dev = client_.to_device(a.host.data(), t, {a.bytes / static_cast<int64_t>(dtype_size(t))});
      a.host_valid = false;  // the device holds it now
      a.host = {};
    }
    Arg arg;
    arg.alloc = a.at;
    a.input = static_cast<int>(args_.size());
    args_.push_back(std::move(arg));
    a.input_value = b().param(a.dev.dtype(), a.dev.dims());
    return a.input_value;
  }

  // Bytes [b0, b1) of a value v covering bytes [vb, ...) of its allocation, as type t.
  Value bytes_of(const Value& v, int64_t vb, int64_t b0, int64_t b1, DType t) {
    const int64_t s = static_cast<int64_t>(dtype_size(v.dtype));
    Value x = v;
    int64_t lo = b0 - vb, hi = b1 - vb;
    if (lo % s != 0 || hi % s != 0) {  // not on v's element boundaries: go through bytes
      x = as_bytes(v);
      return retype(slice1(x, lo, hi), t);
    }
    return retype(slice1(x, lo / s, hi / s), t);
  }
  Value slice1(const Value& x, int64_t lo, int64_t hi) {
    if (lo == 0 && hi == x.dims[0]) return x;
    return b().slice(x, {lo}, {hi});
  }
  Value as_bytes(const Value& v) {
    if (v.dtype == DType::u8) return v;
    const int64_t n = v.dims[0] * static_cast<int64_t>(dtype_size(v.dtype));
    return b().reshape(b().bitcast_convert(v, DType::u8), {n});
  }
  // A flat value as another element type of the same total size.
  Value retype(const Value& v, DType t) {
    if (v.dtype == t) return v;
    const int64_t sv = static_cast<int64_t>(dtype_size(v.dtype)),
                  st = static_cast<int64_t>(dtype_size(t));
    const int64_t bytes = v.dims[0] * sv;
    LMT_CHECK(bytes % st == 0, "PjrtBackend: a byte range read as " + std::string(dtype_name(t)) +
                                   " is not a whole number of elements");
    if (sv == st) return b().bitcast_convert(v, t);
    const Value u = as_bytes(v);
    if (t == DType::u8) return u;
    return b().bitcast_convert(b().reshape(u, {bytes / st, st}), t);
  }

  // The element type a byte range holds now: that of the one segment or array covering it, or
  // bytes.
  DType natural_type(Alloc& a, int64_t lo, int64_t hi) {
    DType t = a.dev.valid() ? a.dev.dtype() : DType::u8;
    bool any = false;
    for (auto it = first_overlap(a, lo); it != a.segments.end() && it->second.begin < hi; ++it) {
      const Segment& s = it->second;
      if (s.zeros) continue;
      if (any && s.v.dtype != t) return DType::u8;
      t = s.v.dtype;
      any = true;
    }
    const int64_t sz = static_cast<int64_t>(dtype_size(t));
    return lo % sz == 0 && hi % sz == 0 ? t : DType::u8;
  }

  std::map<int64_t, Segment>::iterator first_overlap(Alloc& a, int64_t lo) {
    auto it = a.segments.upper_bound(lo);
    if (it != a.segments.begin()) {
      auto prev = std::prev(it);
      if (prev->second.end > lo) return prev;
    }
    return it;
  }

  // Bytes [lo, hi) of an allocation as they are at this point of the program, as a flat tensor
  // of type t: pieces of the segments written so far, the rest from the program's input.
  Value read_bytes(Alloc& a, int64_t lo, int64_t hi, DType t) {
    touch(a);
    std::vector<Value> pieces;
    int64_t at = lo;
    auto from_input = [&](int64_t p0, int64_t p1) {
      pieces.push_back(bytes_of(input(a, t), 0, p0, p1, t));
    };
    for (auto it = first_overlap(a, lo); it != a.segments.end() && it->second.begin < hi; ++it) {
      const Segment& s = it->second;
      if (s.begin > at) from_input(at, s.begin);
      const int64_t p0 = std::max(at, s.begin), p1 = std::min(hi, s.end);
      pieces.push_back(s.zeros ? retype(zeros(p1 - p0, t), t) : bytes_of(s.v, s.begin, p0, p1, t));
      at = p1;
    }
    if (at < hi) from_input(at, hi);
    return pieces.size() == 1 ? pieces[0] : b().concatenate(pieces, 0);
  }

  // The program writes v (flat) to bytes [lo, hi) of an allocation.
  void write_bytes(Alloc& a, int64_t lo, int64_t hi, const Value& v) {
    LMT_CHECK(v.rank() == 1 && v.dims[0] * static_cast<int64_t>(dtype_size(v.dtype)) == hi - lo,
              "PjrtBackend: a write of the wrong size");
    put(a, Segment{lo, hi, v});
  }
  void put(Alloc& a, Segment seg) {
    touch(a);
    a.written = true;
    a.dead = false;
    std::vector<Segment> keep;
    for (auto it = first_overlap(a, seg.begin);
         it != a.segments.end() && it->second.begin < seg.end;) {
      const Segment s = it->second;
      it = a.segments.erase(it);
      if (s.begin < seg.begin) keep.push_back(part(s, s.begin, seg.begin));
      if (s.end > seg.end) keep.push_back(part(s, seg.end, s.end));
    }
    for (Segment& s : keep) a.segments[s.begin] = std::move(s);
    a.segments[seg.begin] = std::move(seg);
  }
  // Bytes [p0, p1) of a segment, in its own type where they are whole elements of it.
  Segment part(const Segment& s, int64_t p0, int64_t p1) {
    if (s.zeros) return Segment{p0, p1, Value{}, true};
    const int64_t sz = static_cast<int64_t>(dtype_size(s.v.dtype));
    const DType t = (p0 - s.begin) % sz == 0 && (p1 - s.begin) % sz == 0 ? s.v.dtype : DType::u8;
    return Segment{p0, p1, bytes_of(s.v, s.begin, p0, p1, t)};
  }
  // `bytes` zero bytes as type t (bytes where they are not whole elements of t).
  Value zeros(int64_t bytes, DType t) {
    const int64_t sz = static_cast<int64_t>(dtype_size(t));
    if (bytes % sz != 0) return b().constant(0.0, DType::u8, {bytes});
    return b().constant(0.0, t, {bytes / sz});
  }

  // The whole allocation as the program leaves it, in one element type where every piece has
  // it (else bytes).
  Value contents(Alloc& a) {
    bool any = false;
    DType t = a.dev.valid() ? a.dev.dtype() : DType::f32;
    for (const auto& [at, s] : a.segments) {
      if (s.zeros) continue;
      if (any && s.v.dtype != t) t = DType::u8;
      if (!any) t = s.v.dtype;
      any = true;
    }
    if (a.input >= 0 && a.input_value.dtype != t) t = DType::u8;
    if (a.bytes % static_cast<int64_t>(dtype_size(t)) != 0) t = DType::u8;
    return read_bytes(a, 0, a.bytes, t);
  }

  // ---- typed views ----
  // The tensor of shape dims at p, element (i, j, ...) at sum index * stride elements from p
  // (strides: row-major dense when empty; the last stride must be 1).
  Value view(const void* p, DType t, Dims dims, Dims strides = {}) {
    if (strides.empty()) strides = dense_strides(dims);
    const int64_t es = static_cast<int64_t>(dtype_size(t));
    int64_t off = 0;
    const int64_t span = extent(dims, strides, 0);
    Alloc& a = find(p, span * es, &off);
    const Value flat = read_bytes(a, off, off + span * es, t);
    if (is_dense(dims, strides)) return b().reshape(flat, dims);
    Value r = b().reshape(flat, {1, span});
    int64_t P = 1;
    for (size_t i = 0; i + 1 < dims.size(); ++i) {
      r = fit_last(r, dims[i] * strides[i]);
      P *= dims[i];
      r = b().reshape(r, {P, strides[i]});
      r = fit_last(r, extent(dims, strides, i + 1));
    }
    return b().reshape(r, dims);
  }

  // Writes v (its dims) at p with the given strides (dense when empty).
  void set(void* p, const Value& v, Dims strides = {}) {
    const Dims& dims = v.dims;
    if (strides.empty()) strides = dense_strides(dims);
    const int64_t es = static_cast<int64_t>(dtype_size(v.dtype));
    const int64_t span = extent(dims, strides, 0);
    int64_t off = 0;
    Alloc& a = find(p, span * es, &off);
    if (is_dense(dims, strides)) {
      write_bytes(a, off, off + span * es, b().reshape(v, {numel(dims)}));
      return;
    }
    const Value old = b().reshape(read_bytes(a, off, off + span * es, v.dtype), {1, span});
    const Value r = write_rows(old, dims, strides, 0, b().reshape(v, prepend(1, dims)));
    write_bytes(a, off, off + span * es, b().reshape(r, {span}));
  }

  // r [P, L] holds P rows of the strided region from dimension i on; x [P, dims[i:]] the values.
  // Returns r with x written in.
  Value write_rows(const Value& r, const Dims& dims, const Dims& strides, size_t i,
                   const Value& x) {
    const int64_t P = r.dims[0], L = r.dims[1];
    if (i + 1 == dims.size()) {
      const Value x2 = b().reshape(x, {P, dims[i]});
      if (L == dims[i]) return x2;
      return b().concatenate({x2, b().slice(r, {0, dims[i]}, {P, L})}, 1);
    }
    const Value padded = fit_last(r, dims[i] * strides[i]);
    const Value rows = b().reshape(padded, {P * dims[i], strides[i]});
    Dims inner(dims.begin() + static_cast<int64_t>(i) + 1, dims.end());
    const Value xi = b().reshape(x, prepend(P * dims[i], inner));
    const Value w = write_rows(rows, dims, strides, i + 1, xi);
    return fit_last(b().reshape(w, {P, dims[i] * strides[i]}), L);
  }

  // r [P, L] cut or padded with zeros to [P, n].
  Value fit_last(const Value& r, int64_t n) {
    const int64_t P = r.dims[0], L = r.dims[1];
    if (L == n) return r;
    if (L > n) return b().slice(r, {0, 0}, {P, n});
    return b().concatenate({r, b().constant(0.0, r.dtype, {P, n - L})}, 1);
  }

  static Dims prepend(int64_t d, const Dims& dims) {
    Dims r{d};
    r.insert(r.end(), dims.begin(), dims.end());
    return r;
  }
  static Dims dense_strides(const Dims& dims) {
    Dims s(dims.size(), 1);
    for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
    return s;
  }
  static bool is_dense(const Dims& dims, const Dims& strides) {
    return strides == dense_strides(dims);
  }
  // Elements from the first to one past the last element of the view from dimension i on.
  static int64_t extent(const Dims& dims, const Dims& strides, size_t i) {
    int64_t e = 1;
    for (size_t j = i; j < dims.size(); ++j) e += (dims[j] - 1) * strides[j];
    return e;
  }

  void accumulate_into(void* y, DType dt, const Value& x) {
    set(y, b().add(view(y, dt, x.dims), x));
  }

  // ---- precision ----
  // bf16 and f16 compute in f32 (as the CPU kernels accumulate); f32 and f64 as they are.
  static DType compute_type(DType dt) { return is_low_float(dt) ? DType::f32 : dt; }
  Value up(const Value& v) { return is_low_float(v.dtype) ? b().convert(v, DType::f32) : v; }
  Value down(const Value& v, DType dt) { return v.dtype == dt ? v : b().convert(v, dt); }
  // Saved statistics (rstd, mean, lse, losses): f64 when dt is f64, else f32.
  static DType stat_type(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }
  Value stat(const Value& v, DType dt) { return down(v, stat_type(dt)); }

  // ---- attention pieces ----
  // Sequences longer than kDenseUpTo go through the blocked form (memory as T, not T^2), in
  // blocks of kBlock positions (the fastest of 256, 512 and 1024 at T = 32768 on the CPU plugin).
  static constexpr int64_t kDenseUpTo = 1024, kBlock = 512;
  static bool blocked(const AttentionArgs& a) { return a.q_len > kDenseUpTo; }
  void check_attention(const AttentionArgs& a) {
    LMT_CHECK(a.q_offset == 0 && a.q_len == a.kv_len,
              "PJRT backend: attention with a query offset (incremental decoding) is not "
              "supported yet");
  }
  static hlo::AttentionArgsHlo hlo_args(const AttentionArgs& a) {
    hlo::AttentionArgsHlo h;
    h.scale = a.scale;
    h.softcap = a.softcap;
    h.window = a.window;
    return h;
  }
  const Value* doc_start(const AttentionArgs& a) {
    if (!a.doc_start) return nullptr;
    doc_ = runtime(a.doc_start, static_cast<size_t>(a.batch * a.q_len) * sizeof(int32_t),
                   DType::i32, {a.batch, a.q_len});
    return &doc_;
  }
  // [B, T, H, D] from rows `row` elements apart, sequences `batch` apart.
  Value rows(const void* p, DType dt, const AttentionArgs& a, int64_t row, int64_t batch, int H) {
    const int64_t HD = int64_t{H} * a.head_dim;
    const Value v = view(p, dt, {a.batch, a.q_len, HD}, {batch, row, 1});
    return b().reshape(v, {a.batch, a.q_len, H, a.head_dim});
  }
  Value qview(DType dt, const AttentionArgs& a, const void* q) {
    return rows(q, dt, a, a.q_row_stride, a.q_batch_stride, a.num_heads);
  }
  Value kvview(DType dt, const AttentionArgs& a, const void* k) {
    return rows(k, dt, a, a.kv_row_stride, a.kv_batch_stride, a.num_kv_heads);
  }
  Value outview(DType dt, const AttentionArgs& a, const void* out) {
    return rows(out, dt, a, a.out_row_stride, a.out_batch_stride, a.num_heads);
  }
  // v [B, T, H, D] written as rows / sequences `row` / `batch` elements apart.
  void set_rows(void* p, const AttentionArgs& a, int64_t row, int64_t batch, const Value& v) {
    set(p, b().reshape(v, {a.batch, a.q_len, v.dims[2] * v.dims[3]}), {batch, row, 1});
  }

  // x [N, H, D] from N token rows `row_stride` elements apart (RoPE, the q/k norm), and back.
  Value head_rows(const void* p, DType dt, int64_t N, int64_t row_stride, int64_t H, int64_t D) {
    return b().reshape(view(p, dt, {N, H * D}, {row_stride, 1}), {N, H, D});
  }
  void set_head_rows(void* p, const Value& v, int64_t row_stride) {
    set(p, b().reshape(v, {v.dims[0], v.dims[1] * v.dims[2]}), {row_stride, 1});
  }

 public:
  // Compiles (or finds) and runs the pending program; every allocation it wrote then holds its
  // output on the device.
  void flush() {
    if (!builder_) return;
    std::vector<uintptr_t> outs;
    std::vector<Value> values;
    for (uintptr_t at : touched_) {
      auto it = allocs_.find(at);
      if (it == allocs_.end() || !it->second.written) continue;
      values.push_back(contents(it->second));
      outs.push_back(at);
    }
    std::vector<int> donate;
    for (size_t i = 0; i < outs.size(); ++i) {
      Alloc& a = allocs_.at(outs[i]);
      if (a.input >= 0 && mlir_tensor_type(a.input_value) == mlir_tensor_type(values[i])) {
        b().donate(a.input_value, static_cast<int>(i));
        donate.push_back(a.input);
      }
    }
    if (values.empty()) {  // nothing written: nothing to run
      reset_program();
      return;
    }
    b().ret(values);
    const std::string text = b().text();
    auto found = programs_.find(text);
    if (found == programs_.end()) {
      dump(text);
      Timer t;
      found = programs_.emplace(text, client_.compile(text)).first;
      stats_.compile_seconds += t.seconds();
      ++stats_.programs_compiled;
    }
    std::vector<PjrtBuffer> uploads;
    uploads.reserve(args_.size());
    std::vector<PjrtBuffer*> args;
    for (Arg& arg : args_) {
      if (arg.kept >= 0) {
        args.push_back(&keep_[static_cast<size_t>(arg.kept)]);
      } else if (arg.alloc) {
        args.push_back(&allocs_.at(arg.alloc).dev);
      } else {
        uploads.push_back(client_.to_device(arg.host.data(), arg.dtype, arg.dims));
        args.push_back(&uploads.back());
      }
    }
    std::vector<PjrtBuffer> results = found->second.execute(args, donate);
    ++stats_.programs_run;
    stats_.last_program_chars = text.size();
    for (size_t i = 0; i < outs.size(); ++i) {
      Alloc& a = allocs_.at(outs[i]);
      a.dev = std::move(results[i]);
      a.host_valid = false;
      a.host.clear();
      a.host.shrink_to_fit();
    }
    reset_program();
  }

 private:
  // LMTRAIN_PJRT_DUMP=DIR writes each program compiled to DIR/program_N.mlir (for reading, or
  // for compiling elsewhere).
  void dump(const std::string& text) const {
    const char* dir = std::getenv("LMTRAIN_PJRT_DUMP");
    if (!dir || !*dir) return;
    static int count = 0;  // per process: several backends may dump to one directory
    const std::string path = std::string(dir) + "/program_" + std::to_string(count++) + ".mlir";
    std::FILE* f = std::fopen(path.c_str(), "w");
    LMT_CHECK(f, "LMTRAIN_PJRT_DUMP: cannot write " + path);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }

  void reset_program() {
    for (uintptr_t at : touched_) {
      auto it = allocs_.find(at);
      if (it == allocs_.end()) continue;
      Alloc& a = it->second;
      if (a.dead) {
        a.dev = PjrtBuffer();
        a.host = {};
        a.host_valid = a.dead = false;
      }
      a.in_program = a.written = false;
      a.input = -1;
      a.segments.clear();
    }
    touched_.clear();
    args_.clear();
    keep_.clear();
    builder_.reset();
  }

  PjrtClient client_;
  std::map<uintptr_t, Alloc> allocs_;
  uintptr_t next_ = kAddressBase;
  std::unique_ptr<StablehloBuilder> builder_;
  std::vector<uintptr_t> touched_;  // allocations the pending program uses, first use first
  std::vector<Arg> args_;
  std::vector<PjrtBuffer> keep_;
  Value doc_;
  std::unordered_map<std::string, PjrtExecutable> programs_;
  PjrtBackendStats stats_;
};

std::unique_ptr<Backend> make_pjrt_backend(const std::string& plugin_path) {
  return std::make_unique<PjrtBackend>(plugin_path);
}

PjrtBackendStats pjrt_backend_stats(const Backend& backend) {
  const auto* p = dynamic_cast<const PjrtBackend*>(&backend);
  return p ? p->stats() : PjrtBackendStats{};
}

}  // namespace lmt
