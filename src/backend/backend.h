// The kernel interface every backend implements. Model, loss and optimizer code call only these
// functions, so they never branch on the backend. Pointers are device pointers of the backend;
// every floating buffer has the dtype passed as `dt` (f64 exists for gradient checks; bf16 is the
// compute dtype of mixed precision, whose saved statistics stay f32). Shapes are given in the
// comment beside each argument, row-major.
//
// Conventions: "+=" in a comment means the kernel accumulates into that buffer (gradients
// accumulate over micro-batches and residual branches); otherwise the output is overwritten.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/devices.h"
#include "backend/loss.h"
#include "backend/mesh.h"
#include "core/dtype.h"

namespace lmt {

// The MLP's activation: SiLU, the tanh-approximated GELU, ReLU, and ReLU squared (relu(x)^2).
enum class Activation : uint8_t { silu, gelu_tanh, relu, relu2 };

// Bytes of a packed sign mask of n elements (see Backend::relu_mask): 32-bit words, 1 bit each.
constexpr size_t sign_mask_bytes(int64_t n) {
  return static_cast<size_t>((n + 31) / 32) * 4;
}

// Arguments of attention. Query token i of a sequence sits at position q_offset + i in the key
// sequence; it attends to keys j with j <= q_offset + i (causal) and, when window > 0,
// q_offset + i - j < window. Pointers address element [b=0, t=0, h=0, d=0]; a token's row of heads
// is `*_row_stride` elements after the previous token's, a sequence `*_batch_stride` after the
// previous sequence's, and head h of a row starts at h * head_dim.
struct AttentionArgs {
  int64_t batch = 1, q_len = 1, kv_len = 1;
  int num_heads = 1, num_kv_heads = 1, head_dim = 64;
  int64_t q_offset = 0;
  int64_t q_row_stride = 0, q_batch_stride = 0;      // q, dq
  int64_t kv_row_stride = 0, kv_batch_stride = 0;    // k, v, dk, dv
  int64_t out_row_stride = 0, out_batch_stride = 0;  // out, dout
  double scale = 0.125;                              // multiplies q.k before the softmax
  double softcap = 0.0;  // > 0: scores become softcap * tanh(scores / softcap)
  int64_t window = 0;    // > 0: sliding window size in keys (the query's own key included)
  // Packed samples: device array [batch, q_len] (i32), the first key query i may see (the start
  // of its document); non-decreasing along a sequence. null = no document masking.
  const int32_t* doc_start = nullptr;
};

// Bytes [p, p + bytes) of a backend's memory.
struct MemoryRange {
  void* p = nullptr;
  size_t bytes = 0;
};

// Arguments of Backend::head_loss: the output head and the cross-entropy of N rows.
struct HeadLossArgs {
  int64_t N = 0, C = 0, V = 0;  // rows, hidden size, vocabulary
  int64_t chunk = 1024;         // rows whose logits exist at once
  int32_t ignore_index = -100;  // a label of this value carries no loss
  double grad_scale = 0;        // 0: the loss only; else the gradients of grad_scale * the sum
  // Where the device holds grad_scale (an f64 the caller wrote), or null: a backend that builds
  // programs reads the step's scale there instead of fixing the number in its program, so that
  // a replayed step (Backend::replay) takes each step's.
  const double* grad_scale_at = nullptr;
  double softcap = 0;           // > 0: logits become softcap * tanh(logits / softcap) first
  LossSpec loss;                // the objective (backend/loss.h); plain: the cross-entropy
  // > 0 and < V: the cut cross-entropy, the head's product fused with the loss tile by tile,
  // `chunk` rows by `vocab_tile` token ids: no more than one such tile of logits exists, the
  // log-sum-exp runs online over the tiles and the backward computes each tile again. 0: whole
  // rows of logits (the chunked loss).
  int64_t vocab_tile = 0;
  bool cut() const { return vocab_tile > 0 && vocab_tile < V; }
};

// The scratch Backend::head_loss takes, in elements: logits (dt) and losses (f32, or f64 when
// dt is f64) for `chunk` rows.
struct HeadLossScratch {
  int64_t logits = 0, losses = 0;
};
inline HeadLossScratch head_loss_scratch(int64_t chunk, int64_t V, int64_t vocab_tile) {
  const bool cut = vocab_tile > 0 && vocab_tile < V;
  return {chunk * (cut ? vocab_tile : V), 2 * chunk};
}

// A tensor of the model as a backend may hold it: a parameter (its Hugging Face name), a gradient
// ("grad." + name), an optimizer moment (its checkpoint name), a batch array ("batch.ids"), a
// step statistic.
struct TensorDesc {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // row-major

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
};

// A device's memory as its allocator counts it, in bytes: in use now, and the peak so far where
// the allocator keeps one.
struct DeviceMemoryUse {
  int64_t bytes_in_use = 0;
  std::optional<int64_t> peak_bytes;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The device it computes on (its platform and kind, how many, the table's figures for it),
  // whether it compiles programs and what it counted of them: what MFU, bench and the log ask of
  // a backend instead of its name. The CPU backend: platform "cpu", no kind, compiles nothing.
  virtual DeviceInfo device() const = 0;
  // The memory of the device programs run on (the first of a mesh), for the metrics; nullopt
  // where the backend has no memory apart from the process's (the CPU backend) or its PJRT plugin
  // keeps no allocator statistics (XLA's CPU plugin).
  virtual std::optional<DeviceMemoryUse> device_memory() const { return std::nullopt; }
  // What computes the products, as a person reads it (the CPU backend: its BLAS, the core kernels
  // it chose and what chose them); empty where the backend's report says it elsewhere.
  virtual std::string kernels() const { return ""; }
  // Empty where the backend computes in dt on this machine; else why it cannot, as a person reads
  // it (the CPU backend's bf16 needs bf16 matrix instructions).
  virtual std::string unsupported(DType dt) const { return ""; }

  // ---- memory ----
  virtual void* alloc(size_t bytes) = 0;  // zero-filled
  virtual void free(void* p) = 0;
  virtual void to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  // The contents of the allocation p (as alloc returned it) are no longer needed: scratch whose
  // values die with the step. A backend that keeps values inside a program (pjrt) then does not
  // write them back; reading p afterwards gives unspecified values until it is written again.
  virtual void discard(void* p) {}
  // The bytes at p (inside one allocation) hold tensor t from now on; its contents stay what they
  // are. A compiling backend (pjrt) keeps every described tensor as its own typed device array,
  // its own argument and output of a program, donated from step to step: XLA can only donate,
  // optimise and shard what it sees whole, not byte ranges of a flat buffer. The CPU backend's
  // flat buffers need nothing.
  virtual void describe(const void* p, const TensorDesc& t) {}
  // Activation checkpointing: what follows recomputes, from the contents of `sources` (a layer's
  // saved input), values computed from them before, and must not start before `after` (the
  // gradient that needs the recomputation) exists. A compiling backend has to say both to its
  // compiler, or it merges the recomputation with the forward pass it repeats (keeping the
  // forward's values alive: the checkpoint undone) or runs it early (every layer's recomputed
  // values alive at once). Values stay what they are; the CPU backend, which computes as it is
  // called, has nothing to do.
  virtual void recompute_from(const std::vector<MemoryRange>& sources, const MemoryRange& after) {}
  // The contents of `value` (the residual stream between two layers, or its gradient: `rows`
  // tokens' rows) are one array the program keeps, not a sum its compiler may recompute in every
  // reader. XLA's CPU compiler fuses a chain of residual additions into each consumer instead,
  // keeping every layer's products alive until the last reader (19 GiB at 1B, T = 32768). On a
  // mesh the rows [rows, features] are split as the sharding plan splits "activation.residual"
  // (model/sharding_plan.h: over the batch axes, as the batch is). Values stay what they are;
  // the CPU backend's arrays are memory already.
  virtual void keep(const MemoryRange& value, int64_t rows) {}
  // `value` (`rows` tokens' rows) was written in pieces and both GEMMs that follow read it whole:
  // a fused product's gradient (gate|up; q|k|v after RoPE or the q/k norm). A compiling backend
  // makes it one array, once: XLA's GPU compiler would otherwise fuse the pieces into the weight
  // gradient's product and concatenate them again for the input gradient's. Split on a mesh as
  // keep's value is.
  virtual void assemble(const MemoryRange& value, int64_t rows) {}
  // Whether a fused group of weights (q|k|v, gate|up: ParamInfo::fused), and a gradient assembled
  // for one, is best taken as one array: converted, kept and reduced whole. So on one device or a
  // mesh that splits by rows, where XLA then launches one kernel for the group instead of one per
  // piece. Not where tensor parallelism splits each projection by its own heads or features: the
  // concatenation, split in halves, would have XLA move the pieces between devices.
  virtual bool fused_groups_whole() const { return true; }
  virtual void synchronize() {}
  // Whether work handed to the backend runs after the call returns (pjrt: a queued program), so
  // that a caller gains by queuing the next training step before reading this one's results
  // (TrainStep::launch). The CPU backend computes in the call: false.
  virtual bool asynchronous() const { return false; }
  // When the backend last handed a program to its device (the moment its run was queued), for
  // the host's time per step (TrainStep); nullopt where kernels compute in their calls (the CPU
  // backend) or nothing has run yet.
  virtual std::optional<std::chrono::steady_clock::time_point> last_launch() const {
    return std::nullopt;
  }
  // A step recorded once and replayed (a backend that builds programs; the others never replay).
  // A caller that makes the same calls on the same buffers step after step, only the values it
  // writes with from_host changing (the training step: its batch, gradient scale, dropout key and
  // optimizer factors), need not make them again: record(key) says that the calls up to the next
  // synchronize() are one step, to be kept under key (a step that is not one program, or reads a
  // host value other than through from_host, is not kept). replay(key, writes) then runs the kept
  // step if it is exactly what those calls would build now (the backend's buffers as they were
  // when it was recorded): `writes` makes the step's from_host calls, the same ones in the same
  // order, whose data replace the recorded step's, and nothing else; the step is queued as
  // synchronize() would queue it and replay returns true. Otherwise it returns false without
  // calling `writes`, and the caller makes the calls (under record).
  virtual void record(int key) {}
  virtual bool replay(int key, const std::function<void()>& writes) { return false; }
  // The host address of the backend's memory at p when that memory is host memory (the CPU
  // backend), so a reader can use it in place; null where it must be copied with to_host.
  virtual const void* host_address(const void* p) const { return nullptr; }
  // Whether decoding one token at a time (attention with a query offset, a growing KV cache) runs
  // here at a useful speed. A backend that compiles one program per shape does not: generation
  // then runs on a copy of the model on the CPU backend (Transformer::clone).
  virtual bool incremental_decoding() const { return true; }
  // Seconds spent inside gemm() since the last reset (for the benchmark's GEMM share).
  virtual double gemm_seconds() const { return 0.0; }
  virtual void reset_gemm_seconds() {}

  // ---- dense algebra ----
  // C[M,N] = alpha * op(A) * op(B) + beta * C; op(A) is [M,K] (A stored [K,M] when trans_a),
  // op(B) is [K,N] (B stored [N,K] when trans_b); lda/ldb/ldc are row strides of the stored
  // matrices. With beta == 0, C is not read.
  virtual void gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    double alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                    double beta, void* C, int64_t ldc) = 0;
  // out[N,O] += bias[O] broadcast over rows.
  virtual void add_bias(DType dt, void* out, const void* bias, int64_t N, int64_t O) = 0;
  // dbias[O] += sum over rows of dout[N,O].
  virtual void bias_backward(DType dt, void* dbias, const void* dout, int64_t N, int64_t O) = 0;

