// A Hugging Face tokenizer.json through load_tokenizer; a tokenizer it loads must encode and
// decode (exercise_tokenizer.h).
#include <stdexcept>

#include "data/tokenizer/tokenizer.h"
#include "exercise_tokenizer.h"
#include "fuzz_target.h"

namespace lmt::fuzz {

int tokenizer_json(const uint8_t* data, size_t size) {
  const std::string path = write_temp("tokenizer.json", data, size);
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = load_tokenizer(path);
  } catch (const UserError&) {
    return 0;
  }
  try {
    exercise_tokenizer(*tok);
  } catch (const UserError& e) {
    throw Finding(std::string("fuzz: decode refused the ids encode gave: ") + e.what());
  }
  return 0;
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(tokenizer_json)
