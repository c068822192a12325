// A config and its base_config chain: the input is cut into files at each line "---8<---"; the
// first is the config, and each file names the next as its base (the last names none, unless it
// writes base_config itself), through load_run_config as `lmtrain train CONFIG` reads them. A
// config it accepts must write back out as YAML and hash.
#include "fuzz_target.h"
#include "train/run_config.h"

namespace lmt::fuzz {

int base_config_chain(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  const std::string cut = "\n---8<---\n";
  for (size_t at = 0;;) {
    const size_t next = text.find(cut, at);
    parts.push_back(text.substr(at, next == std::string::npos ? std::string::npos : next - at));
    if (next == std::string::npos || parts.size() == 4) break;
    at = next + cut.size();
  }
  std::string first;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string body = parts[i];
    if (i + 1 < parts.size())
      body = "base_config: chain" + std::to_string(i + 1) + ".yaml\n" + body;
    const std::string path = write_temp("chain" + std::to_string(i) + ".yaml",
                                        reinterpret_cast<const uint8_t*>(body.data()), body.size());
    if (i == 0) first = path;
  }
  return accept_user_error([&] {
    RunConfig cfg = load_run_config(first, {});
    run_config_to_yaml(cfg);
    run_config_hash(cfg);
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(base_config_chain)