  // ---- elementwise ----
  virtual void add(DType dt, void* out, const void* a, const void* b, int64_t n) = 0;  // out = a+b
  virtual void accumulate(DType dt, void* y, const void* x, int64_t n) = 0;            // y += x
  virtual void scale(DType dt, void* x, double s, int64_t n) = 0;                      // x *= s
  // Reductions into device scalars (one f64 each, on the device like any buffer), so that a step
  // reads nothing back before its end. *acc += sum of x[n] (of squares), formed in double.
  // Every double* a kernel takes is such a scalar. A backend may hold them otherwise (the pjrt
  // backend on an accelerator: f32 pairs, summed with compensation, about 48 bits), and there
  // each must be described as f64 (describe) before a kernel uses it; the host reads and writes
  // doubles either way.
  virtual void sum(DType dt, double* acc, const void* x, int64_t n) = 0;
  virtual void sum_squares(DType dt, double* acc, const void* x, int64_t n) = 0;
  // Dropout: out[i] = x[i] / (1 - p) where element i of mask (seed, key[1] ^ stream) is kept
  // (core/rng.h dropout_keeps), else 0, for seed = key[0]: key is a device array {seed, stream}
  // (the caller writes it once per step, so that a replayed step takes each step's; stream picks
  // one mask of several under it). The mask is a pure function of (seed, stream, i): backward
  // applies the same call to the gradient. out may be x.
  virtual void dropout(DType dt, void* out, const void* x, int64_t n, double p, const uint64_t* key,
                       uint64_t stream) = 0;
  // Converts n elements between floating dtypes (f32, f64, bf16, f16).
  virtual void convert(DType dst_dt, void* dst, DType src_dt, const void* src, int64_t n) = 0;

