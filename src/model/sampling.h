// Choosing the next token from logits: temperature, top-k and top-p (nucleus) filtering, drawn
// with the counter-based Rng so a seed reproduces a sample exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace lmt {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy (argmax)
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // 1: no limit
};

int32_t sample_token(const std::vector<float>& logits, const SamplingParams& p, Rng& rng);

}  // namespace lmt
