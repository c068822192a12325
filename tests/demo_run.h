// The demo run that the ctest fixture `demo_run` makes once for the tests that read it
// (tests/run_demo.sh: tokenizer train, prepare and train with configs/demo.yaml, as the README
// runs them, every step's loss logged): what the demo learns, LoRA SFT on its last checkpoint,
// and pjrt tracking its losses. A test run outside ctest finds the run where ctest left it, or
// fails saying how to make it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/run_config.h"

namespace lmt::test {

inline std::filesystem::path demo_dir() {
  return LMT_DEMO_RUN;
}
inline std::filesystem::path demo_run_dir() {
  return demo_dir() / "run";
}
inline std::string demo_config() {
  return std::string(LMT_SOURCE_DIR) + "/configs/demo.yaml";
}

// The --set overrides that point configs/demo.yaml at the fixture's tokenizer and store.
inline std::vector<std::string> demo_data_sets() {
  return {"data.tokenizer=" + (demo_dir() / "tokenizer.json").string(),
          "data.store=" + (demo_dir() / "store").string()};
}

// configs/demo.yaml on the fixture's data for a run of a test's own (out_dir `dir`/`run`), logging
// every step, with no evaluation or sample; then `sets` (later sets win).
inline RunConfig demo_run_config(const std::filesystem::path& dir, const std::string& run,
                                 const std::vector<std::string>& sets) {
  std::vector<std::string> all = demo_data_sets();
  all.insert(all.end(), {"train.out_dir=" + (dir / run).string(), "train.log_every=1",
                         "train.eval_every=0", "train.sample_tokens=0"});
  all.insert(all.end(), sets.begin(), sets.end());
  return load_run_config(demo_config(), all);
}

// Empty when the fixture's run is complete; else what is missing and how to make it.
inline std::string demo_run_missing() {
  if (std::filesystem::exists(demo_dir() / "complete")) return "";
  return "no complete demo run in " + demo_dir().string() +
         ": ctest makes it (the fixture test demo_run), or tests/run_demo.sh " LMT_BINARY " " +
         demo_dir().string();
}

// A run's metrics.jsonl: step -> training loss, and step -> validation loss.
struct RunLosses {
  std::map<int64_t, double> train, val;
};
inline RunLosses read_losses(const std::filesystem::path& run_dir) {
  RunLosses out;
  std::ifstream f(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.train[j["step"].get<int64_t>()] = j["loss"].get<double>();
    if (j.contains("val_loss")) out.val[j["step"].get<int64_t>()] = j["val_loss"].get<double>();
  }
  return out;
}

}  // namespace lmt::test
