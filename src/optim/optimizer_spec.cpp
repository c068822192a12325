// OptimizerSpec's checks and its name's defaults; see optimizer_spec.h.
#include "optim/optimizer_spec.h"

namespace lmt {

void OptimizerSpec::validate() const {
  require_finite(*this, "optimizer.");
  require_choices(*this, "optimizer.");
  require(beta1 >= 0 && beta1 < 1, "optimizer.beta1", "in [0, 1)", beta1);
  require(beta2 >= 0 && beta2 < 1, "optimizer.beta2", "in [0, 1)", beta2);
  require(eps > 0, "optimizer.eps", "> 0", eps);
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
