#include "train/flops.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

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

std::optional<PeakFlops> nominal_peak(const DeviceSpec* spec, DType dt) {
  if (!spec) return std::nullopt;
  const bool bf16 = dt == DType::bf16;
  const double tflops = bf16 ? spec->bf16_tflops : spec->f32_tflops;
  return PeakFlops{tflops * 1e12,
                   fmt::format("the nominal dense {} peak of {}, {:.1f} TFLOP/s ({}docs/mfu.md)",
                               bf16 ? "bf16" : "f32", spec->chip, tflops,
                               bf16 ? "" : fmt::format("f32 products as {}; ", spec->f32_as))};
}

std::optional<PeakFlops> nominal_peak(const std::string& device_kind, DType dt) {
  return nominal_peak(device_spec_of_kind(device_kind), dt);
}

namespace {

// The measured peak: GEMMs large enough to reach the backend's peak (1024^3 reads a CPU's low),
// the best of several runs, as the machine may be shared.
constexpr int64_t kPeakGemmSize = 2048;
constexpr int kPeakGemmReps = 9;

// measure_gemm_peak once per process and backend setup: a process that starts several runs (a
// sweep, the test suite) measures at the first, not at every start (20 GEMMs of 2048^3 take about
// 1 s on a 2-core CPU). The setup is what the GEMM's speed depends on: the backend and its
// kernels (the CPU backend's libraries, the rule choosing them, their environment overrides), the
// device, how many, the dtype, the size and the OpenMP threads.
double measured_peak(Backend* be, const DeviceInfo& d, DType dt, int64_t n) {
  static std::mutex mu;
  static std::map<std::string, double> peaks;
  const std::string key =
      fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", be->name(), be->kernels(), d.platform, d.kind,
                  d.devices, dtype_name(dt), n, omp_get_max_threads());
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
  const DeviceInfo d = be->device();
  int64_t n = kPeakGemmSize;
  const double devices = static_cast<double>(std::max<int64_t>(d.devices, 1));
  auto times_devices = [&](PeakFlops p) {
    if (devices == 1) return p;
    return PeakFlops{p.flops * devices, fmt::format("{} devices x {}", d.devices, p.source)};
  };
  if (given_tflops > 0)
    return times_devices(
        PeakFlops{given_tflops * 1e12,
                  fmt::format("a peak of {} TFLOP/s (train.peak_tflops)", given_tflops)});
  if (std::optional<PeakFlops> p = nominal_peak(d.spec, dt)) return times_devices(*p);
  if (d.platform != "cpu") n = std::max<int64_t>(n, 4096);
  const double flops = measured_peak(be, d, dt, n);
  return times_devices(
      PeakFlops{flops, fmt::format("a measured peak of {:.1f} GFLOP/s (best {} GEMM {}x{}x{} on "
                                   "this backend{})",
                                   flops / 1e9, dt == DType::bf16 ? "bf16" : "f32", n, n, n,
                                   d.kind.empty() ? "" : ", " + d.kind)});
}

}  // namespace lmt
