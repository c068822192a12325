// A SentencePiece .model: loaded as a tokenizer (libsentencepiece behind SpTokenizer, which must
// turn whatever the library refuses into a UserError) that must then encode and decode, and read
// by lmtrain's own protobuf reader into a tokenizer.json (sentencepiece_tokenizer_json, for
// exports).
#include "data/tokenizer/tokenizer.h"
#include "exercise_tokenizer.h"
#include "fuzz_target.h"
#include "io/sp_tokenizer_json.h"

namespace lmt::fuzz {

int sp_model(const uint8_t* data, size_t size) {
  const std::string path = write_temp("tokenizer.model", data, size);
  accept_user_error([&] { sentencepiece_tokenizer_json(path); });
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

LMT_FUZZ_TARGET(sp_model)
