#include "train/loss_watch.h"

#include <fmt/core.h>

#include <algorithm>
#include <vector>

namespace lmt {

std::string LossWatch::Warning::text(const std::string& kept) const {
  return fmt::format(
      "the loss {:.4g} at step {} left its recent range (median {:.4g} over steps {}-{}): the run "
      "may be diverging (train.lr too high?); {}",
      loss, step, median, from_step, to_step,
      kept.empty() ? std::string("no checkpoint from before it exists to keep")
                   : "the newest checkpoint from before it is kept: " + kept);
}

nlohmann::json LossWatch::state() const {
  nlohmann::json recent = nlohmann::json::array();
  for (const auto& [s, l] : recent_) recent.push_back({s, l});
  return {{"recent", recent}, {"out", out_}};
}

void LossWatch::restore(const nlohmann::json& state) {
  std::deque<std::pair<int64_t, double>> recent;
  for (const nlohmann::json& e : state.at("recent"))
    recent.emplace_back(e.at(0).get<int64_t>(), e.at(1).get<double>());
  while (static_cast<int>(recent.size()) > window_) recent.pop_front();
  recent_ = std::move(recent);
  out_ = state.at("out").get<bool>();
}

std::optional<LossWatch::Warning> LossWatch::add(int64_t step, double loss) {
  if (static_cast<int>(recent_.size()) >= kMinSteps) {
    std::vector<double> v;
    for (const auto& [s, l] : recent_) v.push_back(l);
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    const double median = v[v.size() / 2];
    if (loss > median * kRatio && loss > median + kMinRise) {
      const bool first = !out_;
      out_ = true;
      if (!first) return std::nullopt;
      return Warning{step, loss, median, recent_.front().first, recent_.back().first};
    }
  }
  out_ = false;
  recent_.emplace_back(step, loss);
  if (static_cast<int>(recent_.size()) > window_) recent_.pop_front();
  return std::nullopt;
}

}  // namespace lmt
