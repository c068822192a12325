// Rotary position embedding frequencies, computed as transformers computes them (in float32 where
// it does), for every rope_type lmtrain reads: default, linear, dynamic (NTK), llama3 and yarn.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace lmt {

struct RopeFrequencies {
  std::vector<double> inv_freq;   // [head_size / 2]
  double attention_factor = 1.0;  // multiplies cos and sin (yarn)
};

// The frequencies of one kind of layer. local: a sliding-window layer of a model with
// rope_local_base_freq > 0 (gemma3), which uses plain RoPE with that base. seq_len: the longest
// sequence of the batch (largest position + 1); only rope_type "dynamic" depends on it.
RopeFrequencies rope_frequencies(const ModelConfig& c, bool local, int64_t seq_len);

// True when the frequencies change with seq_len (rope_type "dynamic").
bool rope_depends_on_length(const ModelConfig& c);

// Throws UserError naming the model.rope_* key when the RoPE settings are inconsistent.
void validate_rope(const ModelConfig& c);

}  // namespace lmt
