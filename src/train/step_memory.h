// What one pjrt training step needs of each device, from the config alone: an analytic model of
// the program the model code traces (src/model/transformer.cpp and the pjrt backend's lowerings,
// its hlo/ folder), term by term, divided over a mesh by the sharding plan (model/sharding_plan.h).
//
// The step is one program: its arguments are the state it updates (f32 weights, the optimizer's
// moments) and the batch; its temporaries peak either where the loss head runs (every layer's
// saved activations, or with checkpointing one residual stream per layer boundary, plus the head's
// chunk of logits) or at the end of the backward (every gradient, plus one layer's working set).
// The temporaries are the larger of the two. Two targets: XLA:CPU, whose plan a test compares
// with the compiled figure (it widens bf16 to f32 and packs a checkpointed step with some slack,
// both measured from its buffer assignments), and an accelerator (GPU/TPU: activations in the
// compute dtype, no widening), which `lmtrain info --mesh` plans for. docs/parallel.md has the
// terms and how far each is from a compiled plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/mesh.h"
#include "model/model_config.h"

namespace lmt {

struct StepShape {
  int64_t micro_batch = 1;  // sequences of the whole mesh (train.micro_batch_size)
  int64_t seq_len = 1;
  bool checkpointing = false;
  bool bf16 = false;           // train.precision: bf16
  std::string optimizer = "adamw";
  int64_t loss_chunk = 1024;   // train.loss_chunk_tokens
  int64_t vocab_tile = 0;      // loss.vocab_tile of the cut loss (loss.impl: cut), else 0
};

enum class StepTarget { xla_cpu, accelerator };

// One named term of a device's memory, in bytes.
struct MemoryTerm {
  std::string key;   // in JSON
  std::string what;  // in the table
  uint64_t bytes = 0;
};

struct StepMemory {
  std::vector<MemoryTerm> arguments;    // weights, optimizer state, batch
  std::vector<MemoryTerm> at_head;      // live where the loss head runs
  std::vector<MemoryTerm> at_backward;  // live at the end of the backward
  uint64_t argument_bytes = 0, head_bytes = 0, backward_bytes = 0;
  uint64_t temp_bytes() const { return head_bytes > backward_bytes ? head_bytes : backward_bytes; }
  uint64_t total_bytes() const { return argument_bytes + temp_bytes(); }
  bool peak_at_head() const { return head_bytes >= backward_bytes; }
};

// Per-device elements of the parameters (and of each gradient / moment, which follow them) on
// `mesh`, and of those the plan splits over fsdp (one layer's worth is gathered at a time).
struct ParamShards {
  int64_t total = 0;         // elements every device holds of all parameters
  int64_t moments = 0;       // optimizer-state elements per device (AdamW 2 a parameter, ...)
  int64_t layer_gathered = 0;  // one layer's parameters after the fsdp all-gather (tensor-split)
  int64_t replicated = 0;      // elements of tensors the plan keeps whole on every device
};
ParamShards param_shards(const ModelConfig& cfg, const Mesh& mesh, const std::string& optimizer);

// The step's memory per device. The shape and mesh must divide (check_mesh).
StepMemory step_memory(const ModelConfig& cfg, const StepShape& shape, const Mesh& mesh,
                       StepTarget target);

// Throws UserError naming `flag` when an axis of `mesh` does not divide what the plan splits
// over it (fsdp: hidden_size; tensor: heads, key/value heads, intermediate_size, vocab_size;
// data x fsdp: the micro-batch).
void check_mesh(const ModelConfig& cfg, const Mesh& mesh, int64_t micro_batch,
                const std::string& flag);

// "data=2,fsdp=4,tensor=2" (any order, any subset; sizes >= 1) as a mesh with the axes data,
// fsdp, tensor; a UserError naming `flag` otherwise.
Mesh parse_mesh(const std::string& text, const std::string& flag);

}  // namespace lmt
