// OptimizerSpec's checks and its name's defaults; see optimizer_spec.h.
#include "optim/optimizer_spec.h"

#include <limits>

namespace lmt {

void OptimizerSpec::validate() const {
  require_finite(*this, "optimizer.");
  require_choices(*this, "optimizer.");
  require(beta1 >= 0 && beta1 < 1, "optimizer.beta1", "in [0, 1)", beta1);
  require(beta2 >= 0 && beta2 < 1, "optimizer.beta2", "in [0, 1)", beta2);
  // The update divides by sqrt(v) + eps in f32: an eps that is 0 there (1e-46), or a subnormal
  // an accelerator flushes to 0, makes a zero gradient's update 0 / 0.
  require(eps >= std::numeric_limits<float>::min(), "optimizer.eps",
          ">= 1.18e-38 (the smallest normal f32: the update adds it in f32)", eps);
  require(momentum >= 0 && momentum < 1, "optimizer.momentum", "in [0, 1)", momentum);
  require(ns_steps >= 1 && ns_steps <= 100, "optimizer.ns_steps", "in [1, 100]", ns_steps);
}

OptimizerSpec optimizer_defaults(const std::string& name) {
  OptimizerSpec s;
  s.name = name;
  if (name == "lion") s.beta2 = 0.99;
  if (name == "muon") s.momentum = 0.95, s.nesterov = true;
  return s;
}

}  // namespace lmt
