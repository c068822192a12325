#include "backend/backend.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_info.h"
#include "backend/pjrt/backend.h"
#include "core/error.h"

namespace lmt {

// Chunk by chunk: logits = h w^T, their losses (summed into *loss_sum, the plain cross-entropies
// into *ce_sum), and with a gradient the logits become d/dlogits in place, which flow into dh and
// dw before the next chunk overwrites them.
void Backend::head_loss(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                        const int32_t* labels, double* loss_sum, void* dh, void* dw, void* logits,
                        void* losses, double* ce_sum) {
  LMT_CHECK(!a.cut(), "Backend::head_loss: this backend has no cut cross-entropy");
  const size_t es = dtype_size(dt);
  const DType stat = dt == DType::f64 ? DType::f64 : DType::f32;
  void* ce_losses =
      ce_sum ? static_cast<char*>(losses) + std::min(a.chunk, a.N) * dtype_size(stat) : nullptr;
  for (int64_t s = 0; s < a.N; s += a.chunk) {
    const int64_t n = std::min(a.chunk, a.N - s);
    const void* hs = static_cast<const char*>(h) + static_cast<size_t>(s * a.C) * es;
    gemm(dt, false, true, n, a.V, a.C, 1.0, hs, a.C, w, a.C, 0.0, logits, a.V);
    cross_entropy(dt, logits, losses, labels + s, n, a.V, a.ignore_index, a.grad_scale, a.softcap,
                  a.loss, ce_losses);
    sum(stat, loss_sum, losses, n);
    if (ce_sum) sum(stat, ce_sum, ce_losses, n);
    if (a.grad_scale == 0) continue;
    void* dhs = static_cast<char*>(dh) + static_cast<size_t>(s * a.C) * es;
    gemm(dt, false, false, n, a.C, a.V, 1.0, logits, a.V, w, a.C, 0.0, dhs, a.C);
    if (dw) gemm(dt, true, false, a.V, a.C, n, 1.0, logits, a.V, hs, a.C, 1.0, dw, a.C);
  }
}

// Chunk by chunk: logits = h w^T, then each row's score; the chunk's results land at its rows.
void Backend::head_logprobs(DType dt, const HeadLossArgs& a, const void* h, const void* w,
                            const int32_t* labels, void* logprobs, void* greedy, void* logits) {
  LMT_CHECK(!a.cut(), "Backend::head_logprobs: this backend has no vocabulary tiles");
  const size_t es = dtype_size(dt);
  const size_t ss = dtype_size(dt == DType::f64 ? DType::f64 : DType::f32);
  for (int64_t s = 0; s < a.N; s += a.chunk) {
    const int64_t n = std::min(a.chunk, a.N - s);
    const void* hs = static_cast<const char*>(h) + static_cast<size_t>(s * a.C) * es;
    gemm(dt, false, true, n, a.V, a.C, 1.0, hs, a.C, w, a.C, 0.0, logits, a.V);
    token_logprobs(dt, logits, labels + s, n, a.V, a.ignore_index, a.softcap,
                   static_cast<char*>(logprobs) + static_cast<size_t>(s) * ss,
                   static_cast<int32_t*>(greedy) + s);
  }
}

std::array<float, 3> adamw_factors(double lr, double beta1, double beta2, double weight_decay,
                                   int64_t step) {
  LMT_CHECK(step >= 1, "adamw_factors: step counts from 1");
  const double t = static_cast<double>(step);
  return {static_cast<float>(1.0 - lr * weight_decay),
          static_cast<float>(lr / (1.0 - std::pow(beta1, t))),
          static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2, t)))};
}

std::array<float, 2> decay_factors(double lr, double weight_decay) {
  return {static_cast<float>(1.0 - lr * weight_decay), static_cast<float>(lr)};
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options) {
  // "auto" is the CPU backend: a PJRT plugin is never chosen for the user (which plugin, which
  // devices), and there is no CUDA backend to choose.
  if (name == "cpu" || name == "auto") return std::make_unique<CpuBackend>();
  // GPUs are trained on through PJRT: src/backend/cuda holds the device query only.
  if (name == "cuda")
    throw UserError(
        "train.backend: 'cuda' is not a backend of lmtrain's own" +
        (cuda_built() ? " (" + cuda_device_summary() + ")" : std::string()) +
        ": GPUs are trained on through train.backend: pjrt with the CUDA PJRT plugin "
        "(train.pjrt_plugin: the .so the jax-cuda13-pjrt wheel installs; docs/pjrt.md)");
  if (name == "pjrt")
    return make_pjrt_backend(options.pjrt_plugin,
                             PjrtOptions{options.compile_only || options.target.has_value(),
                                         options.deterministic, options.mesh, options.devices,
                                         options.store, options.sharding, options.target});
  if (!options.mesh.single())
    throw UserError("parallel: a mesh of " + std::to_string(options.mesh.size()) +
                    " devices needs backend pjrt (it is '" + name + "')");
  throw UserError("train.backend: unknown backend '" + name +
                  "' (expected cpu, pjrt, cuda or auto)");
}

}  // namespace lmt
