// The PJRT backend's attention, MLP activations and cross-entropy (see backend_impl.h).
#include <algorithm>

#include "backend/attention_forms.h"
#include "backend/pjrt/backend_impl.h"
#include "core/error.h"

namespace lmt {
namespace {

bool blocked(const AttentionArgs& a) {
  return a.q_len > kDenseAttentionUpTo;
}

void check_attention(const AttentionArgs& a) {
  LMT_CHECK(a.q_offset == 0 && a.q_len == a.kv_len,
            "PJRT backend: attention with a query offset (incremental decoding) is not "
            "supported yet");
}

hlo::AttentionArgsHlo hlo_args(const AttentionArgs& a) {
  hlo::AttentionArgsHlo h;
  h.scale = a.scale;
  h.softcap = a.softcap;
  h.window = a.window;
  return h;
}

}  // namespace

// ---- attention ----

const HloValue* PjrtBackend::doc_start(const AttentionArgs& a) {
  if (!a.doc_start) return nullptr;
  doc_ = view(a.doc_start, DType::i32, {a.batch, a.q_len});
  return &doc_;
}

// [B, T, H, D] from rows `row` elements apart, sequences `batch` apart.
HloValue PjrtBackend::rows(const void* p, DType dt, const AttentionArgs& a, int64_t row,
                           int64_t batch, int H) {
  const int64_t HD = int64_t{H} * a.head_dim;
  const Value v = view(p, dt, {a.batch, a.q_len, HD}, {batch, row, 1});
  return b().reshape(v, {a.batch, a.q_len, H, a.head_dim});
}

// v [B, T, H, D] written as rows / sequences `row` / `batch` elements apart.
void PjrtBackend::set_rows(void* p, const AttentionArgs& a, int64_t row, int64_t batch,
                           const Value& v) {
  set(p, b().reshape(v, {a.batch, a.q_len, v.dims[2] * v.dims[3]}), {batch, row, 1});
}

bool PjrtBackend::cudnn_attention(DType dt, const AttentionArgs& a) {
  const char* fallback = hlo::cudnn_attention_fallback(client_.platform_name(), dt, a,
                                                       deterministic_, client_.mesh().size());
  attention_ = fallback ? std::string("xla: ") + fallback : "cudnn";
  return fallback == nullptr;
}

void PjrtBackend::attention_forward(DType dt, const AttentionArgs& a, void* out, void* lse,
                                    const void* q, const void* k, const void* v) {
  check_attention(a);
  const bool cudnn = cudnn_attention(dt, a);
  const Value* doc = cudnn ? nullptr : doc_start(a);
  // bf16 inputs stay bf16: the lowering's products run in it with f32 accumulation, its softmax
  // statistics in f32.
  const Value qv = rows(q, dt, a, a.q_row_stride, a.q_batch_stride, a.num_heads);
  const Value kv = rows(k, dt, a, a.kv_row_stride, a.kv_batch_stride, a.num_kv_heads);
  const Value vv = rows(v, dt, a, a.kv_row_stride, a.kv_batch_stride, a.num_kv_heads);
  hlo::AttentionOut o;
  if (cudnn)
    o = hlo::cudnn_attention_forward(b(), hlo_args(a), qv, kv, vv);
  else if (blocked(a))
    o = hlo::attention_forward_blocked(b(), hlo_args(a), qv, kv, vv, doc, kAttentionBlock);
  else
    o = hlo::attention_forward(b(), hlo_args(a), qv, kv, vv, doc);
  set_rows(out, a, a.out_row_stride, a.out_batch_stride, down(o.out, dt));
  set(lse, stat(o.lse, dt));
}

void PjrtBackend::attention_backward(DType dt, const AttentionArgs& a, void* dq, void* dk, void* dv,
                                     const void* dout, const void* q, const void* k, const void* v,
                                     const void* out, const void* lse) {
  check_attention(a);
  const bool cudnn = cudnn_attention(dt, a);
  const Value* doc = cudnn ? nullptr : doc_start(a);
  const Value dout_rows = rows(dout, dt, a, a.out_row_stride, a.out_batch_stride, a.num_heads);
  const Value d = cudnn ? dout_rows : up(dout_rows);  // cuDNN takes it in the inputs' dtype
  // bf16 inputs stay bf16: the lowering's products run in it with f32 accumulation, its softmax
  // statistics in f32.
  const Value qv = rows(q, dt, a, a.q_row_stride, a.q_batch_stride, a.num_heads);
  const Value kv = rows(k, dt, a, a.kv_row_stride, a.kv_batch_stride, a.num_kv_heads);
  const Value vv = rows(v, dt, a, a.kv_row_stride, a.kv_batch_stride, a.num_kv_heads);
  // The forward's out and lse (the dense lowering recomputes both instead).
  auto saved_out = [&] {
    return rows(out, dt, a, a.out_row_stride, a.out_batch_stride, a.num_heads);
  };
  auto saved_lse = [&] { return view(lse, stat_type(dt), {a.batch, a.num_heads, a.q_len}); };
  hlo::AttentionGrads g;
  if (cudnn)
    g = hlo::cudnn_attention_backward(b(), hlo_args(a), d, qv, kv, vv, saved_out(), saved_lse());
  else if (blocked(a))
    g = hlo::attention_backward_blocked(b(), hlo_args(a), d, qv, kv, vv, saved_out(), saved_lse(),
                                        doc, kAttentionBlock);
  else
    g = hlo::attention_backward(b(), hlo_args(a), d, qv, kv, vv, doc);
  set_attention_grads(dt, a, dq, dk, dv, g);
}

// dq, dk, dv [B,T,H,D] written where the model keeps them.
void PjrtBackend::set_attention_grads(DType dt, const AttentionArgs& a, void* dq, void* dk,
                                      void* dv, const hlo::AttentionGrads& g) {
  // The model's fused layout (rows of q|k|v): one dense write, so the program never reads the old
  // contents between the three.
  const int64_t Q = int64_t{a.num_heads} * a.head_dim, KV = int64_t{a.num_kv_heads} * a.head_dim;
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
  const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  if (addr(dk) == addr(dq) + Q * es && addr(dv) == addr(dk) + KV * es &&
      a.q_row_stride == Q + 2 * KV && a.kv_row_stride == a.q_row_stride &&
      a.q_batch_stride == a.q_len * a.q_row_stride && a.kv_batch_stride == a.q_batch_stride) {
    auto flat = [&](const Value& x, int64_t w) {
      return b().reshape(down(x, dt), {a.batch, a.q_len, w});
    };
    // XLA's GPU compiler fuses a sum of the pieces, each padded to its place, with the reduction
    // that reads the rows next (the q|k|v bias gradient) as one kernel; a concatenation is a
    // kernel of its own there (one a layer on GPT-2). XLA:CPU copies a concatenation fastest.
    if (client_.platform_name() != "cpu" && fused_groups_whole()) {
      const int64_t W = Q + 2 * KV;
      auto placed = [&](const Value& x, int64_t w, int64_t at) {
        return b().pad_zeros(flat(x, w), {0, 0, at}, {0, 0, W - at - w});
      };
      set(dq, b().add(b().add(placed(g.dq, Q, 0), placed(g.dk, KV, Q)), placed(g.dv, KV, Q + KV)));
    } else {
      set(dq, b().concatenate({flat(g.dq, Q), flat(g.dk, KV), flat(g.dv, KV)}, 2));
    }
    return;
  }
  set_rows(dq, a, a.q_row_stride, a.q_batch_stride, down(g.dq, dt));
  set_rows(dk, a, a.kv_row_stride, a.kv_batch_stride, down(g.dk, dt));
  set_rows(dv, a, a.kv_row_stride, a.kv_batch_stride, down(g.dv, dt));
}

// ---- activations ----

void PjrtBackend::glu_forward(DType dt, Activation act, void* out, const void* gate_up, int64_t N,
                              int64_t F) {
  if (N == 0) return;
  set(out, down(hlo::glu_forward(b(), act, up(view(gate_up, dt, {N, 2 * F}))), dt));
}

void PjrtBackend::glu_backward(DType dt, Activation act, void* dgate_up, const void* dout,
                               const void* gate_up, int64_t N, int64_t F) {
  if (N == 0) return;
  set(dgate_up, down(hlo::glu_backward(b(), act, up(view(dout, dt, {N, F})),
                                       up(view(gate_up, dt, {N, 2 * F}))),
                     dt));
}

void PjrtBackend::act_forward(DType dt, Activation act, void* out, const void* x, int64_t n) {
  if (n == 0) return;
  set(out, down(hlo::act_forward(b(), act, up(view(x, dt, {n}))), dt));
}

void PjrtBackend::act_backward(DType dt, Activation act, void* dx, const void* dout, const void* x,
                               int64_t n) {
  if (n == 0) return;
  set(dx, down(hlo::act_backward(b(), act, up(view(dout, dt, {n})), up(view(x, dt, {n}))), dt));
}

void PjrtBackend::relu_mask(DType dt, void* mask, const void* x, int64_t n) {
  if (n == 0) return;
  set(mask, hlo::relu_mask(b(), up(view(x, dt, {n}))));
}

void PjrtBackend::relu_backward_masked(DType dt, void* dx, const void* dout, const void* mask,
                                       int64_t n) {
  if (n == 0) return;
  set(dx, down(hlo::relu_backward_masked(b(), up(view(dout, dt, {n})),
                                         view(mask, DType::i32, {(n + 31) / 32})),
               dt));
}

void PjrtBackend::relu2_backward_from_output(DType dt, void* dx, const void* dout, const void* y,
                                             int64_t n) {
  if (n == 0) return;
  set(dx,
      down(hlo::relu2_backward_from_output(b(), up(view(dout, dt, {n})), up(view(y, dt, {n})), dt),
           dt));
}

// ---- cross-entropy ----

// The gradient scale changes every step (1 / labelled tokens): the lowering runs with 1 and the
// runtime scale multiplies its gradient.
void PjrtBackend::cross_entropy(DType dt, void* logits, void* losses, const int32_t* labels,
                                int64_t N, int64_t V, int32_t ignore_index, double grad_scale,
                                double softcap, const LossSpec& loss, void* ce_losses) {
  if (N == 0) return;
  const hlo::CrossEntropy ce =
      hlo::cross_entropy(b(), up(view(logits, dt, {N, V})), view(labels, DType::i32, {N}),
                         ignore_index, grad_scale != 0 ? 1.0 : 0.0, softcap, loss);
  set(losses, stat(ce.losses, dt));
  if (ce_losses) set(ce_losses, stat(ce.ce, dt));
  if (grad_scale == 0) return;
  const Value s = runtime_scalar(grad_scale, ce.dlogits.dtype, "loss.grad_scale");
  set(logits, down(b().multiply(ce.dlogits, b().broadcast_in_dim(s, {N, V}, {})), dt));
}

// One lowering for every chunk (a loop when there are several): logits, losses and gradients of
// a chunk (of a tile, for the cut loss) exist inside it only; the scratch buffers are not needed.
void PjrtBackend::head_loss(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                            const int32_t* labels, double* loss_sum, void* dh, void* dw,
                            void* logits, void* losses, double* ce_sum) {
  if (a.N == 0) return;
  const bool grads = a.grad_scale != 0;
  Value scale;
  if (grads && a.grad_scale_at)  // the step's scale as the caller wrote it: a replay's too
    scale = down(wide_value_at(a.grad_scale_at), compute_type(dt));
  else if (grads)
    scale = runtime_scalar(a.grad_scale, compute_type(dt), "loss.grad_scale");
  // On a mesh: the rows split as the residual stream. The head either split by vocabulary over
  // the rows' axes after its own (vocabulary-parallel), or gathered over the rows' axes (its
  // vocabulary staying split over tensor, as the plan holds it).
  const TensorSharding rows = trace_.residual_sharding(a.N, a.C);
  TensorSharding head, vocab;
  if (!rows.empty() && !rows[0].empty()) {
    head = trace_.head_sharding(a.V, a.C);
    head.resize(2);
    auto in_rows = [&](const std::string& x) {
      return std::find(rows[0].begin(), rows[0].end(), x) != rows[0].end();
    };
    for (std::vector<std::string>& axes : head) std::erase_if(axes, in_rows);
    vocab = {head[0], {}};
    for (const std::string& x : rows[0])
      if (std::find(head[1].begin(), head[1].end(), x) == head[1].end()) vocab[0].push_back(x);
    for (const std::string& x : head[1]) vocab[0].push_back(x);  // C's own split moves to V
  }
  const hlo::HeadLossOut o =
      hlo::head_loss(b(), view(h, dt, {a.N, a.C}), view(w, dt, {a.V, a.C}),
                     view(labels, DType::i32, {a.N}), a, grads ? &scale : nullptr, dw != nullptr,
                     wide_, rows, head, vocab);
  add_wide(loss_sum, o.loss_sum);
  if (ce_sum) add_wide(ce_sum, o.ce_sum);
  if (!grads) return;
  set(dh, o.dh);
  if (!dw) return;
  // Back to the plan's split in the gradient's dtype, once: left to XLA, a vocabulary-parallel
  // gradient carried its split into the optimizer and both f32 moments moved instead.
  const Value g = down(o.dw, dt);
  accumulate_into(dw, dt, vocab.empty() ? g : b().sharding_constraint(g, trace_.head_sharding(a.V, a.C)));
}

// ---- per-token scores ----

void PjrtBackend::token_logprobs(DType dt, const void* logits, const int32_t* labels, int64_t N,
                                 int64_t V, int32_t ignore_index, double softcap, void* logprobs,
                                 void* greedy) {
  if (N == 0) return;
  const hlo::TokenScores s = hlo::token_logprobs(
      b(), up(view(logits, dt, {N, V})), view(labels, DType::i32, {N}), ignore_index, softcap);
  set(logprobs, stat(s.logprobs, dt));
  set(greedy, s.greedy);
}

// One lowering for every chunk, as head_loss: the logits exist inside the program only (the
// scratch is not needed), and the [N] results are the program's outputs, read back together.
void PjrtBackend::head_logprobs(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                                const int32_t* labels, void* logprobs, void* greedy, void* logits) {
  (void)logits;
  if (a.N == 0) return;
  const hlo::TokenScores s = hlo::head_logprobs(
      b(), view(h, dt, {a.N, a.C}), view(w, dt, {a.V, a.C}), view(labels, DType::i32, {a.N}), a);
  set(logprobs, stat(s.logprobs, dt));
  set(greedy, s.greedy);
}

}  // namespace lmt
