// Pieces of the byte-level scheme (GPT-2, Llama 3, Qwen) shared by the BPE tokenizer and its
// trainer: GPT-2's pre-tokenizer pattern and its map from bytes to printable characters.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace lmt {

// GPT-2's pre-tokenizer regex (PCRE2 with UTF and UCP): contractions, letters, digits, other
// runs, whitespace.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 onwards.
std::array<uint32_t, 256> gpt2_bytes_to_unicode();

// Appends the UTF-8 encoding of code point cp.
void append_utf8(uint32_t cp, std::string& out);

}  // namespace lmt
