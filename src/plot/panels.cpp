// The panels of `lmtrain plot` and their axes: which series go where, log or linear, round ticks
// and their labels. No drawing here (render.cpp does that).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "plot/plot.h"

namespace lmt {

namespace {

// The smallest number of decimals (up to `most`) that writes every value exactly enough.
int decimals_for(const std::vector<double>& values, int most) {
  for (int d = 0; d < most; ++d) {
    const double scale = std::pow(10.0, d);
    bool ok = true;
    for (double v : values) ok &= std::fabs(v * scale - std::round(v * scale)) < 1e-6 * scale;
    if (ok) return d;
  }
  return most;
}

std::string fixed(double v, int d) {
  std::string s = fmt::format("{:.{}f}", v, d);
  return s.find_first_not_of("-0.") == std::string::npos ? "0" : s;
}

std::string scientific(double v) {
  if (v == 0) return "0";
  int e = static_cast<int>(std::floor(std::log10(std::fabs(v))));
  double m = v / std::pow(10.0, e);
  m = std::round(m * 1000) / 1000;
  if (std::fabs(m) >= 10) m /= 10, ++e;
  return fmt::format("{}e{}", fixed(m, decimals_for({m}, 3)), e);
}

}  // namespace

std::vector<std::string> tick_labels(const std::vector<double>& ticks, bool log) {
  double most = 0;
  for (double t : ticks) most = std::max(most, std::fabs(t));
  std::vector<std::string> out;
  for (double t : ticks) {
    // A linear axis writes all its ticks in the style of the largest (0, 5k, 10k; never 7500
    // beside 10k); a log axis, spanning decades, writes each in its own.
    const double size = log ? std::fabs(t) : most;
    if (t == 0) {
      out.push_back("0");
    } else if (size >= 1e4) {
      const char* suffix = size >= 1e12 ? "T" : size >= 1e9 ? "B" : size >= 1e6 ? "M" : "k";
      const double div = size >= 1e12 ? 1e12 : size >= 1e9 ? 1e9 : size >= 1e6 ? 1e6 : 1e3;
      out.push_back(fixed(t / div, decimals_for({t / div}, 3)) + suffix);
    } else if (size < 1e-2) {
      out.push_back(scientific(t));
    } else {
      out.push_back(fixed(t, decimals_for({t}, 6)));
    }
  }
  return out;
}

Axis linear_axis(double lo, double hi, int target_ticks) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(target_ticks, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (m * mag >= raw * (1 - 1e-9)) {
      step = m * mag;
      break;
    }
  const int64_t first = static_cast<int64_t>(std::floor(lo / step + 1e-9));
  const int64_t last = static_cast<int64_t>(std::ceil(hi / step - 1e-9));
  Axis a;
  for (int64_t k = first; k <= last; ++k) a.ticks.push_back(static_cast<double>(k) * step);
  a.lo = a.ticks.front();
  a.hi = a.ticks.back();
  a.labels = tick_labels(a.ticks, false);
  return a;
}

Axis log_axis(double lo, double hi) {
  if (!(hi > lo)) {
    hi = lo * 1.1;
    lo = lo / 1.1;
  }
  Axis a;
  if (hi / lo < 10) {
    // Under a decade, powers of ten give one tick or none: round linear ticks, log spaced.
    Axis lin = linear_axis(lo, hi, 5);
    for (double t : lin.ticks)
      if (t > 0) a.ticks.push_back(t);
    a.hi = lin.hi;
    a.lo = lin.lo;
    if (a.lo <= 0) {
      // The linear ticks' 0 has no place: end the axis on a round value at or below the data,
      // so its bottom is labelled too.
      const double mag = std::pow(10.0, std::floor(std::log10(lo)));
      for (double m : {1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0})
        if (m * mag <= lo * (1 + 1e-9)) a.lo = m * mag;
      if (a.ticks.empty() || a.ticks.front() > a.lo * (1 + 1e-9))
        a.ticks.insert(a.ticks.begin(), a.lo);
    }
  } else {
    const double decades = std::log10(hi / lo);
    std::vector<double> mantissas =
        decades <= 3 ? std::vector<double>{1, 2, 5} : std::vector<double>{1};
    const int every = std::max(1, static_cast<int>(std::ceil(decades / 8)));
    std::vector<double> cands;
    const int e0 = static_cast<int>(std::floor(std::log10(lo))) - 1;
    const int e1 = static_cast<int>(std::ceil(std::log10(hi))) + 1;
    for (int e = e0; e <= e1; ++e)
      if ((e - e0) % every == 0 || every == 1)
        for (double m : mantissas) cands.push_back(m * std::pow(10.0, e));
    a.lo = cands.front();
    a.hi = cands.back();
    for (double c : cands) {
      if (c <= lo * (1 + 1e-9)) a.lo = c;
      if (c >= hi * (1 - 1e-9)) {
        a.hi = c;
        break;
      }
    }
    for (double c : cands)
      if (c >= a.lo * (1 - 1e-9) && c <= a.hi * (1 + 1e-9)) a.ticks.push_back(c);
  }
  a.log = true;
  a.labels = tick_labels(a.ticks, true);
  return a;
}

namespace {

void add_series(PlotPanel& p, std::string label, size_t run, int style,
                std::vector<PlotPoint> pts) {
  if (!pts.empty()) p.series.push_back({std::move(label), run, style, std::move(pts)});
}

// Log when every value is positive and they span more than a factor of 3: a falling loss then
// keeps its late detail, where runs are compared. Otherwise linear.
void set_y_axis(PlotPanel& p, bool may_be_log) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const PlotSeries& s : p.series)
    for (const PlotPoint& q : s.points) lo = std::min(lo, q.y), hi = std::max(hi, q.y);
  if (may_be_log && lo > 0 && hi / lo > 3) {
    p.y = log_axis(lo, hi);
    p.title += " (log scale)";
  } else {
    p.y = linear_axis(lo, hi);
  }
}

}  // namespace

