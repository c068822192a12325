// The byte-level tokenizer of the first version: ids 0..255 are the bytes of the text exactly as
// stored (any encoding, invalid UTF-8 included), id 256 is end-of-text (EOT), appended after every
// document. No merges, so encode/decode is a lossless round trip of the bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lmt {

class ByteTokenizer {
 public:
  static constexpr int32_t kEot = 256;
  static constexpr int32_t kVocabSize = 257;

  int32_t vocab_size() const { return kVocabSize; }
  int32_t eot_id() const { return kEot; }
  // No beginning-of-sequence id; end of sequence is EOT.
  int32_t bos_id() const { return -1; }
  int32_t eos_id() const { return kEot; }

  std::vector<int32_t> encode(std::string_view text) const;
  // Appends the ids of `text` to `out` (no EOT).
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  // Bytes of ids in [0, 256); EOT and any other id outside that range render as nothing.
  std::string decode(const int32_t* ids, int64_t n) const;
  std::string decode(const std::vector<int32_t>& ids) const {
    return decode(ids.data(), static_cast<int64_t>(ids.size()));
  }
};

// Checks data.tokenizer; only "bytes" exists so far. Throws UserError naming data.tokenizer.
void check_tokenizer_name(const std::string& name);

}  // namespace lmt
