// Token ids given as JSON text: `logits --ids-file` and `generate --prompt-ids`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lmt {

// One array of integers in [0, vocab): `what` (a flag or a file) names it in messages. Nesting is
// bounded before the text is parsed (core/json_depth.h), and a bad element is cut in the message.
std::vector<int32_t> parse_token_ids(const std::string& json_text, int64_t vocab,
                                     const std::string& what);

}  // namespace lmt
