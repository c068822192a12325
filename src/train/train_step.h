// One optimizer step, as `lmtrain train` runs it and `lmtrain bench` times it: every micro-batch
// of the step gathered first (so the loss is the mean over every labelled token of the step,
// whatever its split into micro-batches), a forward and backward for each with the gradients
// accumulated, clipping and the update, and one read at the end (the gradient norm, then the loss
// sum): on pjrt the whole step is one program. A loss or gradient norm that is not finite is a
// NonFiniteError; the update was then skipped on the device.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include "data/loader.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/run_config.h"

namespace lmt {

// Thrown when a step's loss or gradient norm is not finite; the CLI exits with kExitBadStep.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
constexpr int kExitBadStep = 3;

struct StepReport {
  double loss = 0;       // mean over the step's labelled tokens
  double grad_norm = 0;  // before clipping
  double lr = 0;         // the schedule's rate at this step
  int64_t tokens = 0;    // tokens fed: micro_batch_size * seq_len * grad_accum_steps
};

class TrainStep {
 public:
  // model and opt must outlive the step.
  TrainStep(Transformer& model, Optimizer& opt, const RunConfig& cfg);

  // step: the optimizer steps done before this one (the schedule's position, the dropout masks'
  // stream, the step named in a NonFiniteError). next_micro_batch is called grad_accum_steps
  // times (Loader::next in training); each batch is copied before the next call.
  StepReport run(int64_t step, const std::function<const Batch&()>& next_micro_batch);

 private:
  Transformer& model_;
  Optimizer& opt_;
  const TrainConfig tc_;
  const int64_t B_, T_;
  // The step's micro-batches, [grad_accum_steps, B, T] each; doc_start_ and positions_ are the
  // packed layout (data/packing.h), read with train.document_masking.
  std::vector<int32_t> ids_, labels_, doc_start_, positions_;
};

}  // namespace lmt
