// Watching the training loss for divergence: a loss that leaves its recent range (a learning rate
// too high, a bad batch, damaged data) is flagged at once, in the log and in metrics.jsonl, instead
// of being found hours later; and the newest checkpoint from before the rise is kept from pruning.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace lmt {

class LossWatch {
 public:
  // The range: the median of the last `window` in-range losses (after at least kMinSteps of them).
  // A loss above median * kRatio and median + kMinRise leaves it.
  static constexpr int kMinSteps = 3;
  static constexpr double kRatio = 1.5;
  static constexpr double kMinRise = 0.5;  // nats: small losses' noise is no divergence
  explicit LossWatch(int window = 50) : window_(window) {}

  struct Warning {
    int64_t step = 0;
    double loss = 0, median = 0;
    int64_t from_step = 0, to_step = 0;  // the steps of the range
    std::string text() const;
  };
  // The loss of step `step` (a finite value); a Warning when it is the first step of an episode
  // out of range. Out-of-range losses stay out of the range; an episode ends at the first loss
  // back in range.
  std::optional<Warning> add(int64_t step, double loss);

 private:
  int window_;
  std::deque<std::pair<int64_t, double>> recent_;
  bool out_ = false;
};

}  // namespace lmt
