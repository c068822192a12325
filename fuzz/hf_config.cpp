// A Hugging Face config.json through read_hf_config; a config it reads must write back out as
// config.json (which may refuse, with a UserError, what config.json cannot hold).
#include "io/hf_config.h"

#include "fuzz_target.h"

namespace lmt::fuzz {

int hf_config(const uint8_t* data, size_t size) {
  const std::string path = write_temp("config.json", data, size);
  return accept_user_error([&] {
    const ModelConfig cfg = read_hf_config(path);
    model_config_to_hf(cfg);
    check_config_json_holds(cfg, "model");
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(hf_config)
