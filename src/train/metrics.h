// Where a run reports: a console progress line, metrics.jsonl (one JSON object per logged step,
// eval lines carrying val_loss) and, with logging.tensorboard, TensorBoard event files in
// <run_dir>/tb. On resume, lines of metrics.jsonl past the resumed step are dropped first so the
// file reads as one uninterrupted run; TensorBoard gets a new event file that starts with a
// session start at the next step, which hides what the old files logged past the resumed step
// (and a fresh run's at step 0 hides a former run's files in the same directory).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/tensorboard.h"
#include "train/run_config.h"

namespace lmt {

struct StepMetrics {
  int64_t step = 0;  // optimizer steps done (1 after the first)
  int64_t max_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs per second over the backend's measured GEMM peak
  double step_ms = 0;
  double eta_s = 0;
  int64_t tokens = 0;  // tokens trained on so far
  // Memory, in bytes, when the step was logged: the process's resident set now and its peak
  // (absent where the system does not say), and the device's in use and peak (absent on the CPU
  // backend and where the PJRT plugin keeps no allocator statistics).
  std::optional<int64_t> rss_bytes, rss_peak_bytes;
  std::optional<int64_t> device_bytes_in_use, device_peak_bytes;
};

// One validation source's share of an evaluation.
struct SourceEval {
  std::string name;
  double loss = 0;  // token-weighted mean
  int64_t tokens = 0;
};

class Metrics {
 public:
  // resume_step >= 0: keep only lines of metrics.jsonl with step <= resume_step.
  Metrics(const std::string& run_dir, const LoggingConfig& sinks, int64_t resume_step);
  void log_step(const StepMetrics& m);
  // `sources`: the per-source losses when the evaluation has them (val/<name>/loss and ppl).
  void log_eval(int64_t step, double val_loss, int64_t tokens,
                const std::vector<SourceEval>& sources = {});
  // The resolved config for TensorBoard's text tab (tag "config"; a markdown code block, as the
  // tab renders markdown); TensorBoard only.
  void log_config(int64_t step, const std::string& yaml);
  void log_line(const std::string& text);  // console only
  // A warning: "warning: <text>" on the console and {"step", "warning": kind, "message": text,
  // fields...} in metrics.jsonl.
  void log_warning(int64_t step, const std::string& kind, const std::string& text,
                   const nlohmann::json& fields);

  // The event file being written ("" without logging.tensorboard).
  std::string tensorboard_path() const { return tb_ ? tb_->path() : ""; }

 private:
  void open_jsonl(const std::string& run_dir, int64_t resume_step);
  void write(const nlohmann::json& j);
  template <class F>
  void to_tensorboard(F&& f);
  bool console_;
  std::ofstream jsonl_;
  std::string jsonl_path_;
  std::unique_ptr<TensorBoardWriter> tb_;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"
// `text` fenced as a markdown code block in `language`, the fence longer than any run of
// backticks in it.
std::string markdown_code_block(const std::string& text, const std::string& language);

}  // namespace lmt
