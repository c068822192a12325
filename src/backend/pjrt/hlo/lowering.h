// The backend's kernels as StableHLO: each function appends to a StablehloBuilder the ops that
// compute what the CPU backend's kernel of the same name computes (backend/backend.h), on whole
// tensors instead of pointers. The PJRT backend (../backend*.cpp) builds its programs from these;
// they are declared here by the sections of backend.h and defined one file of hlo/ per section
// (the attention section: dense, blocked and cuDNN's), with the helpers those files share in
// lowering_helpers.h. Dense algebra and the plain elementwise ops are one builder op each, which
// the backend writes itself. Their tests (tests/pjrt/test_lowering*.cpp and the attention tests)
// run each on XLA's CPU plugin against the CPU backend. Shapes are given beside each argument;
// f32 (or f64) tensors unless said.
#pragma once

#include <string>

#include "backend/backend.h"
#include "backend/pjrt/hlo/builder.h"

namespace lmt::hlo {

using Value = HloValue;

// ---- elementwise (elementwise.cpp) ----

// Dropout on x of any shape, flat element i under mask element i: x / (1 - p) where kept
// (core/rng.h dropout_keeps), else 0, bit for bit as the CPU kernel. key: i32[4] runtime tensor
// {seed low, seed high, stream low, stream high} (32-bit halves as their bits), so one compiled
// step serves every step's stream. At most 4 (2^31 - 1) elements.
Value dropout(StablehloBuilder& b, const Value& x, double p, const Value& key);

// ---- device scalars (wide.cpp) ----

// The scalars backend.h passes as double* (loss sums, sums of squares, the clipping and gradient
// scales), which the host reads and writes as doubles. WideForm::f64: an f64 scalar, as the CPU
// backend holds them (XLA:CPU). WideForm::f32_pair: f32[2] {hi, lo}, the value hi + lo with
// |lo| <= ulp(hi) / 2 (about 48 bits), summed with compensation: for an accelerator, whose
// programs hold no f64 (a TPU emulates it, a GPU runs it at a fraction of f32's rate). A value's
// form is its type.
enum class WideForm { f64, f32_pair };
WideForm wide_form(const std::string& platform);  // f64 on PJRT's "cpu" only
Value wide_zero(StablehloBuilder& b, WideForm form);
// The sum of every element of x (a float type; f64 only for WideForm::f64): in f64, or as a
// compensated f32 sum (stablehlo.reduce of pairs), within about n 2^-46 of the sum of the
// elements' magnitudes.
Value wide_sum(StablehloBuilder& b, const Value& x, WideForm form);
Value wide_add(StablehloBuilder& b, const Value& a, const Value& c);  // a + c, one form
// A wide value as a plain scalar: the f64, or a pair's hi (the f32 nearest the value).
Value wide_value(StablehloBuilder& b, const Value& w);
// A float scalar as a wide value (exactly, as {v, 0} for a pair).
Value as_wide(StablehloBuilder& b, const Value& v, WideForm form);

// ---- embedding (embedding.cpp) ----

// Embedding: out[N,C] = table[ids[n], :] (ids i32 [N], table [V,C]); backward returns the table
// gradient's contribution [V,C], dout's rows summed by id, which the caller adds to dtable.
Value embedding_forward(StablehloBuilder& b, const Value& ids, const Value& table);
Value embedding_backward(StablehloBuilder& b, const Value& dout, const Value& ids, int64_t V);

// ---- normalisation (normalisation.cpp) ----

// out[N,C] = x * rstd * (w_offset + w[C]); rstd[N] = 1 / sqrt(mean(x^2) + eps).
struct NormOut {
  Value out, rstd;
};
NormOut rmsnorm_forward(StablehloBuilder& b, const Value& x, const Value& w, double eps,
                        double w_offset);
// d/dx[N,C] and d/dw[C] of rmsnorm_forward for dout[N,C] (both: any rows [rows..., C]).
struct NormGrads {
  Value dx, dw;
};
NormGrads rmsnorm_backward(StablehloBuilder& b, const Value& dout, const Value& x, const Value& w,
                           const Value& rstd, double w_offset);

// LayerNorm: out[N,C] = (x - mean) * rstd * w + b; mean[N], rstd[N] saved.
struct LayerNormOut {
  Value out, mean, rstd;
};
LayerNormOut layernorm_forward(StablehloBuilder& b, const Value& x, const Value& w,
                               const Value& bias, double eps);
struct LayerNormGrads {
  Value dx, dw, db;
};
LayerNormGrads layernorm_backward(StablehloBuilder& b, const Value& dout, const Value& x,
                                  const Value& w, const Value& mean, const Value& rstd);

// Per-head RMSNorm (q/k norm): x[N,H,D], each head normalised over D and scaled by
// (w_offset + w[D]); rstd [N,H]. Backward: dx [N,H,D] and dw [D] (no accumulation).
NormOut head_rmsnorm_forward(StablehloBuilder& b, const Value& x, const Value& w, double eps,
                             double w_offset);
NormGrads head_rmsnorm_backward(StablehloBuilder& b, const Value& dout, const Value& x,
                                const Value& w, const Value& rstd, double w_offset);

// ---- rotary position embedding (rope.cpp) ----

// RoPE (Hugging Face rotate_half) on x[N, H, D]: the first rotary_dim dims of each head turn by
// angle pos[n] * inv_freq[i] (pos [N] i32, inv_freq [rotary_dim/2] f32, the angle formed in f32
// as the CPU kernel does), cos and sin times attn_factor; inverse applies the transpose.
Value rope(StablehloBuilder& b, const Value& x, const Value& pos, const Value& inv_freq,
           int64_t rotary_dim, double attn_factor, bool inverse);

// ---- attention (attention.cpp, attention_blocked.cpp, attention_cudnn.cpp) ----

// Attention on whole tensors (dense scores; fine for short sequences, the blocked form below for
// long ones): q [B,T,Hq,D], k and v [B,T,Hkv,D], query head h reading kv head
// h / (Hq / Hkv). Causal; window > 0 keeps keys with i - j < window; doc_start [B,T] i32 (or an
// invalid Value: none) keeps keys j >= doc_start[b, i]; softcap > 0 caps the scaled scores.
// out [B,T,Hq,D] and lse [B,Hq,T] as the CPU kernel saves them.
struct AttentionArgsHlo {
  double scale = 0.125, softcap = 0.0;
  int64_t window = 0;
};
struct AttentionOut {
  Value out, lse;
};
AttentionOut attention_forward(StablehloBuilder& b, const AttentionArgsHlo& a, const Value& q,
                               const Value& k, const Value& v, const Value* doc_start);
struct AttentionGrads {
  Value dq, dk, dv;
};
AttentionGrads attention_backward(StablehloBuilder& b, const AttentionArgsHlo& a, const Value& dout,
                                  const Value& q, const Value& k, const Value& v,
                                  const Value* doc_start);

// The same attention without a [T,T] tensor, for long sequences (flash-attention style,
// attention_blocked.cpp): query and key blocks of `block` positions (T padded up to a
// multiple), walked by stablehlo.while with an online softmax; key blocks that no query of a
// block may see (causal, window, documents) are skipped. Memory grows as T, not T^2. The forward
// gives what attention_forward gives; the backward takes the forward's out and lse, as the CPU
// kernel does, and recomputes the probabilities from lse block by block instead of redoing the
// forward.
AttentionOut attention_forward_blocked(StablehloBuilder& b, const AttentionArgsHlo& a,
                                       const Value& q, const Value& k, const Value& v,
                                       const Value* doc_start, int64_t block);
AttentionGrads attention_backward_blocked(StablehloBuilder& b, const AttentionArgsHlo& a,
                                          const Value& dout, const Value& q, const Value& k,
                                          const Value& v, const Value& out, const Value& lse,
                                          const Value* doc_start, int64_t block);

// cuDNN's fused flash attention, as XLA's GPU backend calls it (attention_cudnn.cpp):
// the custom calls jax.nn.dot_product_attention(implementation="cudnn") emits. The same
// attention as above, without documents and soft-capping: q [B,T,Hq,D], k and v [B,T,Hkv,D], all
// bf16 or all f16; causal, window > 0 keeps keys with i - j < window. The forward gives out
// [B,T,Hq,D] (q's dtype) and lse [B,Hq,T] f32 (cuDNN's softmax statistics); the backward takes
// dout [B,T,Hq,D] and the forward's out and lse and gives dq, dk, dv shaped and typed as q, k, v.
// Only XLA's CUDA plugin compiles these. cudnn_attention_fallback gives, in one line, why the
// backend keeps the lowering above for an attention on `platform` computing in dt (nullptr: it
// calls cuDNN); use_cudnn_attention is its nullptr test. `deterministic` (train.deterministic)
// keeps the lowering: XLA's CUDA plugin (jax-cuda13-pjrt 0.11.2, H200) stops with an internal
// error ("raw_hash_map<>::at") when it compiles cuDNN's backward under
// xla_gpu_exclude_nondeterministic_ops or xla_gpu_deterministic_ops. `devices`: the mesh's; more
// than one keeps the lowering too (XLA's partitioner cannot split cuDNN's call).
const char* cudnn_attention_fallback(const std::string& platform, DType dt, const AttentionArgs& a,
                                     bool deterministic, int64_t devices);
bool use_cudnn_attention(const std::string& platform, DType dt, const AttentionArgs& a,
                         bool deterministic, int64_t devices);
AttentionOut cudnn_attention_forward(StablehloBuilder& b, const AttentionArgsHlo& a, const Value& q,
                                     const Value& k, const Value& v);
AttentionGrads cudnn_attention_backward(StablehloBuilder& b, const AttentionArgsHlo& a,
                                        const Value& dout, const Value& q, const Value& k,
                                        const Value& v, const Value& out, const Value& lse);
// The backend_config JSON of either call for B sequences of T positions, Hq query heads, inputs
// of dtype dt; written as JAX writes it (json.dumps: its key order, separators and float form).
std::string cudnn_fmha_config(int64_t B, int64_t Hq, int64_t T, DType dt, double scale,
                              int64_t window, bool backward);

// ---- MLP activation (mlp_activation.cpp) ----

// Plain activation (GPT-2's MLP), elementwise on any shape, and its input gradient.
Value act_forward(StablehloBuilder& b, Activation act, const Value& x);
Value act_backward(StablehloBuilder& b, Activation act, const Value& dout, const Value& x);
// ReLU's sign mask of x[n] packed into ceil(n / 32) i32 words (Backend::relu_mask's layout), and
// ReLU's input gradient from it.
Value relu_mask(StablehloBuilder& b, const Value& x);
Value relu_backward_masked(StablehloBuilder& b, const Value& dout, const Value& mask);
// ReLU^2's input gradient dout * 2 sqrt(y) from its output y. `stored`: the dtype y was kept in
// (the root is rounded to it first, as the input was when y was formed from it).
Value relu2_backward_from_output(StablehloBuilder& b, const Value& dout, const Value& y,
                                 DType stored);

// gate_up[N, 2F] = [gate | up]: out[N,F] = act(gate) * up, and its gradient dgate_up[N, 2F].
Value glu_forward(StablehloBuilder& b, Activation act, const Value& gate_up);
Value glu_backward(StablehloBuilder& b, Activation act, const Value& dout, const Value& gate_up);

// ---- the loss on one chunk of logits (loss.cpp) ----

// The loss (backend/loss.h) of logits[N,V] against labels[N] (i32; ignore_index: no loss):
// losses[N] (the objective), ce[N] (the plain cross-entropy), and with grad_scale != 0 the
// gradient d(grad_scale * sum of losses)/dlogits (ignored rows 0). softcap > 0 applies
// softcap * tanh(logits / softcap) first.
struct CrossEntropy {
  Value losses, ce, dlogits;  // dlogits only when grad_scale != 0
};
CrossEntropy cross_entropy(StablehloBuilder& b, const Value& logits, const Value& labels,
                           int32_t ignore_index, double grad_scale, double softcap,
                           const LossSpec& loss = {});

// backend/loss.h's row_loss on rows of statistics: lse, z_label, z_sum [N] (one float type).
RowLoss<Value> row_loss(StablehloBuilder& b, const LossSpec& loss, const Value& lse,
                        const Value& z_label, const Value& z_sum, int64_t V);

// ---- the output head and its loss (head_loss.cpp) ----

// The output head and its loss (Backend::head_loss) on whole tensors: h [N,C] (bf16, f32 or
// f64), w [V,C] of h's dtype, labels [N] i32; a: the chunk, ignore_index, softcap, loss and
// vocab_tile (a.N, a.C, a.V and a.grad_scale are taken from the tensors and grad_scale). Logits
// and their softmax are formed in f32 (f64 for f64) a chunk of rows at a time: one chunk
// straight, several as a stablehlo.while over the chunks (N padded to a whole number of them), so
// one chunk's logits exist at a time; with a.cut() each chunk walks the vocabulary in tiles
// (two stablehlo.while loops: the online log-sum-exp, then the gradients), so one tile of logits
// exists at a time. grad_scale: null for the loss only, else a runtime scalar of the compute type
// the gradients are multiplied by. Returns the objective's and the plain cross-entropy's sums
// (wide scalars of form `sums`) and, with grad_scale, dh [N,C] (h's dtype) and, with want_dw,
// dw [V,C] summed over the chunks in the compute type.
struct HeadLossOut {
  Value loss_sum, ce_sum, dh, dw;
};
// rows: how h's rows are split over the mesh (the residual stream's sharding, empty for none).
// Split rows are chunked within each device's own rows ([groups, N / groups, C], a chunk taking
// a.chunk rows of every group: a.chunk is a device's), so that no device gathers another's rows
// to slice a chunk. vocab: w split by vocabulary over the rows' axes as well as its own ([V, C]
// shardings), for whole-row logits on split rows (each device the logits and weight gradient of
// its own ids: vocabulary-parallel); head: how w is held otherwise (the cut loss; empty: as it
// comes), gathered over the axes that split the rows once, before the loop.
HeadLossOut head_loss(StablehloBuilder& b, const Value& h, const Value& w, const Value& labels,
                      const HeadLossArgs& a, const Value* grad_scale, bool want_dw, WideForm sums,
                      const TensorSharding& rows = {}, const TensorSharding& head = {},
                      const TensorSharding& vocab = {});

// ---- per-token scores (token_logprobs.cpp) ----

// Backend::token_logprobs on logits [N,V] (f32 or f64) against labels [N] i32: logprobs [N] (the
// logits' type) and greedy [N] (i32 0/1; argmax ties to the lowest id), ignored rows 0 and 0.
struct TokenScores {
  Value logprobs, greedy;
};
TokenScores token_logprobs(StablehloBuilder& b, const Value& logits, const Value& labels,
                           int32_t ignore_index, double softcap);
// Backend::head_logprobs on whole tensors h [N,C], w [V,C] of h's dtype, labels [N] i32: the
// logits formed a.chunk rows at a time as head_loss forms them (a stablehlo.while over the chunks
// when there are several; a.cut(): a second loop over vocabulary tiles inside each), so one
// program computes every row's score. logprobs in f32 (f64 for f64).
TokenScores head_logprobs(StablehloBuilder& b, const Value& h, const Value& w, const Value& labels,
                          const HeadLossArgs& a);

// ---- optimizer (optimizer.cpp) ----

// Clipping and AdamW as the CPU backend's clip_scale and adamw_step do them. sum_squares: f32
// scalar; the scale is NaN for a norm that is not finite. The per-step constants are runtime
// scalars (f32) so that one compiled step serves every step: decay = 1 - lr wd, step_size =
// lr / (1 - beta1^t), inv_bc2_sqrt = 1 / sqrt(1 - beta2^t). A scale that is not finite returns
// p, m and v unchanged.
Value clip_scale(StablehloBuilder& b, const Value& sum_squares, double max_norm);
struct AdamWOut {
  Value p, m, v;
};
AdamWOut adamw_step(StablehloBuilder& b, const Value& p, const Value& g, const Value& m,
                    const Value& v, double beta1, double beta2, double eps, const Value& decay,
                    const Value& step_size, const Value& inv_bc2_sqrt, const Value& grad_scale);

// Lion, SGD with momentum and Muon's elementwise pieces as the CPU backend computes them
// (backend.h). Per-step constants are runtime f32 scalars (decay = 1 - lr wd, lr); grad_scale is
// clip_scale's (f32 here), and a scale that is not finite returns p and the state unchanged.
struct LionOut {
  Value p, m;
};
LionOut lion_step(StablehloBuilder& b, const Value& p, const Value& g, const Value& m, double beta1,
                  double beta2, const Value& decay, const Value& lr, const Value& grad_scale);
struct SgdOut {
  Value p, buf;
};
SgdOut sgd_step(StablehloBuilder& b, const Value& p, const Value& g, const Value& buf,
                double momentum, bool nesterov, double weight_decay, const Value& lr,
                const Value& grad_scale);
struct MuonMomentumOut {
  Value u, buf;
};
MuonMomentumOut muon_momentum(StablehloBuilder& b, const Value& buf, const Value& g, double beta,
                              bool nesterov, const Value& grad_scale);
// x / (sqrt(sum_squares) + eps), sum_squares a float scalar.
Value scale_by_rnorm(StablehloBuilder& b, const Value& x, const Value& sum_squares, double eps);
Value muon_apply(StablehloBuilder& b, const Value& p, const Value& x, const Value& decay,
                 const Value& lr, const Value& grad_scale);

}  // namespace lmt::hlo
