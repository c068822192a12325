// Where a run reports: a console progress line, metrics.jsonl (one JSON object per logged step,
// eval lines carrying val_loss) and, with logging.tensorboard, TensorBoard event files in
// <run_dir>/tb. On resume, lines of metrics.jsonl past the resumed step are dropped first so the
// file reads as one uninterrupted run; TensorBoard gets a new event file that starts with a
// session start at the next step, which hides what the old files logged past the resumed step
// (and a fresh run's at step 0 hides a former run's files in the same directory).
// With logging.wandb, every line written to metrics.jsonl also goes, as it is, to an offline W&B
// run in <run_dir>/wandb (io/wandb_writer.h): its numeric and boolean values, nested keys joined
// with '/', as the history row of its step. The run's config is the resolved config; finish()
// records the exit code. A resumed run writes a new offline run directory with the id of the
// newest one there (W&B's way of resuming: `wandb sync` uploads both, in start order, to one run).
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/tensorboard.h"
#include "io/wandb_writer.h"
#include "train/run_config.h"

namespace lmt {

struct StepMetrics {
  int64_t step = 0;  // optimizer steps done (1 after the first)
  int64_t max_steps = 0;
  double loss = 0;
  // The plain cross-entropy beside a loss that is not (loss.name, label_smoothing, z_loss); NaN
  // when the loss is the plain cross-entropy itself.
  double ce = std::nan("");
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

// One metric of a task scored at an evaluation (eval.tasks): acc, acc_norm, exact_match,
// perplexity, ... as lmtrain eval reports it, its standard error where it has one.
struct TaskScore {
  std::string task, metric;
  double value = 0;
  std::optional<double> stderr_;
};

class Metrics {
 public:
  // resume_step >= 0: keep only lines of metrics.jsonl with step <= resume_step.
  // `run_config`: the resolved config as JSON (run_config_to_json), W&B's run config.
  Metrics(const std::string& run_dir, const LoggingConfig& sinks, int64_t resume_step,
          const nlohmann::json& run_config = nlohmann::json::object());
  void log_step(const StepMetrics& m);
  // `sources`: the per-source losses when the evaluation has them (val/<name>/loss and ppl).
  void log_eval(int64_t step, double val_loss, int64_t tokens,
                const std::vector<SourceEval>& sources = {});
  // Task scores of the evaluation at `step`: {"step", "eval_tasks": {task: {metric: value,
  // metric_stderr: ...}}} in metrics.jsonl (and so W&B), eval/<task>/<metric> in TensorBoard.
  void log_tasks(int64_t step, const std::vector<TaskScore>& scores);
  // The resolved config for TensorBoard's text tab (tag "config"; a markdown code block, as the
  // tab renders markdown); TensorBoard only.
  void log_config(int64_t step, const std::string& yaml);
  void log_line(const std::string& text);  // console only
  // A warning: "warning: <text>" on the console and {"step", "warning": kind, "message": text,
  // fields...} in metrics.jsonl.
  void log_warning(int64_t step, const std::string& kind, const std::string& text,
                   const nlohmann::json& fields);

  // The run's end, for the sinks that record it (W&B: 0 is success, anything else a failure).
  // Without it, a W&B run ends as failed (exit code 1) when the Metrics goes away.
  void finish(int exit_code);

  // The W&B offline run directory ("" without logging.wandb).
  std::string wandb_dir() const { return wandb_ ? wandb_->dir() : ""; }
  // The event file being written ("" without logging.tensorboard).
  std::string tensorboard_path() const { return tb_ ? tb_->path() : ""; }

 private:
  void open_jsonl(const std::string& run_dir, int64_t resume_step);
  void write(const nlohmann::json& j);
  template <class F>
  void to_tensorboard(F&& f);
  void open_wandb(const std::string& run_dir, const WandbConfig& c, int64_t resume_step,
                  const nlohmann::json& run_config);
  void to_wandb(const nlohmann::json& j);
  bool console_;
  std::ofstream jsonl_;
  std::string jsonl_path_;
  std::unique_ptr<TensorBoardWriter> tb_;
  std::unique_ptr<WandbOfflineRun> wandb_;
};

// The numeric and boolean values of a metrics.jsonl line, nested keys joined with '/' ("step"
// left out: it is the row's step), as W&B items.
std::vector<WandbItem> wandb_items(const nlohmann::json& line);

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"
// `text` fenced as a markdown code block in `language`, the fence longer than any run of
// backticks in it.
std::string markdown_code_block(const std::string& text, const std::string& language);

}  // namespace lmt