  // ---- embedding ----
  // out[N,C] = table[ids[n], :] of table[V,C]. ids are i32 in [0, V). Any dtype (rows are
  // copied).
  virtual void embedding_forward(DType dt, void* out, const int32_t* ids, const void* table,
                                 int64_t N, int64_t C, int64_t V) = 0;
  // dtable[V,C] += scatter of dout[N,C] by ids[N]. Deterministic.
  virtual void embedding_backward(DType dt, void* dtable, const void* dout, const int32_t* ids,
                                  int64_t N, int64_t C, int64_t V) = 0;

  // ---- normalisation ----
  // out[N,C] = x * rstd * (w_offset + w); rstd[N] (f32, or f64 when dt is f64) saved for backward.
  virtual void rmsnorm_forward(DType dt, void* out, void* rstd, const void* x, const void* w,
                               int64_t N, int64_t C, double eps, double w_offset) = 0;
  // dx[N,C] += d/dx; dw[C] += d/dw. dout[N,C], x[N,C], w[C], rstd[N] from the forward.
  virtual void rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout, const void* x,
                                const void* w, const void* rstd, int64_t N, int64_t C,
                                double w_offset) = 0;
  // out[N,C] = (x - mean) * rstd * w + b; mean[N], rstd[N] saved (dtype as rstd above).
  virtual void layernorm_forward(DType dt, void* out, void* mean, void* rstd, const void* x,
                                 const void* w, const void* b, int64_t N, int64_t C,
                                 double eps) = 0;
  // dx[N,C] +=, dw[C] +=, db[C] +=.
  virtual void layernorm_backward(DType dt, void* dx, void* dw, void* db, const void* dout,
                                  const void* x, const void* w, const void* mean, const void* rstd,
                                  int64_t N, int64_t C) = 0;

