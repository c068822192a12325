// Where a run reports: a console progress line and metrics.jsonl (one JSON object per logged
// step, eval lines carrying val_loss). On resume, lines past the resumed step are dropped first so
// the file reads as one uninterrupted run.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace lmt {

struct StepMetrics {
  int64_t step = 0;  // optimizer steps done (1 after the first)
  int64_t max_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double step_ms = 0;
  double eta_s = 0;
  int64_t tokens = 0;  // tokens trained on so far
};

class Metrics {
 public:
  // resume_step >= 0: keep only lines of metrics.jsonl with step <= resume_step.
  Metrics(const std::string& run_dir, bool console, bool jsonl, int64_t resume_step);
  void log_step(const StepMetrics& m);
  void log_eval(int64_t step, double val_loss, int64_t tokens);
  void log_line(const std::string& text);  // console only

 private:
  void write(const nlohmann::json& j);
  bool console_;
  std::ofstream jsonl_;
  std::string jsonl_path_;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"

}  // namespace lmt
