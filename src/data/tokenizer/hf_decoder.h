// tokenizer.json decoders: ByteLevel, Replace (String pattern), ByteFallback, Fuse, Strip,
// Metaspace and Sequence of them, each a step over the list of token strings as in Hugging Face
// tokenizers' decode_chain. With no decoder, HF joins the tokens with spaces, and so does this.
// One deliberate difference: ByteLevel keeps bytes that are not valid UTF-8 as they are (HF writes
// U+FFFD), so byte-level BPE decoding stays a lossless round trip of any input bytes.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace lmt {

class HfDecoder {
 public:
  // `j` is tokenizer.json's "decoder" value. `where` prefixes errors.
  static HfDecoder from_json(const nlohmann::json& j, const std::string& where);

  bool is_null() const { return null_; }
  // True when the decoder is ByteLevel alone: the caller may concatenate per-token bytes instead.
  bool is_byte_level_only() const;
  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
    std::string pattern, content;  // Replace: pattern -> content; Strip, Metaspace: content
    int start = 0, stop = 0;       // Strip
    bool prepend = true;           // Metaspace: prepend_scheme is not "never"
  };
  void add(const nlohmann::json& j, const std::string& where);
  bool null_ = true;
  std::vector<Step> steps_;
};

}  // namespace lmt
