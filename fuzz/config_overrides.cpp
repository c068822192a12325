// --set overrides (one KEY=VALUE a line) on a small valid run config with a mesh, through
// load_run_config as `lmtrain train CONFIG --set ...` reads them: the parallel section's sizes,
// device ids and timeout above all. A config it accepts must write back out as YAML and hash.
#include "fuzz_target.h"
#include "train/run_config.h"

namespace lmt::fuzz {

int config_overrides(const uint8_t* data, size_t size) {
  static const std::string base = [] {
    const std::string text =
        "model: {family: llama, vocab_size: 300, hidden_size: 64, intermediate_size: 128,\n"
        "        num_hidden_layers: 2, num_attention_heads: 4, max_position_embeddings: 128}\n"
        "data: {sources: [{path: corpus.txt}], seq_len: 8}\n"
        "train: {backend: pjrt, micro_batch_size: 4, max_steps: 1}\n"
        "parallel: {data: 2, fsdp: 2}\n";
    return write_temp("overrides_base.yaml", reinterpret_cast<const uint8_t*>(text.data()),
                      text.size());
  }();
  std::vector<std::string> sets;
  std::string line;
  for (size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      if (!line.empty()) sets.push_back(line);
      line.clear();
    } else {
      line.push_back(static_cast<char>(data[i]));
    }
  }
  return accept_user_error([&] {
    RunConfig cfg = load_run_config(base, sets);
    run_config_to_yaml(cfg);
    run_config_hash(cfg);
  });
}

}  // namespace lmt::fuzz

LMT_FUZZ_TARGET(config_overrides)