  // Per-head RMSNorm (q/k norm of qwen3 and gemma3): N token rows `row_stride` elements apart in
  // x and out, each holding `heads` heads of head_dim at h * head_dim; every head is normalised
  // over its head_dim values and scaled by (w_offset + w[head_dim]). rstd[N, heads] (dtype as
  // rmsnorm's). out must not alias x.
  virtual void head_rmsnorm_forward(DType dt, void* out, void* rstd, const void* x, const void* w,
                                    int64_t N, int64_t row_stride, int heads, int head_dim,
                                    double eps, double w_offset) = 0;
  // dx (layout of x) is overwritten and may alias dout; dw[head_dim] +=.
  virtual void head_rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout, const void* x,
                                     const void* w, const void* rstd, int64_t N, int64_t row_stride,
                                     int heads, int head_dim, double w_offset) = 0;

  // ---- rotary position embedding (Hugging Face "rotate_half" layout) ----
  // In place on x: N token rows, `row_stride` elements apart, each holding `heads` heads of
  // head_dim at offsets h * head_dim. The first rotary_dim dims of each head rotate:
  // pairs (d, d + rotary_dim/2), angle = pos[n] * inv_freq[d] (inv_freq f32 [rotary_dim/2]),
  // cos and sin multiplied by attn_factor. inverse = true applies the transpose (backward).
  virtual void rope(DType dt, void* x, const int32_t* pos, const float* inv_freq, int64_t N,
                    int64_t row_stride, int heads, int head_dim, int rotary_dim, double attn_factor,
                    bool inverse) = 0;

  // ---- attention (blockwise, online softmax: O(T) memory, never a T x T matrix) ----
  // out = softmax(mask(scale * q k^T)) v per head; query head h reads kv head
  // h / (num_heads / num_kv_heads). lse[B, Hq, Tq] (f32, or f64 when dt is f64) saved for backward.
  virtual void attention_forward(DType dt, const AttentionArgs& a, void* out, void* lse,
                                 const void* q, const void* k, const void* v) = 0;
  // dq, dk, dv are overwritten (same strides as q, k, v). out and lse come from the forward.
  virtual void attention_backward(DType dt, const AttentionArgs& a, void* dq, void* dk, void* dv,
                                  const void* dout, const void* q, const void* k, const void* v,
                                  const void* out, const void* lse) = 0;

  // ---- gated MLP activation ----
  // gate_up[N, 2F] holds [gate | up] per row; out[N,F] = act(gate) * up.
  virtual void glu_forward(DType dt, Activation act, void* out, const void* gate_up, int64_t N,
                           int64_t F) = 0;
  // dgate_up[N,2F] overwritten from dout[N,F].
  virtual void glu_backward(DType dt, Activation act, void* dgate_up, const void* dout,
                            const void* gate_up, int64_t N, int64_t F) = 0;
  // Plain activation (GPT-2 MLP): out[n] = act(x[n]); backward: dx[n] = dout[n] * act'(x[n]).
  virtual void act_forward(DType dt, Activation act, void* out, const void* x, int64_t n) = 0;
  virtual void act_backward(DType dt, Activation act, void* dx, const void* dout, const void* x,
                            int64_t n) = 0;
  // The backward of ReLU and ReLU^2 from less than their input (train.activation_bits: 1), each
  // giving exactly act_backward's values:
  // relu_mask: mask (sign_mask_bytes(n) bytes) = 1 bit per element, x[i] > 0, as bit i % 32 of
  // 32-bit word i / 32 (a last word's unused bits 0).
  virtual void relu_mask(DType dt, void* mask, const void* x, int64_t n) = 0;
  // dx[i] = dout[i] * (bit i of mask ? 1 : 0), overwritten: ReLU's backward.
  virtual void relu_backward_masked(DType dt, void* dx, const void* dout, const void* mask,
                                    int64_t n) = 0;
  // dx[i] = dout[i] * 2 sqrt(y[i]) from ReLU^2's output y = relu(x)^2, overwritten. In binary
  // floating point sqrt(round(r * r)) == r whenever r * r is a normal number, so this is
  // act_backward(relu2) on x except where 0 < x < 2^-63 (f32), whose square underflows.
  virtual void relu2_backward_from_output(DType dt, void* dx, const void* dout, const void* y,
                                          int64_t n) = 0;

  // ---- the loss on one chunk of logits ----
  // logits[N,V]; labels[N] (i32; == ignore_index means no loss). Writes losses[N] (f32, or f64 when
  // dt is f64; 0 for ignored rows): each row's objective (`loss`, backend/loss.h; the
  // cross-entropy by default), and, unless ce_losses is null, ce_losses[N] (the same type): each
  // row's plain cross-entropy. If grad_scale != 0, overwrites logits with
  // d(grad_scale * sum of losses)/dlogits (ignored rows become 0). softcap > 0 applies
  // softcap * tanh(logits / softcap) first (and its derivative).
  virtual void cross_entropy(DType dt, void* logits, void* losses, const int32_t* labels, int64_t N,
                             int64_t V, int32_t ignore_index, double grad_scale, double softcap,
                             const LossSpec& loss = {}, void* ce_losses = nullptr) = 0;

  // ---- the output head and its loss ----
  // The logits h[N,C] w[V,C]^T (w: the head, one row per token id) and their loss (a.loss)
  // against labels[N] (i32), `chunk` rows at a time: *loss_sum (a device f64) += the sum of the
  // rows' objectives, and unless ce_sum is null *ce_sum (a device f64) += the sum of their plain
  // cross-entropies. With grad_scale != 0 also dh[N,C] = d(grad_scale * sum)/dh (overwritten)
  // and, unless dw is null (a frozen head), dw[V,C] += d(grad_scale * sum)/dw. logits (dt) and
  // losses (f32, or f64 when dt is f64) are scratch of head_loss_scratch(chunk, V, vocab_tile)
  // elements. The default runs the chunks through gemm and cross_entropy (a.cut() is the CPU
  // backend's and the compiling backend's own); a compiling backend makes them one loop, so that
  // its program too holds one chunk's logits at a time, not the [N, V] of them.
  virtual void head_loss(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                         const int32_t* labels, double* loss_sum, void* dh, void* dw, void* logits,
                         void* losses, double* ce_sum = nullptr);

  // ---- per-token scores (evaluation: lmtrain eval's log-likelihoods) ----
  // logits[N,V] (read only); labels[N] (i32; == ignore_index: no score). With z a row's logits
  // after the soft-cap (softcap > 0: softcap * tanh(logits / softcap), as the loss caps them):
  // logprobs[N] (f32, or f64 when dt is f64) = log_softmax(z)[label], and greedy[N] (i32) = 1
  // where the label is the row's argmax, ties going to the lowest id (torch.argmax), else 0.
  // Ignored rows get 0 and 0.
  virtual void token_logprobs(DType dt, const void* logits, const int32_t* labels, int64_t N,
                              int64_t V, int32_t ignore_index, double softcap, void* logprobs,
                              void* greedy) = 0;
  // token_logprobs of the head's logits h[N,C] w[V,C]^T, `chunk` rows at a time as head_loss
  // forms them (a.cut(): a vocab_tile of them; a.grad_scale and a.loss are not used): no [N, V]
  // logits at once. logprobs[N] and greedy[N] as token_logprobs writes them; logits: scratch of
  // head_loss_scratch(chunk, V, vocab_tile).logits elements. The default runs the chunks
  // through gemm and token_logprobs (a.cut() is the CPU backend's and the compiling backend's
  // own); a compiling backend makes them one loop in one program.
  virtual void head_logprobs(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                             const int32_t* labels, void* logprobs, void* greedy, void* logits);

  // ---- optimizer ----
  // Global-norm clipping on the device: *scale = min(1, max_norm / (sqrt(*sum_squares) + 1e-6))
  // (1 when max_norm <= 0), or NaN when the norm is not finite. Device f64 scalars.
  virtual void clip_scale(double* scale, const double* sum_squares, double max_norm) = 0;
  // The optimizers' per-step numbers (the learning rate, AdamW's bias corrections) reach the
  // kernels as `factors`: a small f32 device array the optimizer writes each step, formed on the
  // host in double and rounded to f32 (adamw_factors, decay_factors below), so that a replayed
  // step (Backend::replay) takes each step's. `decay` false: no weight decay (factor 1).
  // One AdamW step over n elements, all f32 (master weights, moments). grads are multiplied by
  // *grad_scale (a device scalar, clip_scale's) first; a scale that is not finite leaves p, m and
  // v as they are. p -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p), with bias
  // corrections 1 - beta^step: factors = adamw_factors(lr, beta1, beta2, weight_decay, step).
  virtual void adamw_step(float* p, const float* g, float* m, float* v, int64_t n,
                          const float* factors, double beta1, double beta2, double eps, bool decay,
                          const double* grad_scale) = 0;
  // The other optimizers' elementwise steps, in the same terms: all f32, grads multiplied by
  // *grad_scale first, nothing written when it is not finite.
  // Lion: c = b1 m + (1 - b1) g; p = p (1 - lr wd) - lr sign(c); m = b2 m + (1 - b2) g;
  // factors = decay_factors(lr, wd).
  virtual void lion_step(float* p, const float* g, float* m, int64_t n, const float* factors,
                         double beta1, double beta2, bool decay, const double* grad_scale) = 0;
  // SGD with momentum as torch.optim.SGD (dampening 0; buf starts at zero): d = g + wd p,
  // buf = mu buf + d, p -= lr (nesterov ? d + mu buf : buf); lr = (float) the rate, on the device.
  virtual void sgd_step(float* p, const float* g, float* buf, int64_t n, const float* lr,
                        double momentum, bool nesterov, double weight_decay,
                        const double* grad_scale) = 0;
  // Muon's momentum: buf = b buf + (1 - b) g, and u[n] = nesterov ? (1 - b) g + b buf : buf
  // (u is written whatever the scale; muon_apply then skips the update).
  virtual void muon_momentum(float* u, float* buf, const float* g, int64_t n, double beta,
                             bool nesterov, const double* grad_scale) = 0;
  // x[n] *= 1 / (sqrt(*sum_squares) + eps), the scalar on the device (Newton-Schulz's start).
  virtual void scale_by_rnorm(float* x, int64_t n, const double* sum_squares, double eps) = 0;
  // p[rows, cols] (row stride ldp) = p (1 - lr wd) - lr x (x dense), unless *grad_scale is not
  // finite; factors = decay_factors(lr, wd).
  virtual void muon_apply(float* p, int64_t ldp, const float* x, int64_t rows, int64_t cols,
                          const float* factors, bool decay, const double* grad_scale) = 0;
  // dst[rows, cols] (row stride ldd) = src[rows, cols] (row stride lds), f32.
  virtual void copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                       int64_t cols) = 0;
};

