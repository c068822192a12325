// Learning-rate schedules. `step` counts optimizer steps from 0: lr_at(cfg, 0) is the rate of
// the first update, and a run uses steps 0 .. max_steps - 1. With W = warmup_steps:
//   warmup (s < W):  lr * (s + 1) / (W + 1), linear from near 0, so no update is wasted at lr 0;
//   then, with d = (s - W) / (max_steps - W) clamped to [0, 1] (d = 1 when max_steps <= W):
//   constant: lr;   cosine: min_lr + (lr - min_lr) * (1 + cos(pi d)) / 2;
//   linear:   min_lr + (lr - min_lr) (1 - d);
//   wsd: lr until S = max(W, max_steps - round(decay_fraction * max_steps)), then linear from lr
//        at S to min_lr at max_steps.
// As in nanoGPT, the decay reaches min_lr at step max_steps (just after the last update); steps
// beyond it stay at min_lr.
// src/optim does not include src/train: ScheduleConfig carries train's fields of the same names,
// and a template overload accepts train's TrainConfig directly.
#pragma once

#include <cstdint>
#include <string>

namespace lmt {

struct ScheduleConfig {
  std::string schedule = "cosine";  // constant | cosine | linear | wsd
  double lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup_steps = 100;
  int64_t max_steps = 1000;
  double decay_fraction = 0.2;  // wsd
};

// Throws UserError naming train.schedule for an unknown name.
double lr_at(const ScheduleConfig& cfg, int64_t step);

// Any struct with the fields above (train's TrainConfig).
template <class T>
double lr_at(const T& t, int64_t step) {
  return lr_at(
      ScheduleConfig{t.schedule, t.lr, t.min_lr, t.warmup_steps, t.max_steps, t.decay_fraction},
      step);
}

}  // namespace lmt
