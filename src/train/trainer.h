// The training loop: micro-batches with gradient accumulation, a token-weighted mean loss over
// the whole optimizer step (so the result does not depend on how the step is split), clipping,
// AdamW, evaluation, metrics and atomic checkpoints, and exact resume.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/threads.h"  // set_threads: train.threads
#include "train/run_config.h"

namespace lmt {

struct TrainResult {
  int64_t steps = 0;        // optimizer steps done at the end
  int64_t first_step = 0;   // the step this run started from (the checkpoint's, on --resume)
  double last_loss = 0;
  double last_val_loss = -1;  // -1: never evaluated
  double val_unigram_entropy = 0;
  std::string last_checkpoint;
  bool interrupted = false;  // stopped before max_steps (signal or stop_after)
};

// Thrown when a step's loss or gradient norm is not finite; the CLI exits with kExitBadStep.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
constexpr int kExitBadStep = 3;

// stop_after > 0 ends the run early, with a checkpoint, once that many optimizer steps are done
// (as a SIGINT or SIGTERM does after the step in flight); the schedule still follows max_steps,
// so a later --resume continues exactly as if the run had never stopped.
// resume_from (with resume): a checkpoint's name (step_N) or path instead of the newest.
TrainResult train(RunConfig cfg, bool resume, int64_t stop_after = 0,
                  const std::string& resume_from = "");

}  // namespace lmt
