// Published figures of the accelerators `lmtrain info --mesh` plans for: memory per chip, the
// dense bf16 peak (nominal_peak's table, train/flops.cpp) and the bandwidth a collective gets per
// chip. Sources in docs/parallel.md; a figure here is a datasheet's, not a measurement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lmt {

struct DeviceSpec {
  std::string key;         // what --device takes: h100, h200, a100, v4, v5e, v5p, v6e
  std::string name;        // "NVIDIA H100 SXM", "Cloud TPU v5p"
  uint64_t memory = 0;     // HBM per chip, bytes
  double bf16_flops = 0;   // dense bf16 peak per chip, FLOP/s
  double link_bytes = 0;   // bytes/s a ring collective moves per chip, one direction
  std::string link_what;   // how link_bytes follows from the published figure
};

const std::vector<DeviceSpec>& device_specs();
// The spec of --device `key` (case-insensitive; "tpu-v5p" and "v5p" alike), or a UserError
// naming `flag` and the keys there are.
const DeviceSpec& device_spec(const std::string& key, const std::string& flag);

}  // namespace lmt
