// Text generation with a KV cache: encode the prompt, feed it once, then sample one token at a
// time until max_new_tokens or end-of-text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/sampling.h"
#include "model/transformer.h"

namespace lmt {

struct GenerateOptions {
  int64_t max_new_tokens = 200;
  SamplingParams sampling;
  uint64_t seed = 0;
  int32_t stop_id = -1;  // stop when this id is drawn (not included)
  // Ids the tokenizer knows: [0, num_ids). A model's vocabulary is often padded beyond the
  // tokenizer's (e.g. to a multiple of 64); those rows are never drawn. 0 = all.
  int64_t num_ids = 0;
};

// Token-level generation: returns the new ids.
std::vector<int32_t> generate_ids(Transformer& model, const std::vector<int32_t>& prompt,
                                  const GenerateOptions& opt);

}  // namespace lmt
