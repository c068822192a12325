// The CPU backend: the reference implementation and the default. GEMMs go to OpenBLAS (bf16 ones
// to oneDNN); everything else is plain loops parallelised with OpenMP. Each kernel is a template
// over the element type (float for training, double for gradient checks, bf16 for mixed
// precision, computed in float) and dispatches on the runtime dtype.
// Reductions use a fixed partition of the work, so results are bit-identical run to run for a
// given thread count.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace lmt {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }
  // The host's cores through its own kernels: no device kind, nothing compiled.
  DeviceInfo device() const override {
    DeviceInfo d;
    d.platform = "cpu";
    return d;
  }
  std::string kernels() const override;
  std::string unsupported(DType dt) const override;

  void* alloc(size_t bytes) override;
  void free(void* p) override;
  void to_host(void* host_dst, const void* src, size_t bytes) override;
  void from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* p, size_t bytes) override;
  const void* host_address(const void* p) const override { return p; }
  double gemm_seconds() const override { return gemm_seconds_; }
  void reset_gemm_seconds() override { gemm_seconds_ = 0; }

  void gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
            const void* A, int64_t lda, const void* B, int64_t ldb, double beta, void* C,
            int64_t ldc) override;
  void add_bias(DType dt, void* out, const void* bias, int64_t N, int64_t O) override;
  void bias_backward(DType dt, void* dbias, const void* dout, int64_t N, int64_t O) override;

  void add(DType dt, void* out, const void* a, const void* b, int64_t n) override;
  void accumulate(DType dt, void* y, const void* x, int64_t n) override;
  void scale(DType dt, void* x, double s, int64_t n) override;
  void sum(DType dt, double* acc, const void* x, int64_t n) override;
  void sum_squares(DType dt, double* acc, const void* x, int64_t n) override;
  void dropout(DType dt, void* out, const void* x, int64_t n, double p, const uint64_t* key,
               uint64_t stream) override;
  void convert(DType dst_dt, void* dst, DType src_dt, const void* src, int64_t n) override;

  void embedding_forward(DType dt, void* out, const int32_t* ids, const void* table, int64_t N,
                         int64_t C, int64_t V) override;
  void embedding_backward(DType dt, void* dtable, const void* dout, const int32_t* ids, int64_t N,
                          int64_t C, int64_t V) override;

  void rmsnorm_forward(DType dt, void* out, void* rstd, const void* x, const void* w, int64_t N,
                       int64_t C, double eps, double w_offset) override;
  void rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout, const void* x,
                        const void* w, const void* rstd, int64_t N, int64_t C,
                        double w_offset) override;
  void head_rmsnorm_forward(DType dt, void* out, void* rstd, const void* x, const void* w,
                            int64_t N, int64_t row_stride, int heads, int head_dim, double eps,
                            double w_offset) override;
  void head_rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout, const void* x,
                             const void* w, const void* rstd, int64_t N, int64_t row_stride,
                             int heads, int head_dim, double w_offset) override;
  void layernorm_forward(DType dt, void* out, void* mean, void* rstd, const void* x, const void* w,
                         const void* b, int64_t N, int64_t C, double eps) override;
  void layernorm_backward(DType dt, void* dx, void* dw, void* db, const void* dout, const void* x,
                          const void* w, const void* mean, const void* rstd, int64_t N,
                          int64_t C) override;

  void rope(DType dt, void* x, const int32_t* pos, const float* inv_freq, int64_t N,
            int64_t row_stride, int heads, int head_dim, int rotary_dim, double attn_factor,
            bool inverse) override;

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
  // The chunked loss (Backend::head_loss), or the cut cross-entropy (cpu_cut_cross_entropy.cpp).
  void head_loss(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                 const int32_t* labels, double* loss_sum, void* dh, void* dw, void* logits,
                 void* losses, double* ce_sum = nullptr) override;

  void token_logprobs(DType dt, const void* logits, const int32_t* labels, int64_t N, int64_t V,
                      int32_t ignore_index, double softcap, void* logprobs, void* greedy) override;
  // Backend::head_logprobs's chunks, or a walk over vocabulary tiles (cpu_token_logprobs.cpp).
  void head_logprobs(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                     const int32_t* labels, void* logprobs, void* greedy, void* logits) override;

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

 private:
  struct DnnlGemm;
  void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                 const void* A, int64_t lda, const void* B, int64_t ldb, double beta, void* C,
                 int64_t ldc);
  // oneDNN's matmul in f32 (is_bf16 false) or bf16: one cached primitive per shape.
  void gemm_dnnl(bool is_bf16, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                 double alpha, const void* A, int64_t lda, const void* B, int64_t ldb, double beta,
                 void* C, int64_t ldc);

  int blas_threads_ = 0;  // what OpenBLAS was last told: follows thread_count()
  double gemm_seconds_ = 0;
  std::unique_ptr<DnnlGemm> dnnl_;  // made by the first product oneDNN computes
};

}  // namespace lmt
