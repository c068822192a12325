// One interface over lmtrain's tokenizers, chosen from what the user names: "bytes" (256 byte ids
// + end-of-text), a Hugging Face tokenizer.json (byte-level or SentencePiece-style BPE, Unigram), a
// SentencePiece .model, or a
// model directory holding either. Data preparation, `lmtrain tokenize` and generation speak to
// this interface only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lmt {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string kind() const = 0;  // "bytes", "bpe", "unigram" or "sentencepiece"
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int32_t vocab_size() const = 0;
  // The ids that "add special tokens" puts before and after a text, as the tokenizer defines:
  // tokenizer.json's TemplateProcessing post-processor; SentencePiece's BOS (as Llama and Gemma
  // tokenizers do); the byte tokenizer's end-of-text after the text.
  virtual std::vector<int32_t> special_prefix() const { return {}; }
  virtual std::vector<int32_t> special_suffix() const { return {}; }
  // Beginning / end of sequence ids, -1 when the tokenizer has none. Data preparation puts
  // eos_id() between pretraining documents when special_suffix() is empty.
  //   bytes: -1 / 256 (end-of-text).
  //   SentencePiece .model: the model's bos / eos pieces.
  //   tokenizer.json: the first special token before / after $A in the TemplateProcessing
  //     post-processor's "single" template; where the template has none on that side, the first
  //     added token marked special whose content is, in this order,
  //     BOS: <|begin_of_text|>, <s>, <bos>, <|startoftext|>;
  //     EOS: <|endoftext|>, <|end_of_text|>, </s>, <eos>.
  virtual int32_t bos_id() const { return -1; }
  virtual int32_t eos_id() const { return -1; }

  // Whether decoding with Hugging Face's skip_special_tokens leaves `id` out: tokenizer.json's
  // added tokens marked special, a SentencePiece model's control pieces (which its decode already
  // renders as nothing), the byte tokenizer's end-of-text.
  virtual bool is_special(int32_t /*id*/) const { return false; }

  std::vector<int32_t> encode_with_special(std::string_view text) const;
  // decode() of `ids` without the special ones: HF's decode(ids, skip_special_tokens=True).
  std::string decode_skipping_special(const std::vector<int32_t>& ids) const;
};

// The file a tokenizer spec names: the spec itself for a file, tokenizer.json (else
// tokenizer.model) inside a directory, "" for "bytes". A directory with both whose tokenizer.json
// has a SentencePiece character map (Precompiled, which lmtrain does not read) names
// tokenizer.model.
std::string tokenizer_file(const std::string& spec);

// Throws UserError naming `spec` when it is none of the above or cannot be loaded.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace lmt
