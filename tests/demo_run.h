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
