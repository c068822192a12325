#include "train/train_step.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/packing.h"
#include "optim/schedule.h"

namespace lmt {

TrainStep::TrainStep(Transformer& model, Optimizer& opt, const RunConfig& cfg)
    : model_(model),
      opt_(opt),
      tc_(cfg.train),
      B_(cfg.train.micro_batch_size),
      T_(cfg.data.seq_len),
      ids_(static_cast<size_t>(B_ * T_ * tc_.grad_accum_steps)),
      labels_(ids_.size()),
      doc_start_(ids_.size()),
      positions_(ids_.size()) {}

StepReport TrainStep::run(int64_t step, const std::function<const Batch&()>& next_micro_batch) {
  const int64_t accum = tc_.grad_accum_steps, N = B_ * T_;
  StepReport r;
  r.lr = lr_at(tc_, step);
  r.tokens = N * accum;
  for (int64_t a = 0; a < accum; ++a) {
    const Batch& b = next_micro_batch();
    std::copy(b.ids.begin(), b.ids.end(), ids_.begin() + a * N);
    std::copy(b.labels.begin(), b.labels.end(), labels_.begin() + a * N);
    packed_layout(b.doc_starts, T_, &doc_start_[a * N], &positions_[a * N]);
  }
  int64_t labelled = 0;
  for (int32_t l : labels_) labelled += l != Transformer::kIgnoreIndex;
  if (labelled == 0) throw UserError("data: a training step has no labelled tokens");
  // The step reads nothing back until the norm after the update (one program on pjrt). A
  // non-finite loss makes a non-finite gradient, so the update was skipped on the device.
  model_.zero_grads();
  int64_t loss_tokens = 0;
  for (int64_t a = 0; a < accum; ++a) {
    const Transformer::Packing packing{&positions_[a * N], &doc_start_[a * N]};
    model_.set_dropout(static_cast<uint64_t>(tc_.seed), static_cast<uint64_t>(step * accum + a));
    loss_tokens += model_
                       .forward_backward(&ids_[a * N], &labels_[a * N], B_, T_,
                                         1.0 / static_cast<double>(labelled),
                                         tc_.document_masking ? &packing : nullptr, false)
                       .tokens;
  }
  opt_.step(static_cast<float*>(model_.trainable_data()),
            static_cast<float*>(model_.trainable_grads_data()), r.lr, tc_.grad_clip);
  model_.discard_grads();  // dead from here: on pjrt they stay inside the step's program
  r.grad_norm = opt_.finish_step();
  r.loss = model_.take_loss_sum() / static_cast<double>(loss_tokens);
  if (!std::isfinite(r.loss))
    throw NonFiniteError(
        fmt::format("step {}: the loss is {} (lr {:.3e}); no checkpoint was written from this step",
                    step + 1, r.loss, r.lr));
  if (!std::isfinite(r.grad_norm))
    throw NonFiniteError(fmt::format(
        "step {}: the gradient norm is {} (loss {:.4f}); no checkpoint was written from this step",
        step + 1, r.grad_norm, r.loss));
  return r;
}

}  // namespace lmt
