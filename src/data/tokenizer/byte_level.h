// Pieces of the byte-level scheme (GPT-2, Llama 3, Qwen) shared by the BPE tokenizer and its
// trainer: GPT-2's pre-tokenizer pattern and its map from bytes to printable characters.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace lmt {

// GPT-2's pre-tokenizer regex (PCRE2 with UTF and UCP): contractions, letters, digits, other
// runs, whitespace.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 onwards.
std::array<uint32_t, 256> gpt2_bytes_to_unicode();

// Appends the UTF-8 encoding of code point cp.
void append_utf8(uint32_t cp, std::string& out);
// Length in bytes of the UTF-8 character starting at s[i]; 1 for an invalid or truncated one.
size_t utf8_char_len(std::string_view s, size_t i);

}  // namespace lmt
