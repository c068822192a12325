// JSON's nesting, bounded before a text is parsed: nlohmann::json parses any depth, but printing
// or destroying a value recurses once a level, and 100,000 levels of brackets (200 kB) overflow
// the stack. Every JSON text lmtrain reads from a user's file or flag is checked first.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace lmt {

// Deeper than any JSON lmtrain reads (tokenizer.json and chat messages nest under 20 levels).
constexpr int kMaxJsonNesting = 512;

// The deepest nesting of arrays and objects in `text` (brackets inside strings not counted).
int json_depth(std::string_view text);

// Throws UserError "<what>: JSON nested deeper than 512 levels" when it is.
void check_json_depth(std::string_view text, const std::string& what);

// check_json_depth, then nlohmann::json::parse(text, nullptr, false): a discarded value where
// the text is not JSON.
nlohmann::json parse_json_bounded(const std::string& text, const std::string& what);

}  // namespace lmt
