// tokenizer.json normalizers that SentencePiece-style tokenizers use (Llama 2, Mistral, Gemma):
// Prepend, Replace with a String pattern, and Sequence of them. Each works on the text as bytes,
// exactly as Hugging Face tokenizers does; anything else is rejected at load with a UserError
// naming the file and field, rather than silently giving different ids.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace lmt {

class Normalizer {
 public:
  // `j` is tokenizer.json's "normalizer" value (null: the identity). `where` prefixes errors.
  static Normalizer from_json(const nlohmann::json& j, const std::string& where);

  bool identity() const { return steps_.empty(); }
  // HF: Prepend adds its text only to a non-empty string; Replace replaces every occurrence.
  std::string apply(std::string_view text) const;

 private:
  struct Step {
    enum class Kind { kPrepend, kReplace } kind;
    std::string pattern, content;  // Prepend: content only
  };
  void add(const nlohmann::json& j, const std::string& where);
  std::vector<Step> steps_;
};

}  // namespace lmt
