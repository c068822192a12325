// Dense algebra of the CPU backend: GEMM through OpenBLAS (row-major cblas) and oneDNN's matmul in
// f32, OpenBLAS in f64, and in bf16 (mixed precision) oneDNN's matmul on CPUs with bf16 matrix
// instructions (AVX512-BF16, AMX): bf16 operands, f32 accumulation, one rounding of the result.
// With LMTRAIN_CPU_BF16=emulate the same products run anywhere, widened to f32 through OpenBLAS:
// the same contract (a product of two bf16 values is exact in f32) at f32 speed, for tests of bf16
// runs on CPUs without those instructions. Which library computes an f32 product follows the
// machine and the product's shape class as measured (f32_engine, below): never the timings of the
// run, so a run's bits do not depend on them. The bias add and its backward: bias_backward reduces
// over rows by columns (each thread owns a slice of columns and walks the rows in order), so the
// result does not depend on the thread count.
#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#if LMTRAIN_HAVE_DNNL
#include <dnnl.hpp>
#endif

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"
#include "core/error.h"
#include "core/threads.h"

namespace lmt {

namespace {

bool fits_int(int64_t v) {
  return v >= 0 && v <= INT_MAX;
}

}  // namespace

namespace {

bool bf16_emulated() {
  const char* v = std::getenv("LMTRAIN_CPU_BF16");
  return v && std::string(v) == "emulate";
}

#if LMTRAIN_HAVE_DNNL
// oneDNN's name of the instruction set it dispatches to (ONEDNN_MAX_CPU_ISA may cap it).
std::string dnnl_isa_name(dnnl::cpu_isa isa) {
  using I = dnnl::cpu_isa;
  switch (isa) {
    case I::sse41:
      return "sse41";
    case I::avx:
      return "avx";
    case I::avx2:
      return "avx2";
    case I::avx2_vnni:
      return "avx2_vnni";
    case I::avx512_core:
      return "avx512_core";
    case I::avx512_core_vnni:
      return "avx512_core_vnni";
    case I::avx512_core_bf16:
      return "avx512_core_bf16";
    case I::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "isa " + std::to_string(static_cast<int>(isa));
  }
}

// Whether the ISA has bf16 dot products (AVX512-BF16; AMX's ISA includes it): oneDNN's ISA
// values are bit sets, each containing the ones below it.
bool dnnl_isa_has(dnnl::cpu_isa isa, dnnl::cpu_isa want) {
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}
bool dnnl_isa_has_bf16(dnnl::cpu_isa isa) {
  return dnnl_isa_has(isa, dnnl::cpu_isa::avx512_core_bf16);
}
#endif

// Whether OpenBLAS runs kernels of AVX2 or wider. Where it does not know the CPU (OpenBLAS 0.3.21
// on a Sapphire Rapids VM: "Prescott", SSE3) its f32 products run at a fifth of oneDNN's.
bool openblas_core_has_avx2() {
  std::string core = openblas_get_corename();
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* wide :
       {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"})
    if (core == wide) return true;
  return false;
}

// Which library computes the f32 products. LMTRAIN_CPU_GEMM=openblas|onednn chooses; otherwise the
// machine and the shape class do, as measured (docs/performance.md, 2026-11-26, 2-core Xeon with
// AVX-512 and AMX, lmtrain_bench's StepGemm products of GPT-2 124M and the demo Llama):
// - OpenBLAS without AVX2 kernels beside oneDNN with AVX2 or wider: oneDNN, 3-6x faster on each.
// - oneDNN on AVX-512 beside OpenBLAS's SkylakeX kernels: oneDNN for the forward product x Wᵀ
//   (1.03-1.31x) and for products with at most 512 columns (the demo's gradients: 1.07-1.37x);
//   OpenBLAS for the wide gradient products (GPT-2's: oneDNN 0.44-0.80x).
// - AVX2 (AMD Zen, 2026-11-26): OpenBLAS, faster on GPT-2's products taken together.
enum class F32Engine { openblas, onednn };

// The machine's side of the rule (f32_engine takes it once): which products oneDNN takes unless
// LMTRAIN_CPU_GEMM says otherwise.
enum class F32Rule { openblas, onednn, onednn_forward_and_narrow };

F32Rule machine_f32_rule() {
#if LMTRAIN_HAVE_DNNL
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (!openblas_core_has_avx2() && dnnl_isa_has(isa, dnnl::cpu_isa::avx2)) return F32Rule::onednn;
  if (dnnl_isa_has(isa, dnnl::cpu_isa::avx512_core)) return F32Rule::onednn_forward_and_narrow;
#endif
  return F32Rule::openblas;
}

const char* f32_engine_override() {
  const char* v = std::getenv("LMTRAIN_CPU_GEMM");
  return v && *v ? v : nullptr;
}

F32Engine f32_engine(bool trans_a, bool trans_b, int64_t N) {
  if (const char* v = f32_engine_override()) {
    const std::string e = v;
    if (e == "openblas") return F32Engine::openblas;
#if LMTRAIN_HAVE_DNNL
    if (e == "onednn") return F32Engine::onednn;
    throw UserError("LMTRAIN_CPU_GEMM=" + e + ": expected openblas or onednn");
#else
    throw UserError("LMTRAIN_CPU_GEMM=" + e +
                    ": this lmtrain was built without oneDNN; expected openblas");
#endif
  }
  static const F32Rule rule = machine_f32_rule();
  switch (rule) {
    case F32Rule::onednn:
      return F32Engine::onednn;
    case F32Rule::onednn_forward_and_narrow:
      return (!trans_a && trans_b) || N <= 512 ? F32Engine::onednn : F32Engine::openblas;
    case F32Rule::openblas:
      break;
  }
  return F32Engine::openblas;
}

// The rule in force as a person reads it, for `kernels`.
std::string f32_engine_rule() {
  if (const char* v = f32_engine_override())
    return std::string("f32: ") + v + " (LMTRAIN_CPU_GEMM)";
#if LMTRAIN_HAVE_DNNL
  const std::string onednn = "f32: oneDNN on " + dnnl_isa_name(dnnl::get_effective_cpu_isa());
  switch (machine_f32_rule()) {
    case F32Rule::onednn:
      return onednn + " (OpenBLAS's core has no AVX2 kernels)";
    case F32Rule::onednn_forward_and_narrow:
      return onednn + " for x Wt and products of at most 512 columns, OpenBLAS for the others";
    case F32Rule::openblas:
      break;
  }
#endif
  return "f32: OpenBLAS";
}

}  // namespace

// OpenBLAS picks its core kernels when it loads: the CPU's own, unless OPENBLAS_CORETYPE names
// others (some machines set it, holding OpenBLAS to AVX2 kernels on an AVX-512 CPU). oneDNN
// (bf16 products) picks its ISA when first used, capped by ONEDNN_MAX_CPU_ISA.
std::string CpuBackend::kernels() const {
  std::string s = std::string(openblas_get_config()) + "; core " + openblas_get_corename();
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  s += forced && *forced ? std::string(" (set by OPENBLAS_CORETYPE=") + forced + ")"
                         : " (this CPU's; OPENBLAS_CORETYPE unset)";
#if LMTRAIN_HAVE_DNNL
  const dnnl_version_t* v = dnnl_version();
  s += "; bf16: oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
       std::to_string(v->patch) + " on " + dnnl_isa_name(dnnl::get_effective_cpu_isa());
#endif
  if (bf16_emulated()) s += "; bf16 emulated (LMTRAIN_CPU_BF16=emulate: f32 products)";
  return s + "; " + f32_engine_rule();
}

// Asked before every bf16 product (the environment may change between them): the answer "yes"
// builds no message.
std::string CpuBackend::unsupported(DType dt) const {
  if (dt != DType::bf16 || bf16_emulated()) return "";
#if LMTRAIN_HAVE_DNNL
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (dnnl_isa_has_bf16(isa)) return "";
#endif
  const std::string how =
      " (use train.precision: f32, or train.backend: pjrt; LMTRAIN_CPU_BF16=emulate computes the "
      "same numbers with f32 products, slower than f32, for testing)";
#if LMTRAIN_HAVE_DNNL
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  return "bf16 on the CPU backend needs bf16 matrix instructions (AVX512-BF16 or AMX); this CPU "
         "offers oneDNN " +
         dnnl_isa_name(isa) +
         (cap && *cap ? std::string(" (capped by ONEDNN_MAX_CPU_ISA=") + cap + ")" : "") + how;
#else
  return "bf16 on the CPU backend needs oneDNN (Debian's libdnnl-dev), and this lmtrain was built "
         "without it" +
         how;
#endif
}

// oneDNN's products: its matmul primitives, one per shape and type (made once: creating one
// costs more than running a small one); and the widened operands of emulated bf16 products.
struct CpuBackend::DnnlGemm {
  using Key = std::tuple<bool, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         double, double>;
#if LMTRAIN_HAVE_DNNL
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, dnnl::matmul> primitives;
#endif
  std::vector<float> a, b, c;  // widened operands (emulation)
};

CpuBackend::CpuBackend() = default;
CpuBackend::~CpuBackend() = default;

namespace {

// rows x cols of bf16 at src (leading dimension ld) into dst, packed (leading dimension cols).
void widen(std::vector<float>& dst, const cpu::bf16* src, int64_t rows, int64_t cols, int64_t ld) {
  dst.resize(static_cast<size_t>(rows * cols));
  float* d = dst.data();
#pragma omp parallel for schedule(static) if (rows * cols >= cpu::kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) d[r * cols + c] = src[r * ld + c];
}

}  // namespace

void CpuBackend::gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           double alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                           double beta, void* C, int64_t ldc) {
  const std::string why = unsupported(DType::bf16);
  LMT_CHECK(why.empty(), "CpuBackend::gemm: " + why);
  if (!bf16_emulated()) {
    gemm_dnnl(true, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (!dnnl_) dnnl_ = std::make_unique<DnnlGemm>();
  DnnlGemm& g = *dnnl_;
  auto* c = static_cast<cpu::bf16*>(C);
  const auto* a = static_cast<const cpu::bf16*>(A);
  const auto* b = static_cast<const cpu::bf16*>(B);
  widen(g.a, a, trans_a ? K : M, trans_a ? M : K, lda);
  widen(g.b, b, trans_b ? N : K, trans_b ? K : N, ldb);
  if (beta != 0)
    widen(g.c, c, M, N, ldc);
  else
    g.c.assign(static_cast<size_t>(M * N), 0.0f);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), static_cast<float>(alpha), g.a.data(),
              static_cast<int>(trans_a ? M : K), g.b.data(), static_cast<int>(trans_b ? K : N),
              static_cast<float>(beta), g.c.data(), static_cast<int>(N));
  const float* w = g.c.data();
#pragma omp parallel for schedule(static) if (M * N >= cpu::kParallelMin)
  for (int64_t r = 0; r < M; ++r)
    for (int64_t j = 0; j < N; ++j) c[r * ldc + j] = w[r * N + j];
}

void CpuBackend::gemm_dnnl(bool is_bf16, bool trans_a, bool trans_b, int64_t M, int64_t N,
                           int64_t K, double alpha, const void* A, int64_t lda, const void* B,
                           int64_t ldb, double beta, void* C, int64_t ldc) {
#if LMTRAIN_HAVE_DNNL
  if (!dnnl_) dnnl_ = std::make_unique<DnnlGemm>();
  DnnlGemm& g = *dnnl_;
  using dnnl::memory;
  const memory::data_type dt = is_bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::desc a_md({M, K}, dt, trans_a ? memory::dims{1, lda} : memory::dims{lda, 1});
  const memory::desc b_md({K, N}, dt, trans_b ? memory::dims{1, ldb} : memory::dims{ldb, 1});
  const memory::desc c_md({M, N}, dt, memory::dims{ldc, 1});
  const DnnlGemm::Key key{is_bf16, trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta};
  auto it = g.primitives.find(key);
  if (it == g.primitives.end()) {
    dnnl::primitive_attr attr;
    if (alpha != 1) attr.set_output_scales(0, {static_cast<float>(alpha)});
    if (beta != 0) {
      dnnl::post_ops ops;
      ops.append_sum(static_cast<float>(beta));
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, g.engine);
    it = g.primitives.emplace(key, dnnl::matmul(pd)).first;
  }
  it->second.execute(g.stream, {{DNNL_ARG_SRC, memory(a_md, g.engine, const_cast<void*>(A))},
                                {DNNL_ARG_WEIGHTS, memory(b_md, g.engine, const_cast<void*>(B))},
                                {DNNL_ARG_DST, memory(c_md, g.engine, C)}});
  g.stream.wait();
#else
  (void)is_bf16, (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)alpha, (void)A,
      (void)lda, (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
  LMT_CHECK(false, "CpuBackend::gemm_dnnl: built without oneDNN");
#endif
}

void CpuBackend::gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                      double alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                      double beta, void* C, int64_t ldc) {
  LMT_CHECK(
      fits_int(M) && fits_int(N) && fits_int(K) && fits_int(lda) && fits_int(ldb) && fits_int(ldc),
      "CpuBackend::gemm: sizes must fit in a BLAS int");
  LMT_CHECK(ldc >= std::max<int64_t>(N, 1), "CpuBackend::gemm: ldc < N");
  LMT_CHECK(lda >= std::max<int64_t>(trans_a ? M : K, 1), "CpuBackend::gemm: lda too small");
  LMT_CHECK(ldb >= std::max<int64_t>(trans_b ? K : N, 1), "CpuBackend::gemm: ldb too small");
  if (M == 0 || N == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (const int n = thread_count(); n != blas_threads_) {  // train.threads, as set_threads set it
    openblas_set_num_threads(n);
    blas_threads_ = n;
  }
  if (dt == DType::bf16) {
    gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    gemm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  if (dt == DType::f32 && K > 0 && f32_engine(trans_a, trans_b, N) == F32Engine::onednn) {
    gemm_dnnl(false, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    gemm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
  cpu::dispatch_float(dt, "gemm", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha),
                  static_cast<const float*>(A), static_cast<int>(lda), static_cast<const float*>(B),
                  static_cast<int>(ldb), static_cast<float>(beta), static_cast<float*>(C),
                  static_cast<int>(ldc));
    } else {
      cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, static_cast<const double*>(A),
                  static_cast<int>(lda), static_cast<const double*>(B), static_cast<int>(ldb), beta,
                  static_cast<double*>(C), static_cast<int>(ldc));
    }
  });
  gemm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// out[N,O] += bias[O]
void CpuBackend::add_bias(DType dt, void* out, const void* bias, int64_t N, int64_t O) {
  cpu::dispatch_compute(dt, "add_bias", [&](auto tag) {
    using T = decltype(tag);
    T* y = static_cast<T*>(out);
    const T* b = static_cast<const T*>(bias);
#pragma omp parallel for schedule(static) if (N * O >= cpu::kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      T* row = y + n * O;
      for (int64_t o = 0; o < O; ++o) row[o] = row[o] + b[o];
    }
  });
}

// dbias[O] += sum over n of dout[N,O], accumulated in double per column in row order.
void CpuBackend::bias_backward(DType dt, void* dbias, const void* dout, int64_t N, int64_t O) {
  cpu::dispatch_compute(dt, "bias_backward", [&](auto tag) {
    using T = decltype(tag);
    T* db = static_cast<T*>(dbias);
    const T* dy = static_cast<const T*>(dout);
    constexpr int64_t kCols = 64;  // columns per work item
    const int64_t items = (O + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (N * O >= cpu::kParallelMin)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t c0 = it * kCols, nc = std::min(kCols, O - c0);
      double acc[kCols] = {};
      for (int64_t n = 0; n < N; ++n) {
        const T* row = dy + n * O + c0;
        for (int64_t c = 0; c < nc; ++c) acc[c] += static_cast<double>(row[c]);
      }
      for (int64_t c = 0; c < nc; ++c) db[c0 + c] = static_cast<T>(db[c0 + c] + acc[c]);
    }
  });
}

}  // namespace lmt