// The optimizer kernels' factors (Backend::adamw_step and the rest): each formed in double, then
// rounded to f32 once. AdamW: {1 - lr wd, lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t)}, t >= 1.
std::array<float, 3> adamw_factors(double lr, double beta1, double beta2, double weight_decay,
                                   int64_t step);
// Lion and Muon's apply: {1 - lr wd, lr}.
std::array<float, 2> decay_factors(double lr, double weight_decay);

class DirectoryStore;  // parallel/directory_store.h

// How to make a backend (the PJRT backend's settings; the others have none).
struct BackendOptions {
  std::string pjrt_plugin;     // "" = the default plugin
  bool deterministic = false;  // ask the compiler for deterministic ops (train.deterministic)
  bool compile_only = false;   // compile the programs, run none: what they need of the device
  // Several devices (parallel.*): the mesh (axes of size 1 left out; none: one device), the
  // plugin's device ids it uses (empty: the first ones), and, when a launcher started several
  // processes, the store where they meet (joined: train/run_processes.h; null for one process).
  Mesh mesh;
  std::vector<int64_t> devices;
  std::shared_ptr<DirectoryStore> store;
  // On a mesh: how each named tensor is split (model/sharding_plan.h); none: all whole.
  std::function<TensorSharding(const std::string& name, const std::vector<int64_t>& dims)>
      sharding;
  // Compile for this GPU without having it (pjrt through the CUDA plugin, compile_only implied):
  // every choice that depends on the device follows the target.
  std::optional<CompileTarget> target;
};

// Makes a backend by name: "cpu", "pjrt" or "auto" (the CPU backend). "cuda" is refused with a
// UserError saying that GPUs are trained on through "pjrt" with the CUDA PJRT plugin; so is a
// backend that is not available (pjrt in a build without it).
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options = {});

// Owns one allocation of a backend.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* be, size_t bytes)
      : be_(be), bytes_(bytes), p_(bytes ? be->alloc(bytes) : nullptr) {}
  ~Buffer() { release(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : be_(o.be_), bytes_(o.bytes_), p_(o.p_) {
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      be_ = o.be_;
      bytes_ = o.bytes_;
      p_ = o.p_;
      o.p_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  void* data() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (p_) be_->free(p_);
    p_ = nullptr;
  }
  Backend* be_ = nullptr;
  size_t bytes_ = 0;
  void* p_ = nullptr;
};

}  // namespace lmt
