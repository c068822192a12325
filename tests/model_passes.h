// A Transformer's training pass with its loss read back, as tests check one batch: the loss sums
// that a training step owns made fresh for the batch (evaluation's counterpart is batch_loss in
// model/transformer.h).
#pragma once

#include <cstdint>

#include "model/transformer.h"

namespace lmt::test {

inline LossSum train_batch(Transformer& m, const int32_t* ids, const int32_t* labels, int64_t B,
                           int64_t T, double grad_scale,
                           const Transformer::Packing* packing = nullptr) {
  LossSums sums = m.make_loss_sums();
  sums.zero();
  const int64_t tokens = m.forward_backward(ids, labels, B, T, grad_scale, sums, packing);
  return sums.read(tokens);
}

}  // namespace lmt::test
