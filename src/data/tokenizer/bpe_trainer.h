// Trains a byte-level BPE tokenizer (GPT-2 style: the GPT-2 pre-tokenizer regex, bytes mapped to
// printable characters, merges learned greedily by pair frequency) and writes it as a Hugging Face
// tokenizer.json that BpeTokenizer (and Hugging Face tokenizers) load.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lmt {

struct BpeTrainOptions {
  int64_t vocab_size = 1000;  // 256 byte tokens + merges + special tokens
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
  int64_t min_frequency = 2;  // pairs seen fewer times are never merged
};

// Reads the text files, learns merges and writes tokenizer.json to `out`. Throws UserError naming
// the file or option when an input is missing or vocab_size is below 256 + specials.
// Returns the number of merges learned.
int64_t train_bpe_tokenizer(const std::vector<std::string>& inputs, const BpeTrainOptions& opt,
                            const std::string& out);

// The same from texts that `for_each_text` hands, one by one, to the sink it is given (e.g. every
// document of a config's data sources). Texts that are not valid UTF-8 are left out and counted
// in *skipped_invalid.
using TextSink = std::function<void(std::string_view)>;
int64_t train_bpe_tokenizer(const std::function<void(const TextSink&)>& for_each_text,
                            const BpeTrainOptions& opt, const std::string& out,
                            int64_t* skipped_invalid = nullptr);

}  // namespace lmt