std::vector<PlotPanel> plot_panels(const std::vector<RunMetrics>& runs,
                                   const std::vector<std::string>& labels, PlotX x) {
  LMT_CHECK(runs.size() == labels.size());
  PlotPanel loss, sources, tasks, lr, grad, memory;
  loss.title = "Loss";
  sources.title = "Validation loss by source";
  const std::string tasks_title = "Task scores (eval.tasks)";
  tasks.title = tasks_title;
  lr.title = "Learning rate";
  grad.title = "Gradient norm";
  memory.title = "Memory (GiB)";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& r = runs[i];
    if (r.empty())
      throw UserError(fmt::format(
          "plot: no points to draw: {} has no loss, lr, grad_norm or val_loss values yet", r.path));
    auto on_x = [&](const std::vector<PlotPoint>& pts) {
      return x == PlotX::tokens ? steps_to_tokens(pts, r) : pts;
    };
    add_series(loss, labels[i], i, 0, on_x(r.loss));
    add_series(loss, labels[i] + " val", i, 1, on_x(r.val_loss));
    for (size_t k = 0; k < r.val_sources.size(); ++k)
      add_series(sources, labels[i] + " val " + r.val_sources[k].name, i, 2 + static_cast<int>(k),
                 on_x(r.val_sources[k].val_loss));
    for (size_t k = 0; k < r.tasks.size(); ++k)
      add_series(tasks, labels[i] + " " + r.tasks[k].name, i, 2 + static_cast<int>(k),
                 on_x(r.tasks[k].val_loss));
    add_series(lr, labels[i], i, 0, on_x(r.lr));
    add_series(grad, labels[i], i, 0, on_x(r.grad_norm));
    add_series(memory, labels[i], i, 0, on_x(r.rss_gib));
    add_series(memory, labels[i] + " device", i, kDeviceMemoryStyle, on_x(r.device_gib));
  }
  std::vector<PlotPanel> panels;
  for (PlotPanel* p : {&loss, &sources, &tasks, &lr, &grad, &memory})
    if (!p->series.empty()) panels.push_back(std::move(*p));
  if (panels.empty()) throw UserError("plot: no points to draw");
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  for (const PlotPanel& p : panels)
    for (const PlotSeries& s : p.series)
      for (const PlotPoint& q : s.points) x_lo = std::min(x_lo, q.x), x_hi = std::max(x_hi, q.x);
  // From 0: training starts there, even when the first line logged is step 20.
  const Axis x_axis = linear_axis(std::min(x_lo, 0.0), x_hi, 6);
  for (PlotPanel& p : panels) {
    p.x = x_axis;
    set_y_axis(p, p.title != "Learning rate" && p.title != "Memory (GiB)" &&
                      p.title != tasks_title);
  }
  return panels;
}

}  // namespace lmt
