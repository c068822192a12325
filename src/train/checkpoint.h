// Checkpoints: <run_dir>/checkpoints/step_NNNNNNN/ holding model.safetensors (Hugging Face
// names), optimizer.safetensors (the optimizer's state per parameter: exp_avg.<name> and
// exp_avg_sq.<name> for AdamW, momentum_buffer.<name> for SGD, ...), config.json (the model's
// shape), config.yaml (the resolved run config) and state.json (step, loader state, config hash).
// A checkpoint is written into a temporary directory and renamed into place, so a crash never
// leaves a directory that find_latest_checkpoint() would pick.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/transformer.h"
#include "optim/optimizer.h"

namespace lmt {

struct CheckpointState {
  int64_t step = 0;                 // optimizer steps done
  int64_t optimizer_step = 0;       // the optimizer's step count (AdamW's bias correction)
  std::string optimizer = "adamw";  // optimizer.name (state.json from before it: adamw)
  int64_t tokens = 0;               // tokens trained on
  nlohmann::json loader;            // the loader's state
  std::string config_hash;
  std::string tokenizer;
  // What the run trained on: the token store (data.store, or the one prepared into the run),
  // store_fingerprint() of it, and tokenizer_fingerprint() of data.tokenizer; empty in a
  // checkpoint from before they were recorded.
  std::string data_store, data_fingerprint, tokenizer_fingerprint;
  // LoRA runs: the frozen base the adapters belong to (train.init_from; empty: initialised from
  // train.seed) and base_weights_hash() of its weights. Such a checkpoint holds the adapters
  // (adapter_model.safetensors, adapter_config.json: a PEFT adapter directory), not the base.
  bool lora = false;
  std::string base_init_from, base_hash;
  // The divergence watch's range (LossWatch::state); null in a checkpoint from before it.
  nlohmann::json loss_watch;
};

// "fnv1a64:<hex>" of the base weights' bytes, as the model holds them.
std::string base_weights_hash(const Transformer& model);

// Whether `dir` is a LoRA run's checkpoint: adapters (a PEFT adapter directory), not a model.
bool is_lora_checkpoint(const std::string& dir);

// The model in `dir` for inference and export (f32): a Hugging Face directory or a checkpoint as
// load_hf_weights reads it, or, for a LoRA checkpoint, its base (the run's train.init_from, or
// the initialisation from its train.seed; checked against the hash the checkpoint recorded) with
// its adapters. `adapter`, when not empty, is a PEFT adapter directory put on the model.
std::unique_ptr<Transformer> load_model_for_inference(const std::string& dir,
                                                      const std::string& adapter, Backend* be);

// optimizer: the optimizer's state buffers (empty: none saved). Returns the checkpoint directory.
// Deletes the oldest ones beyond keep_last (0 keeps all), each renamed to a temporary name first,
// so that a kill mid-delete never leaves a damaged step_N.
std::string save_checkpoint(const std::string& run_dir, const Transformer& model,
                            const std::vector<StateBuffer>& optimizer, const CheckpointState& state,
                            const std::string& config_yaml, int64_t keep_last);

// A shared hold on a checkpoint directory while a command (export, generate) reads it: pruning
// leaves a held checkpoint for a later save to delete, so a run that saves and prunes never takes
// files away from under a reader. Released when destroyed (or when the process ends).
class CheckpointHold {
 public:
  CheckpointHold() = default;
  // False when `dir` is no longer there once held (a prune renamed it away first).
  bool take(const std::string& dir);
  ~CheckpointHold();
  CheckpointHold(const CheckpointHold&) = delete;
  CheckpointHold& operator=(const CheckpointHold&) = delete;

 private:
  int fd_ = -1;
};

// The newest checkpoint of a run, held (as find_latest_checkpoint finds it, taken again if a
// prune removes it before it is held); nullopt when the run has none.
std::optional<std::string> hold_latest_checkpoint(const std::string& run_dir, CheckpointHold& hold);

// checkpoints/protected.json of a run: checkpoints that pruning keeps whatever keep_last says
// (the newest from before a divergence warning), with why.
void protect_checkpoint(const std::string& run_dir, int64_t step, const std::string& why);
std::vector<int64_t> protected_checkpoints(const std::string& run_dir);

// Deletes the oldest checkpoints of a run beyond keep_last (0 keeps all), as save_checkpoint does;
// a checkpoint a reader holds (CheckpointHold) stays, for a later prune, and a protected one stays.
// Protected checkpoints do not count against keep_last.
void prune_checkpoints(const std::string& run_dir, int64_t keep_last);

// Removes checkpoints/.tmp-* of a run: saves and deletions that a killed process left unfinished.
// Call it only while holding the run directory's lock (one process writes a run's checkpoints).
void remove_checkpoint_leftovers(const std::string& run_dir);

// The newest checkpoint of a run (checkpoints/step_N), if any. Checkpoints appear whole (written
// under a temporary name, then renamed), so a newest one with a missing file, an unreadable
// state.json or a state.json whose step is not its directory's is a UserError naming it and the
// cause, never a silent fallback to an older one.
std::optional<std::string> find_latest_checkpoint(const std::string& run_dir);

// The checkpoint `name` (step_N under run_dir/checkpoints, or a path to one), checked as above;
// a name that is not there is a UserError listing the checkpoints that are.
std::string find_checkpoint(const std::string& run_dir, const std::string& name);

// Moves the run's checkpoints newer than `step` to checkpoints/abandoned/ (a resume from an
// older checkpoint starts another line; a later plain --resume must not pick the old one's end,
// and nothing is deleted). Returns their names, oldest first.
std::vector<std::string> set_aside_newer_checkpoints(const std::string& run_dir, int64_t step);

// The state.json of checkpoint `dir` as load_checkpoint returns it (counters, loader state, LoRA
// base), without the weights. A UserError naming the file when it is unreadable, not JSON or a
// field is missing or of the wrong type.
CheckpointState read_checkpoint_state(const std::string& dir);

// Loads weights (and the optimizer's state buffers, when given) into the model's and the
// optimizer's buffers; every tensor must be present with the model's shape. Returns state.json's
// contents.
// A checkpoint of another optimizer (state.json's "optimizer", adamw when absent) than
// `optimizer_name` is a UserError when state buffers are given.
// The directory is verified against its checksums.json while it loads (io/dir_checksums.h).
CheckpointState load_checkpoint(const std::string& dir, Transformer& model,
                                const std::vector<StateBuffer>& optimizer,
                                const std::string& optimizer_name = "adamw");
// The same without the checksums: only for the benchmark of what verifying them costs
// (bench/checkpoint_bench.cpp).
CheckpointState load_checkpoint_unverified(const std::string& dir, Transformer& model,
                                           const std::vector<StateBuffer>& optimizer,
                                           const std::string& optimizer_name = "adamw");

}  // namespace lmt
