// What one training step holds in memory, from the config alone, and the check that a run fits
// the machine before anything is allocated: a size the machine cannot hold is a user error naming
// the keys that set it, not a std::bad_alloc.
#pragma once

#include <cstdint>

#include "core/host_memory.h"  // physical_memory_bytes
#include "train/run_config.h"

namespace lmt {

// Bytes of one CPU training step; a term too large for 64 bits is UINT64_MAX.
struct TrainingMemory {
  uint64_t weights = 0;       // f32 flat buffer (alignment padding included), plus LoRA adapters
  uint64_t gradients = 0;     // of what trains: every weight, or the adapters alone
  uint64_t optimizer = 0;     // its state and scratch for what trains (optimizer_bytes)
  uint64_t activations = 0;   // the activation arena of one micro-batch
  uint64_t lora_scratch = 0;  // LoRA: the adapters' intermediate (and dropout) buffer
  uint64_t step_tokens = 0;   // ids, labels, document starts, positions of every micro-batch
  uint64_t total() const;
};

TrainingMemory training_memory(const RunConfig& cfg);

// Throws UserError when `training_memory(cfg)` exceeds `available` bytes (0: no check), naming
// the keys behind the largest term and both numbers.
void check_training_memory(const RunConfig& cfg, uint64_t available);

}  // namespace lmt
