#include "train/flops.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "backend/pjrt/pjrt_backend.h"
#include "core/rng.h"
#include "core/timer.h"

namespace lmt {

double train_flops_per_token(const ModelConfig& m, int64_t seq_len, int64_t matmul_params) {
  const double attn = 12.0 * static_cast<double>(m.num_hidden_layers) *
                      static_cast<double>(m.num_attention_heads * m.head_size()) *
                      static_cast<double>(seq_len);
  return 6.0 * static_cast<double>(matmul_params) + attn;
}

double train_flops_per_token(const Transformer& model, int64_t seq_len) {
  const ModelConfig& mc = model.config();
  // Parameters in matrix products: all but an untied input embedding and gpt2's position table
  // (lookups, not products).
  int64_t matmul_params = model.num_params();
  if (!mc.tie_word_embeddings) matmul_params -= mc.vocab_size * mc.hidden_size;
  if (mc.traits().learned_positions) matmul_params -= mc.max_position_embeddings * mc.hidden_size;
  const double full = train_flops_per_token(mc, seq_len, matmul_params);
  if (model.lora_targets().empty() && model.lora_saved().empty()) return full;
  // LoRA: the frozen base's products run forward and for the input gradient only (4 FLOPs per
  // parameter and token instead of 6); the adapters train fully (6), and a saved head
  // (modules_to_save) adds its weight gradient (2; saved norms and tables are no products).
  double lora_flops = 0;
  for (const LoraTarget& t : model.lora_targets())
    lora_flops += 6.0 * static_cast<double>(model.lora_params()[static_cast<size_t>(t.a)].numel() +
                                            model.lora_params()[static_cast<size_t>(t.b)].numel());
  for (const SavedParam& sp : model.lora_saved())
    if (sp.base_name == "lm_head.weight")
      lora_flops += 2.0 * static_cast<double>(mc.vocab_size * mc.hidden_size);
  return full - 2.0 * static_cast<double>(matmul_params) + lora_flops;
}

double measure_gemm_peak(Backend* be, DType dt, int64_t n, int reps) {
  const size_t bytes = static_cast<size_t>(n * n) * dtype_size(dt);
  Buffer a(be, bytes), b(be, bytes), c(be, bytes);
  std::vector<float> host(static_cast<size_t>(n * n));
  fill_normal(host.data(), n * n, 0.0, 1.0, 1, 1);
  std::vector<uint8_t> raw(bytes);
  for (int64_t i = 0; i < n * n; ++i)
    store_element(dt, raw.data(), i, host[static_cast<size_t>(i)]);
  be->from_host(a.data(), raw.data(), bytes);
  be->from_host(b.data(), raw.data(), bytes);
  double best = 1e30;
  for (int rep = 0; rep <= reps; ++rep) {  // best of reps: the machine may be shared
    Timer t;
    be->gemm(dt, false, true, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n);
    be->synchronize();
    if (rep > 0) best = std::min(best, t.seconds());  // the first one warms up
  }
  return 2.0 * static_cast<double>(n * n * n) / best;
}

namespace {

// The measured peak: GEMMs large enough to reach the backend's peak (1024^3 reads a CPU's low),
// the best of several runs, as the machine may be shared.
constexpr int64_t kPeakGemmSize = 2048;
constexpr int kPeakGemmReps = 9;

// Dense peaks in TFLOP/s (no structured sparsity): bf16 and what an f32 product runs as. Sources in
// docs/mfu.md. Matched by a part of the device kind, the first match taking it (the PCIe H100
// before the SXM one).
struct DevicePeak {
  const char* kind_part;
  const char* name;
  double bf16, f32;
  const char* f32_as;
};
constexpr DevicePeak kPeaks[] = {
    {"H100 PCIe", "NVIDIA H100 PCIe", 756.0, 378.0, "TF32"},
    {"H100", "NVIDIA H100 SXM", 989.4, 494.7, "TF32"},
    {"H200", "NVIDIA H200 SXM", 989.4, 494.7, "TF32"},
    {"A100", "NVIDIA A100", 312.0, 156.0, "TF32"},
    {"TPU v4", "Cloud TPU v4", 275.0, 275.0, "bf16 passes"},
    {"TPU v5 lite", "Cloud TPU v5e", 197.0, 197.0, "bf16 passes"},
    {"TPU v5e", "Cloud TPU v5e", 197.0, 197.0, "bf16 passes"},
    {"TPU v5p", "Cloud TPU v5p", 459.0, 459.0, "bf16 passes"},
    {"TPU v5", "Cloud TPU v5p", 459.0, 459.0, "bf16 passes"},
    {"TPU v6 lite", "Cloud TPU v6e", 918.0, 918.0, "bf16 passes"},
    {"TPU v6e", "Cloud TPU v6e", 918.0, 918.0, "bf16 passes"},
};

}  // namespace

std::optional<PeakFlops> nominal_peak(const std::string& device_kind, DType dt) {
  for (const DevicePeak& p : kPeaks) {
    if (device_kind.find(p.kind_part) == std::string::npos) continue;
    const bool bf16 = dt == DType::bf16;
    return PeakFlops{(bf16 ? p.bf16 : p.f32) * 1e12,
                     fmt::format("the nominal dense {} peak of {}, {:.1f} TFLOP/s ({}docs/mfu.md)",
                                 bf16 ? "bf16" : "f32", p.name, bf16 ? p.bf16 : p.f32,
                                 bf16 ? "" : fmt::format("f32 products as {}; ", p.f32_as))};
  }
  return std::nullopt;
}

namespace {

// measure_gemm_peak once per process and backend setup: a process that starts several runs (a
// sweep, the test suite) measures at the first, not at every start (20 GEMMs of 2048^3 take about
// 1 s on a 2-core CPU). The setup is what the GEMM's speed depends on: the backend and its
// kernels (the CPU backend's libraries, the rule choosing them, their environment overrides), the
// device, how many, the dtype, the size and the OpenMP threads.
double measured_peak(Backend* be, const PjrtBackendStats& st, DType dt, int64_t n) {
  static std::mutex mu;
  static std::map<std::string, double> peaks;
  const std::string key =
      fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", be->name(), be->kernels(), st.platform, st.device_kind,
                  st.devices, dtype_name(dt), n, omp_get_max_threads());
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = peaks.find(key); it != peaks.end()) return it->second;
  }
  const double flops = measure_gemm_peak(be, dt, n, kPeakGemmReps);
  std::lock_guard<std::mutex> lock(mu);
  return peaks.emplace(key, flops).first->second;
}

}  // namespace

