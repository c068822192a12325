// The PJRT backend's class, for src/backend/pjrt/backend*.cpp only: its kernels are defined in
// three files by kind (backend.cpp: memory, dense algebra, elementwise, embedding, norms and
// RoPE; backend_nn.cpp: attention, the MLP's activations, the losses; backend_optim.cpp: the
// optimizers' steps). Each kernel reads its operands as typed views of the pending program
// (PjrtTrace::view), appends its lowering (hlo/lowering.h) and writes the results back (set).
#pragma once

#include <string>

#include "backend/pjrt/backend.h"
#include "backend/pjrt/hlo/lowering.h"
#include "backend/pjrt/programs.h"
#include "backend/pjrt/replay.h"
#include "backend/pjrt/runtime/client.h"
#include "backend/pjrt/tensors.h"
#include "backend/pjrt/trace.h"
#include "core/error.h"

namespace lmt {

class PjrtBackend final : public Backend {
 public:
  using Value = HloValue;
  using Dims = std::vector<int64_t>;

  PjrtBackend(const std::string& plugin_path, const PjrtOptions& options);

  std::string name() const override { return "pjrt"; }
  bool incremental_decoding() const override { return false; }
  DeviceInfo device() const override;
  std::optional<DeviceMemoryUse> device_memory() const override;

  // ---- memory ----
  void* alloc(size_t bytes) override {
    building("alloc");
    return tensors_.alloc(bytes);
  }
  void free(void* p) override {
    building("free");
    trace_.release(p);
  }
  void to_host(void* host_dst, const void* src, size_t bytes) override;
  void from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override {
    building("copy");
    trace_.copy(dst, src, bytes);
  }
  void zero(void* p, size_t bytes) override {
    building("zero");
    trace_.zero(p, bytes);
  }
  void discard(void* p) override {
    building("discard");
    trace_.discard(p);
  }
  void describe(const void* p, const TensorDesc& t) override;
  void keep(const MemoryRange& value, int64_t rows) override {
    building("keep");
    trace_.keep(value, rows, PjrtTrace::Kept::residual);
  }
  void assemble(const MemoryRange& value, int64_t rows) override {
    building("assemble");
    trace_.keep(value, rows, PjrtTrace::Kept::assembled);
  }
  bool fused_groups_whole() const override { return client_.mesh().axis_size("tensor") == 1; }
  void recompute_from(const std::vector<MemoryRange>& sources, const MemoryRange& after) override {
    building("recompute_from");
    trace_.recompute_barrier(sources, after);
  }
  void synchronize() override {
    building("synchronize");
    flush(true);
  }
  void record(int key) override;
  bool replay(int key, const std::function<void()>& writes) override;
  // Not on XLA's CPU plugin: its programs run on the cores that would build the next one (a
  // step queued ahead measured 0.91x of one at a time there, GPT-2 B4 T64, 2-core VM).
  bool asynchronous() const override {
    return !programs_.compile_only() && client_.platform_name() != "cpu";
  }
  std::optional<std::chrono::steady_clock::time_point> last_launch() const override {
    return programs_.last_launch();
  }

  // ---- dense algebra ----
  void gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
            const void* A, int64_t lda, const void* B, int64_t ldb, double beta, void* C,
            int64_t ldc) override;
  void add_bias(DType dt, void* out, const void* bias, int64_t N, int64_t O) override;
  void bias_backward(DType dt, void* dbias, const void* dout, int64_t N, int64_t O) override;

  // ---- elementwise ----
  void add(DType dt, void* out, const void* a, const void* b, int64_t n) override;
  void accumulate(DType dt, void* y, const void* x, int64_t n) override;
  void scale(DType dt, void* x, double s, int64_t n) override;
  void sum(DType dt, double* acc, const void* x, int64_t n) override;
  void sum_squares(DType dt, double* acc, const void* x, int64_t n) override;
  void dropout(DType dt, void* out, const void* x, int64_t n, double p, const uint64_t* key,
               uint64_t stream) override;
  void convert(DType dst_dt, void* dst, DType src_dt, const void* src, int64_t n) override;

