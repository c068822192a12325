// The loss of one or more passes summed on the device: the trained objective's sum and the plain
// cross-entropy's (one array for the plain loss), f64 scalars the output head adds to, so that
// nothing is read back before its owner wants it. The training step owns the sums of its
// micro-batches (read once, at the step's end); an evaluation owns those of its batches.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace lmt {

// Sum of per-token losses and the number of tokens that carry a label.
struct LossSum {
  double sum = 0;  // of the trained objective
  double ce = 0;   // of the plain cross-entropy (== sum for the plain loss)
  int64_t tokens = 0;
};

class LossSums {
 public:
  // plain: the objective is the plain cross-entropy, whose sum is then the objective's.
  // Allocates nothing until first used.
  LossSums(Backend* be, bool plain) : be_(be), plain_(plain) {}

  bool plain() const { return plain_; }
  // The device scalars (f64), made zero on first use: "loss_sum" and "ce_sum".
  double* objective();
  double* cross_entropy();  // objective() for the plain loss; null-free either way
  void zero();
  // Both sums read back, with `tokens` as the count.
  LossSum read(int64_t tokens);
  // Both sums copied on the device to dst[0] and dst[1] (f64), for a caller that reads them
  // later (TrainStep::launch).
  void copy_to(double* dst);

 private:
  Backend* be_;
  bool plain_;
  Buffer objective_, cross_entropy_;
};

}  // namespace lmt
