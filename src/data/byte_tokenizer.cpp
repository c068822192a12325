// Byte-level tokenizer: one id per byte, EOT = 256.
#include "data/byte_tokenizer.h"

#include "core/error.h"

namespace lmt {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode_append(text, out);
  return out;
}

void ByteTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(static_cast<int32_t>(static_cast<unsigned char>(c)));
}

std::string ByteTokenizer::decode(const int32_t* ids, int64_t n) const {
  std::string s;
  s.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= 0 && ids[i] < 256)
      s.push_back(static_cast<char>(static_cast<unsigned char>(ids[i])));
  return s;
}

void check_tokenizer_name(const std::string& name) {
  if (name != "bytes")
    throw UserError("data.tokenizer: '" + name + "' is not supported yet (supported: bytes)");
}

}  // namespace lmt
