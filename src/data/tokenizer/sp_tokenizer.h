// SentencePiece tokenizers (BPE or unigram .model files) through Debian's libsentencepiece. The
// sentencepiece processor hides behind a pimpl, so this header pulls in no sentencepiece or
// protobuf headers and only sp_tokenizer.cpp depends on them.
//
// encode applies the model's own normalizer (usually nmt_nfkc with extra whitespace removed), so
// decode(encode(t)) is the normalized text, which equals t only for text already in that form.
//
// Thread safety: after load, every const member may be called from any number of threads at once
// (sentencepiece's Encode/Decode are const and keep no mutable state).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lmt {

class SpTokenizer {
 public:
  // Throws UserError naming `model_path` (and sentencepiece's status message) when the file is
  // missing or is not a SentencePiece model.
  static SpTokenizer load(const std::string& model_path);

  SpTokenizer(SpTokenizer&&) noexcept;
  SpTokenizer& operator=(SpTokenizer&&) noexcept;
  ~SpTokenizer();

  // Ids of `text` with no BOS/EOS added.
  std::vector<int32_t> encode(std::string_view text) const;
  // Appends the ids of `text` to `out` (no BOS/EOS).
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  // Text of `ids`; control ids (BOS/EOS/PAD) render as nothing. An id outside [0, vocab_size())
  // throws UserError naming the id.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t vocab_size() const;
  // -1 when the model has no such piece.
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;
  int32_t unk_id() const;

  // The piece of `id`; throws UserError naming the id when it is out of range.
  std::string id_to_piece(int32_t id) const;
  // The id of `piece`, or unk_id() when the vocabulary has no such piece.
  int32_t piece_to_id(std::string_view piece) const;

  const std::string& model_path() const;

 private:
  struct Impl;
  explicit SpTokenizer(std::unique_ptr<Impl> impl);
  void check_id(int32_t id, const char* op) const;

  std::unique_ptr<Impl> impl_;
};

}  // namespace lmt
