// Learning-rate schedules; see schedule.h for the exact formulas.
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace lmt {

namespace {

// Progress in [0, 1] of step s through [begin, end); 1 when the interval is empty.
double progress(int64_t s, int64_t begin, int64_t end) {
  if (end <= begin) return 1.0;
  return std::clamp(static_cast<double>(s - begin) / static_cast<double>(end - begin), 0.0, 1.0);
}

}  // namespace

double lr_at(const ScheduleConfig& c, int64_t step) {
  const std::string& name = c.schedule;
  if (name != "constant" && name != "cosine" && name != "linear" && name != "wsd")
    throw UserError("train.schedule: '" + name +
                    "' is not a schedule (constant, cosine, linear, wsd)");
  const int64_t W = std::max<int64_t>(c.warmup_steps, 0);
  if (step < W) return c.lr * static_cast<double>(step + 1) / static_cast<double>(W + 1);
  if (name == "constant") return c.lr;
  if (name == "cosine") {
    double d = progress(step, W, c.max_steps);
    return c.min_lr + (c.lr - c.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * d));
  }
  // Written as min_lr + (lr - min_lr) * (1 - d): exactly min_lr at d = 1, never below it.
  if (name == "linear")
    return c.min_lr + (c.lr - c.min_lr) * (1.0 - progress(step, W, c.max_steps));
  const int64_t decay_steps =
      static_cast<int64_t>(std::llround(c.decay_fraction * static_cast<double>(c.max_steps)));
  const int64_t start = std::max(W, c.max_steps - decay_steps);
  if (step < start) return c.lr;
  return c.min_lr + (c.lr - c.min_lr) * (1.0 - progress(step, start, c.max_steps));
}

}  // namespace lmt