  // ---- embedding, normalisation, RoPE ----
  void embedding_forward(DType dt, void* out, const int32_t* ids, const void* table, int64_t N,
                         int64_t C, int64_t V) override;
  void embedding_backward(DType dt, void* dtable, const void* dout, const int32_t* ids, int64_t N,
                          int64_t C, int64_t V) override;
  void rmsnorm_forward(DType dt, void* out, void* rstd, const void* x, const void* w, int64_t N,
                       int64_t C, double eps, double w_offset) override;
  void rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout, const void* x,
                        const void* w, const void* rstd, int64_t N, int64_t C,
                        double w_offset) override;
  void layernorm_forward(DType dt, void* out, void* mean, void* rstd, const void* x, const void* w,
                         const void* bias, int64_t N, int64_t C, double eps) override;
  void layernorm_backward(DType dt, void* dx, void* dw, void* db, const void* dout, const void* x,
                          const void* w, const void* mean, const void* rstd, int64_t N,
                          int64_t C) override;
  void head_rmsnorm_forward(DType dt, void* out, void* rstd, const void* x, const void* w,
                            int64_t N, int64_t row_stride, int heads, int head_dim, double eps,
                            double w_offset) override;
  void head_rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout, const void* x,
                             const void* w, const void* rstd, int64_t N, int64_t row_stride,
                             int heads, int head_dim, double w_offset) override;
  void rope(DType dt, void* x, const int32_t* pos, const float* inv_freq, int64_t N,
            int64_t row_stride, int heads, int head_dim, int rotary_dim, double attn_factor,
            bool inverse) override;

  // ---- attention, activations, loss (backend_nn.cpp) ----
  void attention_forward(DType dt, const AttentionArgs& a, void* out, void* lse, const void* q,
                         const void* k, const void* v) override;
  void attention_backward(DType dt, const AttentionArgs& a, void* dq, void* dk, void* dv,
                          const void* dout, const void* q, const void* k, const void* v,
                          const void* out, const void* lse) override;
  void glu_forward(DType dt, Activation act, void* out, const void* gate_up, int64_t N,
                   int64_t F) override;
  void glu_backward(DType dt, Activation act, void* dgate_up, const void* dout, const void* gate_up,
                    int64_t N, int64_t F) override;
  void act_forward(DType dt, Activation act, void* out, const void* x, int64_t n) override;
  void act_backward(DType dt, Activation act, void* dx, const void* dout, const void* x,
                    int64_t n) override;
  void relu_mask(DType dt, void* mask, const void* x, int64_t n) override;
  void relu_backward_masked(DType dt, void* dx, const void* dout, const void* mask,
                            int64_t n) override;
  void relu2_backward_from_output(DType dt, void* dx, const void* dout, const void* y,
                                  int64_t n) override;
  void cross_entropy(DType dt, void* logits, void* losses, const int32_t* labels, int64_t N,
                     int64_t V, int32_t ignore_index, double grad_scale, double softcap,
                     const LossSpec& loss = {}, void* ce_losses = nullptr) override;
  void head_loss(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                 const int32_t* labels, double* loss_sum, void* dh, void* dw, void* logits,
                 void* losses, double* ce_sum = nullptr) override;

  void token_logprobs(DType dt, const void* logits, const int32_t* labels, int64_t N, int64_t V,
                      int32_t ignore_index, double softcap, void* logprobs, void* greedy) override;
  void head_logprobs(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                     const int32_t* labels, void* logprobs, void* greedy, void* logits) override;
  // ---- optimizer (backend_optim.cpp) ----
  void clip_scale(double* scale, const double* sum_squares, double max_norm) override;
  void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, const float* factors,
                  double beta1, double beta2, double eps, bool decay,
                  const double* grad_scale) override;
  void lion_step(float* p, const float* g, float* m, int64_t n, const float* factors, double beta1,
                 double beta2, bool decay, const double* grad_scale) override;
  void sgd_step(float* p, const float* g, float* buf, int64_t n, const float* lr, double momentum,
                bool nesterov, double weight_decay, const double* grad_scale) override;
  void muon_momentum(float* u, float* buf, const float* g, int64_t n, double beta, bool nesterov,
                     const double* grad_scale) override;
  void scale_by_rnorm(float* x, int64_t n, const double* sum_squares, double eps) override;
  void muon_apply(float* p, int64_t ldp, const float* x, int64_t rows, int64_t cols,
                  const float* factors, bool decay, const double* grad_scale) override;
  void copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
               int64_t cols) override;

  // Compiles (or finds) and runs the pending program; every part it wrote then holds its output
  // on the device. step_end: the caller's synchronize(), which ends a recorded step.
  void flush(bool step_end = false);

 private:
  // Every call but from_host builds on the pending program, which a replay's writes must not.
  void building(const char* call) const {
    LMT_CHECK(!replays_.capturing(),
              std::string("PjrtBackend::replay: the step's writes made a call that builds (") +
                  call + ")");
  }
  StablehloBuilder& b() {
    building("a kernel");
    return trace_.b();
  }
  Value view(const void* p, DType t, Dims dims, Dims strides = {}) {
    building("a kernel");
    return trace_.view(p, t, std::move(dims), std::move(strides));
  }
  void set(void* p, const Value& v, Dims strides = {}) { trace_.set(p, v, std::move(strides)); }
  void accumulate_into(void* y, DType dt, const Value& x) { trace_.accumulate_into(y, dt, x); }
  Value runtime_scalar(double v, DType dt, const std::string& name) {
    return trace_.runtime_scalar(v, dt, name);
  }

  // ---- precision ----
  // bf16 and f16 compute in f32 (as the CPU kernels accumulate); f32 and f64 as they are.
  static bool is_low_float(DType t) { return t == DType::bf16 || t == DType::f16; }
  static DType compute_type(DType dt) { return is_low_float(dt) ? DType::f32 : dt; }
  Value up(const Value& v) { return is_low_float(v.dtype) ? b().convert(v, DType::f32) : v; }
  Value down(const Value& v, DType dt) { return v.dtype == dt ? v : b().convert(v, dt); }
  // Saved statistics (rstd, mean, lse, losses): f64 when dt is f64, else f32.
  static DType stat_type(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }
  Value stat(const Value& v, DType dt) { return down(v, stat_type(dt)); }

  // The dims of the described tensor that n elements of t at p are exactly, else {n}: the
  // optimizers' elementwise steps then work on the tensor as it is, so XLA sees each update as
  // the tensor's own (a flat view's reshapes in between make it fuse worse: copies of moments).
  Dims shape_of(const void* p, DType t, int64_t n);

  // ---- attention pieces (backend_nn.cpp) ----
  // cuDNN's fused kernel (on the CUDA plugin, where it computes this attention) or XLA's lowering
  // (hlo::cudnn_attention_fallback's reason); the choice is kept for device().
  bool cudnn_attention(DType dt, const AttentionArgs& a);
  void set_attention_grads(DType dt, const AttentionArgs& a, void* dq, void* dk, void* dv,
                           const hlo::AttentionGrads& g);
  const Value* doc_start(const AttentionArgs& a);
  Value rows(const void* p, DType dt, const AttentionArgs& a, int64_t row, int64_t batch, int H);
  void set_rows(void* p, const AttentionArgs& a, int64_t row, int64_t batch, const Value& v);
  // x [N, H, D] from N token rows `row_stride` elements apart (RoPE, the q/k norm), and back.
  Value head_rows(const void* p, DType dt, int64_t N, int64_t row_stride, int64_t H, int64_t D);
  void set_head_rows(void* p, const Value& v, int64_t row_stride);
  // ---- device scalars (backend.h's double*), held as wide_ says (hlo::WideForm) ----
  Value wide_at(const double* p) {
    check_wide(p);
    return wide_ == hlo::WideForm::f64 ? view(p, DType::f64, {}) : view(p, DType::f32, {2});
  }
  Value wide_value_at(const double* p) { return hlo::wide_value(b(), wide_at(p)); }
  void set_wide(double* p, const Value& v) {
    check_wide(p);
    set(p, hlo::as_wide(b(), v, wide_));
  }
  void add_wide(double* acc, const Value& s);  // *acc += s, a wide value
  // Pairs: p is an element of a described f64 tensor, which the host reads as doubles.
  void check_wide(const double* p) {
    LMT_CHECK(wide_ == hlo::WideForm::f64 || tensors_.holds_pairs(p),
              "PjrtBackend: a device scalar (double*) on an accelerator must be described as f64 "
              "(Backend::describe) before a kernel uses it");
  }

  // clip_scale's device scalar as the f32 the optimizer steps multiply by.
  Value scale_f32(const double* grad_scale);
  // An optimizer kernel's factor i, and its decay factor (the constant 1 without decay).
  Value factor(const float* factors, int i);
  Value decay_factor(const float* factors, bool decay);

  PjrtClient client_;
  std::optional<CompileTarget> target_;  // a deviceless compile's
  // f64 on XLA:CPU; elsewhere f32 pairs, which tensors_ holds a described f64 tensor as and
  // from_host and to_host convert, so the host reads and writes doubles everywhere.
  hlo::WideForm wide_;
  PjrtTensors tensors_;
  PjrtTrace trace_;
  PjrtPrograms programs_;
  PjrtReplays replays_;
  bool replay_;  // steps are replayed (unless LMTRAIN_PJRT_TRACE_EVERY_STEP=1)
  Value doc_;
  std::string attention_;  // ProgramReport::attention
  bool deterministic_;     // PjrtOptions::deterministic: no cuDNN attention (its backward is not)
};

}  // namespace lmt
