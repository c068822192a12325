// A training step on paper, for a mesh lmtrain cannot run here: the collectives the sharding plan
// implies with the bytes each moves per device, a step time estimated from FLOPs, bytes moved and
// a device's published peaks (backend/devices.h), and the smallest mesh whose step fits a device.
// Estimates, not measurements: docs/parallel.md says what each assumes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/devices.h"
#include "backend/mesh.h"
#include "model/model_config.h"
#include "train/step_memory.h"

namespace lmt {

struct Collective {
  std::string key;    // in JSON
  std::string what;   // "fsdp all-gather of each layer's weights, forward"
  std::string axis;   // data, fsdp or tensor
  int64_t count = 0;  // per step
  uint64_t bytes = 0;  // each device sends per step, all `count` together (ring algorithms)
  bool exposed = false;  // on the critical path (tensor all-reduces): not overlapped with compute
};

// Per step, per device; empty where every axis is 1.
std::vector<Collective> step_collectives(const ModelConfig& cfg, const StepShape& shape,
                                         const Mesh& mesh);

struct StepTime {
  double flops_per_device = 0;  // model FLOPs of one step (6 N + attention per token)
  double compute_s = 0;         // flops / (bf16 peak x mfu)
  double overlapped_s = 0;      // fsdp and data collectives at the link bandwidth
  double exposed_s = 0;         // tensor all-reduces at the link bandwidth
  double step_s = 0;            // max(compute, overlapped) + exposed
  double tokens_per_s_per_device = 0;
};
StepTime estimate_step_time(const ModelConfig& cfg, const StepShape& shape, const Mesh& mesh,
                            const std::vector<Collective>& collectives, const DeviceSpec& device,
                            double mfu);

// The smallest mesh (fewest devices fsdp x tensor, data 1; then the faster) on which the step
// fits the device's memory, with `per_device_batch` sequences on each fsdp device; searched over
// tensor in the divisors of heads, key/value heads, intermediate and vocabulary sizes and fsdp in
// the divisors of hidden_size, up to max_devices. found false where none fits.
struct MeshFit {
  bool found = false;
  Mesh mesh;
  StepMemory memory;
  int64_t micro_batch = 0;
};
MeshFit smallest_fitting_mesh(const ModelConfig& cfg, StepShape shape, int64_t per_device_batch,
                              const DeviceSpec& device, int64_t max_devices = 65536);

}  // namespace lmt
