#include "train/device_specs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "train/flops.h"

namespace lmt {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// The peak comes from nominal_peak (docs/mfu.md), by a device kind its table matches.
DeviceSpec spec(const char* key, const char* kind, const char* name, uint64_t gib, double link_gbs,
                const char* link_what) {
  const std::optional<PeakFlops> p = nominal_peak(kind, DType::bf16);
  LMT_CHECK(p.has_value(), std::string("device_specs: no peak for ") + kind);
  return DeviceSpec{key, name, gib * kGiB, p->flops, link_gbs * 1e9, link_what};
}

}  // namespace

const std::vector<DeviceSpec>& device_specs() {
  // HBM: NVIDIA's "80GB" / "141GB" are binary (HBM stacks of 16 or 24 GiB); Cloud TPU's pages
  // give GiB. Link: what a ring all-gather moves per chip and second in one direction, half the
  // published bidirectional per-chip figure (NVLink 4: 900 GB/s; NVLink 3: 600 GB/s; Cloud TPU
  // ICI), or for v4, whose page gives none per chip, its pod's all-reduce bandwidth per chip.
  static const std::vector<DeviceSpec> specs = {
      spec("h100", "H100", "NVIDIA H100 SXM", 80, 450, "NVLink 4, 900 GB/s bidirectional"),
      spec("h200", "H200", "NVIDIA H200 SXM", 141, 450, "NVLink 4, 900 GB/s bidirectional"),
      spec("a100", "A100", "NVIDIA A100 SXM 80GB", 80, 300, "NVLink 3, 600 GB/s bidirectional"),
      spec("v4", "TPU v4", "Cloud TPU v4", 32, 268.6,
           "all-reduce bandwidth per pod, 1.1 PB/s over 4096 chips"),
      spec("v5e", "TPU v5e", "Cloud TPU v5e", 16, 200, "ICI, 400 GB/s bidirectional"),
      spec("v5p", "TPU v5p", "Cloud TPU v5p", 95, 600, "ICI, 1200 GB/s bidirectional"),
      spec("v6e", "TPU v6e", "Cloud TPU v6e", 32, 400, "ICI, 800 GB/s bidirectional"),
  };
  return specs;
}

const DeviceSpec& device_spec(const std::string& key, const std::string& flag) {
  std::string k = key;
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return std::tolower(c); });
  if (k.rfind("tpu-", 0) == 0 || k.rfind("tpu_", 0) == 0) k = k.substr(4);
  std::string keys;
  for (const DeviceSpec& d : device_specs()) {
    if (d.key == k) return d;
    keys += (keys.empty() ? "" : ", ") + d.key;
  }
  throw UserError(fmt::format("{} '{}' is not a device lmtrain knows (one of {})", flag, key, keys));
}

}  // namespace lmt
