// The table of devices (see devices.h). Peaks: docs/mfu.md; memory and links: docs/parallel.md.
#include "backend/devices.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "core/error.h"

namespace lmt {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// Dense peaks, TFLOP/s: bf16 and what an f32 product runs as.
struct Peaks {
  double bf16, f32;
  const char* f32_as;
};
constexpr Peaks tf32(double bf16, double tf32) {
  return {bf16, tf32, "TF32"};
}
constexpr Peaks bf16_passes(double bf16) {
  return {bf16, bf16, "bf16 passes"};
}

// HBM in GiB, a collective's bandwidth in GB/s per chip and one direction, and whence.
struct Memory {
  uint64_t gib;
  double link_gbs;
  const char* link_what;
};

DeviceSpec row(const char* key, std::vector<std::string> kinds, const char* name, const char* chip,
               Peaks p, Memory m, const char* target = "") {
  DeviceSpec d;
  d.key = key;
  d.kinds = std::move(kinds);
  d.name = name;
  d.chip = chip;
  d.bf16_tflops = p.bf16;
  d.f32_tflops = p.f32;
  d.f32_as = p.f32_as;
  d.bf16_flops = p.bf16 * 1e12;
  d.memory = m.gib * kGiB;
  d.link_bytes = m.link_gbs * 1e9;
  d.link_what = m.link_what;
  d.target = target;
  return d;
}

}  // namespace

// HBM: NVIDIA's "80GB" / "141GB" are binary (HBM stacks of 16 or 24 GiB); Cloud TPU's pages give
// GiB. Link: what a ring all-gather moves per chip and second in one direction, half the
// published bidirectional per-chip figure (NVLink 4: 900 GB/s; NVLink 3: 600 GB/s; Cloud TPU
// ICI), or for v4, whose page gives none per chip, its pod's all-reduce bandwidth per chip.
const std::vector<DeviceSpec>& device_specs() {
  static const std::vector<DeviceSpec> specs = {
      row("", {"H100 PCIe"}, "NVIDIA H100 PCIe", "NVIDIA H100 PCIe", tf32(756.0, 378.0),
          {0, 0, ""}),
      row("h100", {"H100"}, "NVIDIA H100 SXM", "NVIDIA H100 SXM", tf32(989.4, 494.7),
          {80, 450, "NVLink 4, 900 GB/s bidirectional"}, "h100_sxm"),
      row("h200", {"H200"}, "NVIDIA H200 SXM", "NVIDIA H200 SXM", tf32(989.4, 494.7),
          {141, 450, "NVLink 4, 900 GB/s bidirectional"}, "h200"),
      row("a100", {"A100"}, "NVIDIA A100 SXM 80GB", "NVIDIA A100", tf32(312.0, 156.0),
          {80, 300, "NVLink 3, 600 GB/s bidirectional"}),
      row("v4", {"TPU v4"}, "Cloud TPU v4", "Cloud TPU v4", bf16_passes(275.0),
          {32, 268.6, "all-reduce bandwidth per pod, 1.1 PB/s over 4096 chips"}),
      row("v5e", {"TPU v5 lite", "TPU v5e"}, "Cloud TPU v5e", "Cloud TPU v5e", bf16_passes(197.0),
          {16, 200, "ICI, 400 GB/s bidirectional"}),
      row("v5p", {"TPU v5p", "TPU v5"}, "Cloud TPU v5p", "Cloud TPU v5p", bf16_passes(459.0),
          {95, 600, "ICI, 1200 GB/s bidirectional"}),
      row("v6e", {"TPU v6 lite", "TPU v6e"}, "Cloud TPU v6e", "Cloud TPU v6e", bf16_passes(918.0),
          {32, 400, "ICI, 800 GB/s bidirectional"}),
  };
  return specs;
}

const DeviceSpec& device_spec(const std::string& key, const std::string& flag) {
  std::string k = key;
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return std::tolower(c); });
  if (k.rfind("tpu-", 0) == 0 || k.rfind("tpu_", 0) == 0) k = k.substr(4);
  std::string keys;
  for (const DeviceSpec& d : device_specs()) {
    if (d.key.empty()) continue;
    if (d.key == k) return d;
    keys += (keys.empty() ? "" : ", ") + d.key;
  }
  throw UserError(
      fmt::format("{} '{}' is not a device lmtrain knows (one of {})", flag, key, keys));
}

const DeviceSpec* device_spec_of_kind(const std::string& device_kind) {
  for (const DeviceSpec& d : device_specs())
    for (const std::string& part : d.kinds)
      if (device_kind.find(part) != std::string::npos) return &d;
  return nullptr;
}

}  // namespace lmt
