// Watching the training loss for divergence: a loss that leaves its recent range (a learning rate
// too high, a bad batch, damaged data) is flagged at once, in the log and in metrics.jsonl, instead
// of being found hours later; and the newest checkpoint from before the rise is kept from pruning.
#pragma once

#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace lmt {

class LossWatch {
 public:
  // The range: the median of the last `window` in-range losses (from the first one on: a run
  // whose second step's loss is many times its first's has diverged at once). A loss above
  // median * kRatio and median + kMinRise leaves it.
  static constexpr int kMinSteps = 1;
  static constexpr double kRatio = 1.5;
  static constexpr double kMinRise = 0.5;  // nats: small losses' noise is no divergence
  explicit LossWatch(int window = 50) : window_(window) {}

  struct Warning {
    int64_t step = 0;
    double loss = 0, median = 0;
    int64_t from_step = 0, to_step = 0;  // the steps of the range
    // `kept`: the checkpoint kept from before the rise ("" when the run has none yet).
    std::string text(const std::string& kept) const;
  };
  // The loss of step `step` (a finite value); a Warning when it is the first step of an episode
  // out of range. Out-of-range losses stay out of the range; an episode ends at the first loss
  // back in range.
  std::optional<Warning> add(int64_t step, double loss);

  // The range and the episode, for a checkpoint: a resumed run goes on watching as the run it
  // continues did (a fresh watch would take the first losses after a resume, risen or not, as
  // its range). restore throws nlohmann::json's exceptions on another shape.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  int window_;
  std::deque<std::pair<int64_t, double>> recent_;
  bool out_ = false;
};

}  // namespace lmt
