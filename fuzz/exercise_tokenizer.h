// What a loaded tokenizer must do, for the tokenizer.json and SentencePiece targets: encode a few
// short texts (several scripts, invalid UTF-8, empty) into ids below vocab_size() and decode
// them again. Encode may refuse a text with a UserError (a Unigram model without unk_id); decode
// must take what encode gave.
#pragma once

#include <string>

#include "data/tokenizer/tokenizer.h"
#include "fuzz_target.h"

namespace lmt::fuzz {

inline void exercise_tokenizer(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  expect(n > 0, "a vocabulary");
  auto in_vocab = [&](int32_t id) { return id >= 0 && id < n; };
  for (int32_t id : tok.special_prefix()) expect(in_vocab(id), "special prefix ids < vocab size");
  for (int32_t id : tok.special_suffix()) expect(in_vocab(id), "special suffix ids < vocab size");
  for (int32_t id : {tok.bos_id(), tok.eos_id()})
    expect(id == -1 || in_vocab(id), "BOS/EOS -1 or < vocab size");
  static const std::string kTexts[] = {"", "Hello world, hello!", "naïve 中文 🙂\n\t  x",
                                       std::string("a\xff\xfe b\xc3", 7)};
  for (size_t t = 0; t < std::size(kTexts); ++t) {
    std::vector<int32_t> ids;
    try {
      ids = t == 1 ? tok.encode_with_special(kTexts[t]) : tok.encode(kTexts[t]);
    } catch (const UserError&) {
      continue;
    }
    for (int32_t id : ids) expect(in_vocab(id), "encoded ids < vocab size");
    tok.decode(ids);  // a UserError here is a finding: encode gave these ids
  }
  try {  // any id below vocab_size: decoded, or refused as a gap
    tok.decode({n - 1, 0});
  } catch (const UserError&) {
  }
}

}  // namespace lmt::fuzz
