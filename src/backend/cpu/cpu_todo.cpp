// Placeholders for kernels not written yet: each throws. Kernels move out of this file as they
// are implemented (file owned by the kernels work; delete it when empty).
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace lmt {

void CpuBackend::gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A, int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc) { LMT_CHECK(false, "CpuBackend::gemm not implemented yet");  }
void CpuBackend::add_bias(DType dt, void* out, const void* bias, int64_t N, int64_t O) { LMT_CHECK(false, "CpuBackend::add_bias not implemented yet");  }
void CpuBackend::bias_backward(DType dt, void* dbias, const void* dout, int64_t N, int64_t O) { LMT_CHECK(false, "CpuBackend::bias_backward not implemented yet");  }
void CpuBackend::add(DType dt, void* out, const void* a, const void* b, int64_t n) { LMT_CHECK(false, "CpuBackend::add not implemented yet");  }
void CpuBackend::accumulate(DType dt, void* y, const void* x, int64_t n) { LMT_CHECK(false, "CpuBackend::accumulate not implemented yet");  }
void CpuBackend::scale(DType dt, void* x, double s, int64_t n) { LMT_CHECK(false, "CpuBackend::scale not implemented yet");  }
double CpuBackend::sum_squares(DType dt, const void* x, int64_t n) { LMT_CHECK(false, "CpuBackend::sum_squares not implemented yet"); return 0; }
void CpuBackend::convert(DType dst_dt, void* dst, DType src_dt, const void* src, int64_t n) { LMT_CHECK(false, "CpuBackend::convert not implemented yet");  }
void CpuBackend::embedding_forward(DType dt, void* out, const int32_t* ids, const void* table, int64_t N, int64_t C) { LMT_CHECK(false, "CpuBackend::embedding_forward not implemented yet");  }
void CpuBackend::embedding_backward(DType dt, void* dtable, const void* dout, const int32_t* ids, int64_t N, int64_t C, int64_t V) { LMT_CHECK(false, "CpuBackend::embedding_backward not implemented yet");  }
void CpuBackend::rmsnorm_forward(DType dt, void* out, void* rstd, const void* x, const void* w, int64_t N, int64_t C, double eps, double w_offset) { LMT_CHECK(false, "CpuBackend::rmsnorm_forward not implemented yet");  }
void CpuBackend::rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout, const void* x, const void* w, const void* rstd, int64_t N, int64_t C, double w_offset) { LMT_CHECK(false, "CpuBackend::rmsnorm_backward not implemented yet");  }
void CpuBackend::layernorm_forward(DType dt, void* out, void* mean, void* rstd, const void* x, const void* w, const void* b, int64_t N, int64_t C, double eps) { LMT_CHECK(false, "CpuBackend::layernorm_forward not implemented yet");  }
void CpuBackend::layernorm_backward(DType dt, void* dx, void* dw, void* db, const void* dout, const void* x, const void* w, const void* mean, const void* rstd, int64_t N, int64_t C) { LMT_CHECK(false, "CpuBackend::layernorm_backward not implemented yet");  }
void CpuBackend::rope(DType dt, void* x, const int32_t* pos, const float* inv_freq, int64_t N, int64_t row_stride, int heads, int head_dim, int rotary_dim, double attn_factor, bool inverse) { LMT_CHECK(false, "CpuBackend::rope not implemented yet");  }
void CpuBackend::attention_forward(DType dt, const AttentionArgs& a, void* out, void* lse, const void* q, const void* k, const void* v) { LMT_CHECK(false, "CpuBackend::attention_forward not implemented yet");  }
void CpuBackend::attention_backward(DType dt, const AttentionArgs& a, void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k, const void* v, const void* out, const void* lse) { LMT_CHECK(false, "CpuBackend::attention_backward not implemented yet");  }
void CpuBackend::glu_forward(DType dt, Activation act, void* out, const void* gate_up, int64_t N, int64_t F) { LMT_CHECK(false, "CpuBackend::glu_forward not implemented yet");  }
void CpuBackend::glu_backward(DType dt, Activation act, void* dgate_up, const void* dout, const void* gate_up, int64_t N, int64_t F) { LMT_CHECK(false, "CpuBackend::glu_backward not implemented yet");  }
void CpuBackend::act_forward(DType dt, Activation act, void* out, const void* x, int64_t n) { LMT_CHECK(false, "CpuBackend::act_forward not implemented yet");  }
void CpuBackend::act_backward(DType dt, Activation act, void* dx, const void* dout, const void* x, int64_t n) { LMT_CHECK(false, "CpuBackend::act_backward not implemented yet");  }
void CpuBackend::cross_entropy(DType dt, void* logits, void* losses, const int32_t* labels, int64_t N, int64_t V, int32_t ignore_index, double grad_scale, double softcap) { LMT_CHECK(false, "CpuBackend::cross_entropy not implemented yet");  }

}  // namespace lmt
