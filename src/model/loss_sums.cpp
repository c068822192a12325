#include "model/loss_sums.h"

namespace lmt {

double* LossSums::objective() {
  if (!objective_.data()) {
    objective_ = Buffer(be_, sizeof(double));  // zeroed
    be_->describe(objective_.data(), TensorDesc{"loss_sum", DType::f64, {}});
  }
  return objective_.as<double>();
}

double* LossSums::cross_entropy() {
  if (plain_) return objective();
  if (!cross_entropy_.data()) {
    cross_entropy_ = Buffer(be_, sizeof(double));  // zeroed
    be_->describe(cross_entropy_.data(), TensorDesc{"ce_sum", DType::f64, {}});
  }
  return cross_entropy_.as<double>();
}

void LossSums::zero() {
  be_->zero(objective(), sizeof(double));
  if (!plain_) be_->zero(cross_entropy(), sizeof(double));
}

LossSum LossSums::read(int64_t tokens) {
  LossSum s;
  s.tokens = tokens;
  be_->to_host(&s.sum, objective(), sizeof(double));
  if (plain_)
    s.ce = s.sum;
  else
    be_->to_host(&s.ce, cross_entropy(), sizeof(double));
  return s;
}

void LossSums::copy_to(double* dst) {
  be_->copy(dst, objective(), sizeof(double));
  be_->copy(dst + 1, cross_entropy(), sizeof(double));
}

}  // namespace lmt
