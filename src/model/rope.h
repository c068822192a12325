// Rotary position embedding frequencies, computed as transformers 5 computes them
// (modeling_rope_utils.py), step by step in float32 where it works in float32 and in double where
// it works in Python floats, for every rope_type lmtrain reads: default, linear, dynamic (NTK),
// llama3 and yarn.
//
// dynamic (checked against transformers 5.23's dynamic_rope_update and
// _compute_dynamic_ntk_parameters): a forward's length L is the largest position id + 1 over the
// whole batch (a packed row whose positions restart: its longest document + 1), and the
// frequencies are those of base' = theta * (factor * L / max_position_embeddings - (factor - 1))
// ^ (d / (d - 2)) when L > max_position_embeddings, plain otherwise. transformers keeps state
// across calls: it recomputes only when L exceeds the longest L it has cached, keeps the cached
// frequencies for a shorter call, and restores the plain ones only when L <
// max_position_embeddings. lmtrain has no such state: each batch (each generation step) uses its
// own L. The two agree whenever a call's L is at least every L since the last restore (every step
// of training at one fixed seq_len without document masking; every step of generation, whose
// positions only grow) or below max_position_embeddings. They differ when max_position_embeddings
// <= L < the longest L so far: with document masking, a batch whose longest document is shorter
// than an earlier batch's gets its own frequencies here and the earlier, longer one's in
// transformers; likewise a shorter evaluation after a longer one. Like transformers, dynamic scales
// from max_position_embeddings; original_max_position_embeddings does not apply to it.
//
// yarn: factor is the configured one (transformers 5; it derives max_position_embeddings /
// original_max_position_embeddings only when factor is null, while transformers 4.4x-4.5x
// replaced factor by that ratio whenever original_max_position_embeddings was set).
// original_max_position_embeddings (0 = max_position_embeddings) sets the correction range;
// attention_factor (0 = derived) is 0.1 ln(factor) + 1, or with both mscale and mscale_all_dim
// set, (0.1 mscale ln f + 1) / (0.1 mscale_all_dim ln f + 1) (each 1 when f <= 1).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace lmt {

struct RopeFrequencies {
  std::vector<double> inv_freq;   // [head_size / 2], each a float32 value as transformers has it
  double attention_factor = 1.0;  // multiplies cos and sin (yarn; 1 otherwise)
};

// The frequencies of one kind of layer. local: a sliding-window layer of a model with
// rope_local_base_freq > 0 (gemma3), which uses plain RoPE with that base. seq_len: the batch's
// largest position + 1; only rope_type "dynamic" depends on it (see above).
RopeFrequencies rope_frequencies(const ModelConfig& c, bool local, int64_t seq_len);

// True when the frequencies change with seq_len (rope_type "dynamic").
bool rope_depends_on_length(const ModelConfig& c);

// The context the scaling was trained at: rope_original_max_position_embeddings, or
// max_position_embeddings when that is 0 (llama3 and yarn).
int64_t rope_original_max(const ModelConfig& c);

// Throws UserError naming the model.rope_* key when the RoPE settings are inconsistent.
void validate_rope(const ModelConfig& c);

}  // namespace lmt
