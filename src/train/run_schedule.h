// When a run evaluates and writes checkpoints: one rule for every point of the run, read by the
// training loop (what to do after a step) and by the step queue (whether the host needs the model
// after a step, so that the next step may not be queued before it).
#pragma once

#include <cstdint>

namespace lmt {

struct RunSchedule {
  int64_t max_steps = 0, eval_every = 0, save_every = 0;  // train.* (0: never)

  // What follows the step that brings the run to `steps` steps done.
  struct Point {
    bool evaluate = false;  // the run's evaluation (it has none without validation samples)
    bool save = false;      // a checkpoint
    // The order of the two. Within the run the evaluation comes first: a checkpoint at step N
    // then means step N's evaluation is logged, so a run killed and resumed logs what an
    // uninterrupted one does. At the end the checkpoint comes first: a signal during the final
    // evaluation (or a scheduler's SIGKILL after it) then costs nothing but the evaluation.
    bool save_first = false;
    bool any() const { return evaluate || save; }
  };

  Point at(int64_t steps) const {
    if (steps == max_steps) return {true, true, true};
    return {eval_every > 0 && steps % eval_every == 0, save_every > 0 && steps % save_every == 0,
            false};
  }
};

}  // namespace lmt
