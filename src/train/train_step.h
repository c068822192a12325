// One optimizer step, as `lmtrain train` runs it and `lmtrain bench` times it: every micro-batch
// of the step gathered first (so the loss is the mean over every labelled token of the step,
// whatever its split into micro-batches), a forward and backward for each with the gradients
// accumulated, clipping and the update, and one read at the end (the gradient norm, then the loss
// sum): on pjrt the whole step is one program. A loss or gradient norm that is not finite is a
// NonFiniteError; the update was then skipped on the device.
//
// The step owns the loss sums its micro-batches add to (model/loss_sums.h). A step can also be
// launched and reported later (launch, report): its norm and loss sums are copied on the device
// into a slot of their own, so the next step can be queued before they are
// read. On pjrt the host then builds step s + 1 while the device runs step s, as JAX's
// asynchronous dispatch does; on the CPU backend launch runs the step and report only reads.
// Once the backend has built a step of a report slot, later steps of that slot are replayed
// (Backend::replay): launch makes only the step's writes from the host (the batches, the gradient
// scale, the dropout keys, the optimizer's factors) and the backend runs the program it built,
// where that is exactly what building the step would give.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <stdexcept>
#include <vector>

#include "backend/backend.h"
#include "data/loader.h"
#include "model/loss_sums.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/run_config.h"
#include "train/run_processes.h"

namespace lmt {

// Thrown when a step's loss or gradient norm is not finite; the CLI exits with kExitBadStep.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
constexpr int kExitBadStep = 3;

struct StepReport {
  double loss = 0;       // the objective's mean over the step's labelled tokens
  double ce = 0;         // the plain cross-entropy's (== loss for the plain loss)
  double grad_norm = 0;  // before clipping
  double lr = 0;         // the schedule's rate at this step
  int64_t tokens = 0;    // tokens fed: micro_batch_size * seq_len * grad_accum_steps
  // The host's time from launch()'s start until the backend queued the step's program (a
  // compiling backend); nullopt where the backend computes in its calls (the CPU backend).
  std::optional<double> host_seconds;
  bool replayed = false;  // the backend ran the program it built for an earlier step (replay)
};

class TrainStep {
 public:
  // model and opt must outlive the step, and processes, when given: a run across processes
  // (train/run_processes.h), where each batch is this rank's rows of the global batch
  // (micro_batch_size), placed at their rows, and the labelled tokens are summed over the ranks.
  TrainStep(Transformer& model, Optimizer& opt, const RunConfig& cfg,
            RunProcesses* processes = nullptr);

  // step: the optimizer steps done before this one (the schedule's position, the dropout masks'
  // stream, the step named in a NonFiniteError). next_micro_batch is called grad_accum_steps
  // times (Loader::next in training); each batch is copied before the next call.
  StepReport run(int64_t step, const std::function<const Batch&()>& next_micro_batch);

  // run() in two halves. launch queues the step (at most kMaxQueued unreported: the oldest must
  // be reported first); report gives the oldest queued step's report, waiting for its program,
  // or throws its NonFiniteError. Between them the model's weights are those of the newest
  // queued step: evaluate or save only with nothing queued.
  static constexpr int kMaxQueued = 2;
  // Steps worth queuing at once: kMaxQueued on a backend that runs them while the host builds
  // the next (pjrt), 1 on one that computes inside launch (the CPU backend: a step queued ahead
  // there only moves its time into the previous step's).
  int worth_queuing() const { return model_.backend()->asynchronous() ? kMaxQueued : 1; }
  void launch(int64_t step, const std::function<const Batch&()>& next_micro_batch);
  StepReport report();
  int queued() const { return static_cast<int>(queued_.size()); }
  // A run's steps in order: step `step`'s report, launching it first if it is not queued, and
  // queuing the steps after it while worth_queuing() allows and may_queue(s) says step s may start
  // before this report is read (not past an evaluation, a checkpoint or the end).
  StepReport advance(int64_t step, const std::function<const Batch&()>& next_micro_batch,
                     const std::function<bool(int64_t)>& may_queue);

 private:
  struct Queued {
    int64_t step;
    StepReport report;    // lr and tokens; loss and norm once read
    int64_t loss_tokens;  // the labelled tokens the loss sum is over
    int slot;             // slots_[slot]: [sum of squared gradients, loss sum, ce sum]
  };

  Transformer& model_;
  Optimizer& opt_;
  const TrainConfig tc_;
  RunProcesses* processes_;
  const int64_t B_, T_;
  const int64_t rows_, first_row_;  // the rows of a micro-batch this process feeds
  // The step's micro-batches, [grad_accum_steps, B, T] each; doc_start_ and positions_ are the
  // packed layout (data/packing.h), read with train.document_masking. Other ranks' rows stay
  // unlabelled here (their devices get theirs from their own process).
  std::vector<int32_t> ids_, labels_, doc_start_, positions_;
  LossSums loss_sums_;  // of the micro-batches of the step being queued
  Buffer slots_[kMaxQueued];  // device f64[3] each, one per queued step
  std::deque<Queued> queued_;
  int next_slot_ = 0;
};

}  // namespace lmt
