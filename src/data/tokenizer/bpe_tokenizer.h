// BPE loaded from a Hugging Face tokenizer.json, producing the same ids as Hugging Face tokenizers:
// byte-level BPE (GPT-2, Llama 3, Qwen) and SentencePiece-style BPE with byte fallback (Llama 2,
// Mistral, Gemma); a Unigram model (unigram_model.h) runs through the same pipeline in place of
// the merges. The pipeline is HF's: split the text on added tokens (leftmost, longest first;
// normalized=false ones on the raw text, the others on the normalized text), normalize (Prepend,
// Replace), run each piece through the pre-tokenizers (regex Split, ByteLevel, Metaspace), map
// bytes to GPT-2's printable characters (byte-level) or look characters up with <0xNN> byte
// fallback, then apply merges lowest rank first. decode runs the file's decoder (ByteLevel, or
// Replace, ByteFallback, Fuse, Strip, Metaspace). Anything this cannot reproduce exactly (other
// normalizers such as NFC or Precompiled, WordPiece / WordLevel models, other pre-tokenizers,
// single_word added tokens) is rejected at load with a UserError naming the file and the field,
// rather than silently producing different ids.
//
// encode works on bytes: invalid UTF-8 is never matched by the regexes, so it becomes its own
// pieces and, byte-level, still round-trips through decode. encode is const and thread-safe with no
// lock: each thread keeps its own per-word merge cache.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lmt {

class BpeTokenizer {
 public:
  // Throws UserError naming the file when it is missing, malformed or unsupported.
  static BpeTokenizer load(const std::string& tokenizer_json_path);

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

  // No special tokens are added; added tokens that appear literally in `text` become their id.
  std::vector<int32_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  // Text of the ids through the file's decoder (ByteLevel: the bytes, lossless; added tokens render
  // as their content). An id that is neither in the vocab nor an added token throws UserError.
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode(const int32_t* ids, int64_t n) const;

  // True for a Unigram model, false for BPE.
  bool is_unigram() const;
  // Max id + 1 over the vocab and the added tokens.
  int32_t vocab_size() const;
  // The tokenizer.json it was loaded from, as read.
  const std::string& json_text() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string as stored in tokenizer.json (byte-level characters); UserError if unknown.
  const std::string& id_to_token(int32_t id) const;
  // Whether `id` is an added token marked special (what HF's skip_special_tokens leaves out).
  bool is_special(int32_t id) const;
  // Whether `id` is a token's (false in a gap between ids, and outside [0, vocab_size)).
  bool has_id(int64_t id) const;
  const std::string& path() const;
  // Writes the tokenizer.json this was loaded from, unchanged (so HF loads it); UserError naming
  // `path` when it cannot be written.
  void save(const std::string& path) const;

  struct Impl;  // opaque; public only so the loader's helpers in the .cpp can fill it

 private:
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmt
