// LoraSpec's scale and checks; see lora_spec.h.
#include "model/lora_spec.h"

#include <cmath>

namespace lmt {

double LoraSpec::scaling() const {
  const double r = static_cast<double>(rank);
  return use_rslora ? alpha / std::sqrt(r) : alpha / r;
}

void LoraSpec::validate() const {
  require_finite(*this, "lora.");
  require(rank >= 0, "lora.rank", ">= 0 (0 = full training)", rank);
  require(dropout >= 0 && dropout < 1, "lora.dropout", "in [0, 1)", dropout);
  require_choices(*this, "lora.");
  if (base_dtype != "f32" && rank == 0)
    throw UserError("lora.base_dtype: " + base_dtype +
                    " keeps a frozen base; it needs lora.rank > 0 (a model that trains in full "
                    "keeps f32 weights)");
}

}  // namespace lmt