// On a mesh the peak is the devices' together: the nominal peak times their number, or the GEMM,
// which runs whole on every device at once, timed as one and counted on each.
PeakFlops mfu_peak(Backend* be, DType dt, double given_tflops) {
  const PjrtBackendStats st = pjrt_backend_stats(*be);
  int64_t n = kPeakGemmSize;
  const double devices = static_cast<double>(std::max<int64_t>(st.devices, 1));
  auto times_devices = [&](PeakFlops p) {
    if (devices == 1) return p;
    return PeakFlops{p.flops * devices, fmt::format("{} devices x {}", st.devices, p.source)};
  };
  if (given_tflops > 0)
    return times_devices(
        PeakFlops{given_tflops * 1e12,
                  fmt::format("a peak of {} TFLOP/s (train.peak_tflops)", given_tflops)});
  if (be->name() == "pjrt") {
    if (std::optional<PeakFlops> p = nominal_peak(st.device_kind, dt)) return times_devices(*p);
    if (st.platform != "cpu") n = std::max<int64_t>(n, 4096);
  }
  const double flops = measured_peak(be, st, dt, n);
  return times_devices(
      PeakFlops{flops, fmt::format("a measured peak of {:.1f} GFLOP/s (best {} GEMM {}x{}x{} on "
                                   "this backend{})",
                                   flops / 1e9, dt == DType::bf16 ? "bf16" : "f32", n, n, n,
                                   st.device_kind.empty() ? "" : ", " + st.device_kind)});
}

}  // namespace lmt
