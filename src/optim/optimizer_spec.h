// The run config's `optimizer:` section, declared once (name, default, help, choices): visit()
// drives YAML reading, printing, saving and hashing, validate() checks it. make_optimizer takes it
// as it is, with train.weight_decay beside it (a key of the train section).
#pragma once

#include <cstdint>
#include <string>

#include "core/config_checks.h"

namespace lmt {

struct OptimizerSpec {
  std::string name = "adamw";
  double beta1 = 0.9;
  double beta2 = 0.95;  // lion: 0.99 (optimizer_defaults)
  double eps = 1e-8;
  double momentum = 0.9;  // muon: 0.95 (optimizer_defaults)
  bool nesterov = false;  // muon: true (optimizer_defaults)
  int64_t ns_steps = 5;
  bool decay_embeddings = false;
  bool decay_norms_and_biases = false;

  template <class V>
  void visit(V& v) {
    v("name", name,
      "adamw, lion (about 3-10x smaller lr, larger weight_decay), sgd (with momentum) or muon "
      "(hidden matrices; adamw for the rest)",
      {"adamw", "lion", "sgd", "muon"});
    v("beta1", beta1, "adamw: first-moment decay; lion: interpolation of the update's sign");
    v("beta2", beta2, "adamw: second-moment decay (0.95); lion: momentum decay (0.99)");
    v("eps", eps, "adamw: denominator epsilon");
    v("momentum", momentum, "sgd: momentum (0.9); muon: momentum (0.95)");
    v("nesterov", nesterov, "sgd and muon: Nesterov momentum (sgd: false; muon: true)");
    v("ns_steps", ns_steps, "muon: Newton-Schulz iterations");
    v("decay_embeddings", decay_embeddings, "apply weight decay to embeddings too");
    v("decay_norms_and_biases", decay_norms_and_biases, "apply weight decay to norms and biases");
  }

  // Throws UserError naming the first key (optimizer.<key>) whose value is out of range.
  void validate() const;
};

// The section's defaults for an optimizer of that name, which a config's keys then override:
// lion's beta2 is 0.99, muon's momentum 0.95 with Nesterov. (A config built in code that sets
// only the name keeps the plain defaults.) An unknown name gets the plain defaults; validate()
// refuses it.
OptimizerSpec optimizer_defaults(const std::string& name);

}  // namespace lmt
