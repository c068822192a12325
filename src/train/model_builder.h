// The model of a run, built one way for `lmtrain train`, `lmtrain bench` and `lmtrain info --pjrt`
// (through bench): a RunConfig becomes a backend, a Transformer with the run's memory settings,
// weights, LoRA adapters and precision, and its optimizer. The backend is made here and nowhere
// else in a run, so that what it runs on (one device today) is decided in one place.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/run_config.h"

namespace lmt {

// Where the weights start.
enum class StartFrom {
  nothing,  // left unset: the step is only compiled (bench --compile-only)
  seed,     // train.seed's initialisation, adapters from it too (bench)
  run,      // as a training run starts: train.init_from and lora.init_from where set, else seed
};

struct BuildOptions {
  StartFrom start = StartFrom::run;
  bool compile_only = false;  // a backend that compiles the step's programs and runs none
  std::string resume;         // a checkpoint to continue from: its weights and optimizer state
  // Compile for this GPU without it (backend pjrt through the CUDA plugin; compile_only).
  std::optional<CompileTarget> target = std::nullopt;
  // A run across processes: the store they met in (RunProcesses::store), which the backend's
  // client takes; null for one process.
  std::shared_ptr<DirectoryStore> store = nullptr;
};

struct BuiltModel {
  // Declared in this order so that they are destroyed optimizer, model, backend.
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<Optimizer> optimizer;
  std::string init_line;  // what the weights start from, for the run's log ("" when plain)
  std::string base_hash;  // LoRA: base_weights_hash() of the frozen base
  std::optional<CheckpointState> resumed;  // state.json of BuildOptions::resume
};

// The rows of logits the output head holds at once (train.loss_chunk_tokens; 0 chooses it from
// the memory there is): on a backend that computes as it is called (the CPU backend) 1024, its
// kernels' choice; on one that compiles the step, the whole micro-batch when its logits (or the
// cut loss's tiles) take at most an eighth of the memory the device gives programs (a compile
// target's allocator share, the plugin's limit, or the host's memory for XLA:CPU), else the
// largest power of two that does, at least 1024. Chunking trades kernel launches (a loop of
// chunks) against memory.
int64_t loss_chunk_rows(const RunConfig& cfg, const DeviceInfo& device);

// Throws UserError for a config the model cannot take and, with `resume`, for a checkpoint that
// does not fit the run (its message starts with "--resume: checkpoint 'DIR' ...").
BuiltModel build_model(const RunConfig& cfg, const BuildOptions& options);

// The frozen base a LoRA run trains adapters on: the Hugging Face model `init_from`, else the
// initialisation from `seed`. Checkpoint loading rebuilds a LoRA checkpoint's base with it.
void init_base_weights(Transformer& model, const std::string& init_from, int64_t seed);

}  // namespace lmt
