// `lmtrain plot`: runs' metrics.jsonl read into series and drawn as one figure for a report. It
// uses no training code: it reads what a run wrote. Reading lives in plot.cpp, the choice of
// panels, scales and ticks in panels.cpp (no drawing library in either); render.cpp lays the
// figure out and draws it with cairo, to SVG or PNG, so the same code makes both. Without cairo at build time render_plot says so (a UserError naming setup.sh).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lmt {

struct PlotPoint {
  double x = 0;  // the step, or the tokens trained on by that step
  double y = 0;
};

// One validation source's losses (eval lines' "val_sources": {"<name>": {"loss": ...}}).
struct SourceSeries {
  std::string name;
  std::vector<PlotPoint> val_loss;  // x = step
};

// What one run's metrics.jsonl holds, by step (x = step in every series).
struct RunMetrics {
  std::string path;  // the metrics.jsonl read
  std::vector<PlotPoint> loss, lr, grad_norm, val_loss;
  std::vector<SourceSeries> val_sources;  // in the order first met (within a line: by name)
  // Task scores (eval lines' "eval_tasks": {"<task>": {"<metric>": value}}), one series a task
  // and metric named "<task> <metric>" (standard errors left out).
  std::vector<SourceSeries> tasks;
  std::vector<PlotPoint> tokens;          // step lines' "tokens" (x = step, y = tokens)
  // Step lines' memory, in GiB: the process's resident set (rss_bytes) and the device's bytes in
  // use (device_bytes_in_use); empty where the lines do not carry them.
  std::vector<PlotPoint> rss_gib, device_gib;
  bool empty() const;
};

// Reads RUN_DIR/metrics.jsonl (or a .jsonl file named directly). Throws UserError for a missing
// file and for a malformed line (naming the file and line). A last line without its newline that
// does not parse is left out: a live run may be writing it.
RunMetrics read_run_metrics(const std::string& run_dir_or_file);

// Legend labels: `given` (from --labels, as many as runs) or each run directory's name; repeated
// labels get " (2)", " (3)", ... Throws UserError when --labels names a different count.
std::vector<std::string> plot_labels(const std::vector<std::string>& run_dirs,
                                     const std::vector<std::string>& given);

enum class PlotX { step, tokens };

// Step -> tokens for the x axis: a step line's own count, else interpolated between the nearest
// step lines, or proportional to the nearest one beyond them (tokens per step is constant).
// Throws UserError (naming the file) when the run's step lines carry no "tokens".
std::vector<PlotPoint> steps_to_tokens(const std::vector<PlotPoint>& by_step,
                                       const RunMetrics& run);

// One axis's scale and ticks. Ticks are round numbers (1, 2, 2.5, 5 x 10^k on a linear axis;
// 1, 2, 5 x 10^k per decade on a log one) and the range ends on ticks where it can.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;
  std::vector<std::string> labels;  // one per tick
};
Axis linear_axis(double lo, double hi, int target_ticks = 5);
Axis log_axis(double lo, double hi);  // lo > 0
// Labels for an axis's ticks: 12k / 1.5M / 2B for large values, 3e-4 for small ones, otherwise
// as many decimals as each tick needs (0.5, 1, 1.5). A linear axis picks the style by its largest
// tick, a log axis per tick.
std::vector<std::string> tick_labels(const std::vector<double>& ticks, bool log);

struct Rgb {
  double r = 0, g = 0, b = 0;  // 0..1
  bool operator==(const Rgb&) const = default;
};
// The colour of run i (matplotlib's tab10 cycle).
Rgb run_color(size_t i);

// One line in a panel. style 0: solid (training); 1: dashed with round markers (validation);
// 2 + k: validation source k (its own dash pattern and marker shape); kDeviceMemoryStyle: dotted,
// no markers (the device's memory).
constexpr int kDeviceMemoryStyle = -1;
struct PlotSeries {
  std::string label;
  size_t run = 0;
  int style = 0;
  std::vector<PlotPoint> points;
};

struct PlotRect {
  double x = 0, y = 0, w = 0, h = 0;
};

struct PlotPanel {
  std::string title;
  std::vector<PlotSeries> series;
  Axis x, y;
  PlotRect area;  // the data area in the picture, set by render_plot
};

struct PlotOptions {
  PlotX x = PlotX::step;
  std::string title;  // empty: the labels
  int width = 1200, height = 800;
};

// The panels of a figure: loss (training and validation), validation loss by source (when a run
// has sources), learning rate, gradient norm, memory (when step lines carry it: the process's RSS
// solid, the device's memory in use dotted, in GiB). Panels without points are left out; throws
// UserError when no panel has any. Loss and gradient norm are drawn on a log y axis when all
// their values are positive and span more than a factor of 3, else linear.
std::vector<PlotPanel> plot_panels(const std::vector<RunMetrics>& runs,
                                   const std::vector<std::string>& labels, PlotX x);

// What render_plot drew: the panels with their data areas, the legend's box, the title.
struct PlotFigure {
  std::vector<PlotPanel> panels;
  PlotRect legend;
  std::string title;
  std::vector<std::string> legend_labels;
};

// Draws the panels to `out_path` (.svg or .png, by its extension), written atomically. Throws
// UserError for another extension, an unwritable path, or a build without cairo.
PlotFigure render_plot(std::vector<PlotPanel> panels, const PlotOptions& opts,
                       const std::string& out_path);

bool plot_built_with_cairo();

}  // namespace lmt
