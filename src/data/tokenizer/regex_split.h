// Splitting text on a pattern the way Hugging Face tokenizers' Split pre-tokenizer does: PCRE2 with
// UTF, UCP and JIT, on bytes (invalid UTF-8 never matches, so it stays in the gaps), and the five
// SplitDelimiterBehavior modes. One compiled pattern is shared by all threads; each call makes its
// own match data.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace lmt {

// A text a tokenizer cannot encode (PCRE2's match or depth limit on a long piece): a user error
// about that text, which `prepare` reports as a bad record of its source (FILE:LINE, or skipped
// under on_error: skip).
class TokenizeError : public UserError {
 public:
  using UserError::UserError;
};

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Parses HF's behavior name ("Isolated", ...); false when it is none of them.
bool parse_split_behavior(const std::string& name, SplitBehavior& out);

class Regex {
 public:
  // Throws UserError starting with `where` when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();

  // Appends to `out` the non-empty pieces of `s` (views into s) as HF's split with `behavior`.
  void split(std::string_view s, SplitBehavior behavior, std::vector<std::string_view>& out) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

// A regex that matches `s` literally (every ASCII non-alphanumeric escaped).
std::string quote_literal(const std::string& s);

}  // namespace lmt
