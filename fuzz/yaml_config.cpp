// A run config (YAML) through load_run_config, as `lmtrain train CONFIG` reads it; a config it
// accepts must write back out as YAML and hash.
#include "fuzz_target.h"
#include "train/run_config.h"

namespace lmt::fuzz {

int yaml_config(const uint8_t* data, size_t size) {
  const std::string path = write_temp("config.yaml", data, size);
  return accept_user_error([&] {
    RunConfig cfg = load_run_config(path, {});
    run_config_to_yaml(cfg);
    run_config_hash(cfg);
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(yaml_config)
