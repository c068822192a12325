#include "train/generation.h"

#include <algorithm>

#include "core/error.h"

namespace lmt {

std::vector<int32_t> generate_ids(Transformer& model, const std::vector<int32_t>& prompt,
                                  const GenerateOptions& opt) {
  if (prompt.empty()) throw UserError("generate: the prompt encodes to no tokens");
  const int64_t max_pos = model.config().max_position_embeddings;
  if (static_cast<int64_t>(prompt.size()) >= max_pos)
    throw UserError("generate: the prompt has " + std::to_string(prompt.size()) +
                    " tokens; the model supports " + std::to_string(max_pos) + " positions");
  const int64_t total =
      std::min<int64_t>(max_pos, static_cast<int64_t>(prompt.size()) + opt.max_new_tokens);
  auto cache = model.make_kv_cache(total);
  Rng rng(opt.seed, /*stream=*/0x67656eull);
  std::vector<int32_t> out;
  std::vector<float> logits =
      model.feed(*cache, prompt.data(), static_cast<int64_t>(prompt.size()));
  while (static_cast<int64_t>(prompt.size() + out.size()) < total) {
    if (opt.num_ids > 0 && opt.num_ids < static_cast<int64_t>(logits.size()))
      logits.resize(static_cast<size_t>(opt.num_ids));  // ids past the tokenizer's are never drawn
    int32_t next = sample_token(logits, opt.sampling, rng);
    if (next == opt.stop_id) break;
    out.push_back(next);
    if (static_cast<int64_t>(prompt.size() + out.size()) >= total) break;
    logits = model.feed(*cache, &next, 1);
  }
  return out;
}

}  // namespace lmt
