// A PEFT adapter_config.json through read_peft_adapter_config, as `lmtrain generate --adapter`
// and a LoRA resume read it.
#include "fuzz_target.h"
#include "io/peft_adapter.h"

namespace lmt::fuzz {

int adapter_config(const uint8_t* data, size_t size) {
  write_temp("adapter_config.json", data, size);
  // The rank is bounded where the adapters are put on a model (Transformer::add_lora).
  return accept_user_error([&] { read_peft_adapter_config(temp_dir()); });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(adapter_config)
