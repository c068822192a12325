// Token ids as JSON text through parse_token_ids, as `logits --ids-file` and `generate
// --prompt-ids` read them; what it accepts must be ids below the vocabulary.
#include "fuzz_target.h"
#include "io/token_ids.h"

namespace lmt::fuzz {

int ids_file(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return accept_user_error([&] {
    for (const int32_t id : parse_token_ids(text, 300, "ids.json"))
      if (id < 0 || id >= 300) throw std::logic_error("ids_file: an id outside the vocabulary");
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(ids_file)
