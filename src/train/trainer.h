// The training loop: a run directory held by one process, the model built (model_builder.h) or
// resumed, then steps (train_step.h) with the step log, evaluation, atomic checkpoints and the
// end-of-run sample at their intervals, until max_steps or a stop signal; exact resume.
#pragma once

#include <cstdint>
#include <string>

#include "core/threads.h"  // set_threads: train.threads
#include "train/run_config.h"
#include "train/train_step.h"  // NonFiniteError, kExitBadStep

namespace lmt {

struct TrainResult {
  int64_t steps = 0;       // optimizer steps done at the end
  int64_t first_step = 0;  // the step this run started from (the checkpoint's, on --resume)
  double last_loss = 0;
  double last_val_loss = -1;  // -1: never evaluated
  double val_unigram_entropy = 0;
  std::string last_checkpoint;
  bool interrupted = false;  // stopped by a signal or by stop_after
  int signal = 0;            // the stop signal (SIGINT, SIGTERM, SIGHUP); 0: none
  int64_t replayed = 0;      // steps the backend ran from a recorded program (Backend::replay)
  bool writer = true;  // this process logged the run (false: a rank but 0 of several processes)
};

// stop_after > 0 ends the run early, with a checkpoint, once that many optimizer steps are done
// (as a SIGINT or SIGTERM does after the step in flight); the schedule still follows max_steps,
// so a later --resume continues exactly as if the run had never stopped.
// resume_from (with resume): a checkpoint's name (step_N) or path instead of the newest.
// A resume on another token store's content or another tokenizer than the checkpoint trained on
// is a UserError naming both, unless allow_data_change (train --allow-data-change).
// The metric sinks that record a run's end (W&B) get train_exit_code() of the result, or, when
// train() throws, the exit code lmtrain's main gives that exception.
TrainResult train(RunConfig cfg, bool resume, int64_t stop_after = 0,
                  const std::string& resume_from = "", bool allow_data_change = false);

// The exit code of `lmtrain train` for a run that returned: 0, or 128 + the stop signal (SIGINT's
// for a stop_after stop).
int train_exit_code(const TrainResult& r);

}  // namespace lmt
