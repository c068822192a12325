#include "train/train_step.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "data/packing.h"
#include "optim/schedule.h"

namespace lmt {

TrainStep::TrainStep(Transformer& model, Optimizer& opt, const RunConfig& cfg,
                     RunProcesses* processes)
    : model_(model),
      opt_(opt),
      tc_(cfg.train),
      processes_(processes),
      B_(cfg.train.micro_batch_size),
      T_(cfg.data.seq_len),
      rows_(processes ? processes->rows(B_) : B_),
      first_row_(processes ? processes->first_row(B_) : 0),
      ids_(static_cast<size_t>(B_ * T_ * tc_.grad_accum_steps)),
      labels_(ids_.size(), Transformer::kIgnoreIndex),
      doc_start_(ids_.size()),
      positions_(ids_.size()),
      loss_sums_(model.make_loss_sums()) {
  Backend* be = model_.backend();
  for (int i = 0; i < kMaxQueued; ++i) {
    slots_[i] = Buffer(be, 3 * sizeof(double));
    be->describe(slots_[i].data(), TensorDesc{"step_report." + std::to_string(i), DType::f64, {3}});
  }
}

StepReport TrainStep::run(int64_t step, const std::function<const Batch&()>& next_micro_batch) {
  launch(step, next_micro_batch);
  return report();
}

void TrainStep::launch(int64_t step, const std::function<const Batch&()>& next_micro_batch) {
  LMT_CHECK(queued() < kMaxQueued, "TrainStep::launch: too many steps queued");
  const auto start = std::chrono::steady_clock::now();
  const int64_t accum = tc_.grad_accum_steps, N = B_ * T_;
  Queued q{step, {}, 0, next_slot_};
  next_slot_ = (next_slot_ + 1) % kMaxQueued;
  q.report.lr = lr_at(tc_, step);
  q.report.tokens = N * accum;
  for (int64_t a = 0; a < accum; ++a) {
    const Batch& b = next_micro_batch();
    LMT_CHECK(static_cast<int64_t>(b.ids.size()) == rows_ * T_,
              "TrainStep: a micro-batch of " + std::to_string(b.ids.size()) + " tokens, not " +
                  std::to_string(rows_) + " rows of " + std::to_string(T_));
    const int64_t at = a * N + first_row_ * T_;
    std::copy(b.ids.begin(), b.ids.end(), ids_.begin() + at);
    std::copy(b.labels.begin(), b.labels.end(), labels_.begin() + at);
    packed_layout(b.doc_starts, T_, &doc_start_[at], &positions_[at]);
  }
  int64_t labelled = 0;
  for (int32_t l : labels_) labelled += l != Transformer::kIgnoreIndex;
  if (processes_)
    labelled = processes_->sum(fmt::format("labelled tokens of step {}", step + 1), labelled);
  if (labelled == 0) throw UserError("data: a training step has no labelled tokens");
  const double grad_scale = 1.0 / static_cast<double>(labelled);
  auto packing = [&](int64_t a) {
    return Transformer::Packing{&positions_[a * N], &doc_start_[a * N]};
  };
  auto set_dropout = [&](int64_t a) {
    model_.set_dropout(static_cast<uint64_t>(tc_.seed), static_cast<uint64_t>(step * accum + a));
  };
  // A replayed step (the backend built this step's program before, and would build the same one
  // now) makes only the step's writes from the host, in the order the step below makes them.
  auto writes = [&] {
    for (int64_t a = 0; a < accum; ++a) {
      const Transformer::Packing p = packing(a);
      set_dropout(a);
      q.loss_tokens += model_.write_inputs(&ids_[a * N], &labels_[a * N], B_, T_, grad_scale,
                                           tc_.document_masking ? &p : nullptr);
    }
    opt_.write_step(q.report.lr);
  };
  Backend* be = model_.backend();
  q.report.replayed = be->replay(q.slot, writes);
  if (!q.report.replayed) {
    // The step reads nothing back (one program on pjrt). A non-finite loss makes a non-finite
    // gradient, so the update is skipped on the device.
    be->record(q.slot);
    model_.zero_grads();
    loss_sums_.zero();
    for (int64_t a = 0; a < accum; ++a) {
      const Transformer::Packing p = packing(a);
      set_dropout(a);
      q.loss_tokens += model_.forward_backward(&ids_[a * N], &labels_[a * N], B_, T_, grad_scale,
                                               loss_sums_, tc_.document_masking ? &p : nullptr);
    }
    opt_.step(static_cast<float*>(model_.trainable_data()),
              static_cast<float*>(model_.trainable_grads_data()), q.report.lr, tc_.grad_clip);
    model_.discard_grads();  // dead from here: on pjrt they stay inside the step's program
    auto* slot = slots_[q.slot].as<double>();
    opt_.copy_sum_squares(slot);
    loss_sums_.copy_to(slot + 1);
    be->synchronize();  // pjrt: the step's program starts; nothing waits for it
  }
  // The loss sums are the global program's, over every rank's rows.
  if (processes_ && processes_->group().several()) q.loss_tokens = labelled;
  if (const auto at = be->last_launch(); at && *at >= start)
    q.report.host_seconds = std::chrono::duration<double>(*at - start).count();
  queued_.push_back(q);
}

StepReport TrainStep::advance(int64_t step, const std::function<const Batch&()>& next_micro_batch,
                              const std::function<bool(int64_t)>& may_queue) {
  if (queued_.empty()) launch(step, next_micro_batch);
  LMT_CHECK(queued_.front().step == step,
            "TrainStep::advance: step " + std::to_string(step) + " is not the oldest queued");
  for (int64_t s = queued_.back().step + 1; queued() < worth_queuing() && may_queue(s); ++s)
    launch(s, next_micro_batch);
  return report();
}

StepReport TrainStep::report() {
  LMT_CHECK(!queued_.empty(), "TrainStep::report: no step queued");
  Queued q = queued_.front();
  queued_.pop_front();
  double read[3] = {0, 0, 0};
  model_.backend()->to_host(read, slots_[q.slot].data(), sizeof(read));
  StepReport& r = q.report;
  r.grad_norm = std::sqrt(read[0]);
  opt_.confirm_step(std::isfinite(r.grad_norm));
  r.loss = read[1] / static_cast<double>(q.loss_tokens);
  r.ce = read[2] / static_cast<double>(q.loss_tokens);
  if (!std::isfinite(r.loss))
    throw NonFiniteError(
        fmt::format("step {}: the loss is {} (lr {:.3e}); no checkpoint was written from this step",
                    q.step + 1, r.loss, r.lr));
  if (!std::isfinite(r.grad_norm))
    throw NonFiniteError(fmt::format(
        "step {}: the gradient norm is {} (loss {:.4f}); no checkpoint was written from this step",
        q.step + 1, r.grad_norm, r.loss));
  return r;
}

}  // namespace lmt
