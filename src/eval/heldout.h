// Held-out text for `lmtrain eval --data CONFIG.yaml`: a config's data sources read through
// prepare's own readers and schemas (text, JSONL, CSV/TSV, Parquet; instruction and chat data
// through their templates and loss masks), tokenized as prepare tokenizes them, and the documents
// prepare holds out (data.val_fraction: the same hash of each document; all of them where
// val_fraction is 0) scored whole with rolling windows of the model's length (HarnessLM), per
// source: the loss (nats per target token, the targets prepare's masks mark: a text's tokens and
// its end-of-text, a chat's assistant turns), perplexity, and bits per byte (over the UTF-8 bytes
// of the text in the loss).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/text_source.h"
#include "eval/harness_lm.h"

namespace lmt::eval {

struct HeldoutScore {
  std::string source;  // its path
  int64_t documents = 0, tokens = 0, bytes = 0;
  double nll = 0;  // summed over the tokens
  double loss() const { return tokens > 0 ? nll / static_cast<double>(tokens) : 0.0; }
  double perplexity() const;
  double bits_per_byte() const;
};

// Per source, in the config's order. `limit`: at most that many held-out documents a source.
// `progress` is told (documents scored of the source, the source's index) as batches finish.
std::vector<HeldoutScore> score_heldout(HarnessLM& lm, const Tokenizer& tok,
                                        const std::vector<TextSourceSpec>& sources,
                                        double val_fraction, std::optional<int64_t> limit,
                                        const Progress& progress = {});

// The validation documents of a token store (`lmtrain prepare`'s: manifest.json and its shards),
// per source, scored as above from the tokens and masks the store holds; the bytes are those of
// the loss tokens decoded (the tokenizer's special tokens left out). The store must have been
// made with the model's tokenizer (its fingerprint is checked).
std::vector<HeldoutScore> score_store_heldout(HarnessLM& lm, const Tokenizer& tok,
                                              const std::string& tokenizer_spec,
                                              const std::string& store_dir,
                                              std::optional<int64_t> limit,
                                              const Progress& progress = {});

}  // namespace lmt::eval
