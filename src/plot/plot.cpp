// Reading metrics.jsonl for `lmtrain plot`, and the choices that need no drawing library: which
// panels, which series, log or linear, where the ticks go and how they read.
#include "plot/plot.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace lmt {

namespace fs = std::filesystem;
using nlohmann::json;

bool RunMetrics::empty() const {
  bool any_source = false;
  for (const SourceSeries& s : val_sources) any_source |= !s.val_loss.empty();
  for (const SourceSeries& s : tasks) any_source |= !s.val_loss.empty();
  return loss.empty() && lr.empty() && grad_norm.empty() && val_loss.empty() && !any_source;
}

namespace {

std::string metrics_path(const std::string& arg) {
  fs::path p(arg);
  if (fs::is_directory(p)) p /= "metrics.jsonl";
  if (!fs::is_regular_file(p))
    throw UserError(
        fs::is_directory(arg) || !fs::exists(arg)
            ? fmt::format("plot: '{}' has no metrics.jsonl (is it a run directory?)", arg)
            : fmt::format("plot: '{}' is not a run directory or a metrics.jsonl", arg));
  return p.string();
}

// The number under `key`, if there; null (a NaN as nlohmann writes it) counts as absent, which
// leaves a gap in the line.
bool number_field(const json& j, const char* key, const std::string& where, double* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return false;
  if (!it->is_number())
    throw UserError(
        fmt::format("{}: field '{}' must be a number (got {})", where, key, excerpt(it->dump())));
  *out = it->get<double>();
  return std::isfinite(*out);
}

void read_sources(const json& j, double step, const std::string& where, RunMetrics& run) {
  auto it = j.find("val_sources");
  if (it == j.end() || it->is_null()) return;
  if (!it->is_object())
    throw UserError(fmt::format("{}: field 'val_sources' must be an object of sources (got {})",
                                where, excerpt(it->dump())));
  for (const auto& item : it->items()) {
    // Named, not a structured binding: clang before 16 does not let a lambda capture those.
    const std::string& name = item.key();
    const nlohmann::json& src = item.value();
    if (!src.is_object())
      throw UserError(fmt::format("{}: val_sources '{}' must be an object with 'loss' (got {})",
                                  where, excerpt(name), excerpt(src.dump())));
    auto found = std::find_if(run.val_sources.begin(), run.val_sources.end(),
                              [&](const SourceSeries& s) { return s.name == name; });
    if (found == run.val_sources.end()) {
      run.val_sources.push_back({name, {}});
      found = run.val_sources.end() - 1;
    }
    double v;
    if (number_field(src, "loss", where + ": val_sources '" + name + "'", &v))
      found->val_loss.push_back({step, v});
  }
}

// An eval line's task scores ("eval_tasks"), each metric a series (stderr keys left out).
void read_tasks(const json& j, double step, const std::string& where, RunMetrics& run) {
  const auto it = j.find("eval_tasks");
  if (it == j.end()) return;
  if (!it->is_object())
    throw UserError(fmt::format("{}: eval_tasks must be an object (got {})", where,
                                excerpt(it->dump())));
  for (const auto& task : it->items()) {
    const std::string& name = task.key();
    if (!task.value().is_object())
      throw UserError(fmt::format("{}: eval_tasks '{}' must be an object of metrics (got {})",
                                  where, excerpt(name), excerpt(task.value().dump())));
    for (const auto& metric : task.value().items()) {
      const std::string& m = metric.key();
      if (m.size() > 7 && m.compare(m.size() - 7, 7, "_stderr") == 0) continue;
      const std::string series = name + " " + m;
      double v;
      if (!number_field(task.value(), m.c_str(), where + ": eval_tasks '" + name + "'", &v))
        continue;
      auto found = std::find_if(run.tasks.begin(), run.tasks.end(),
                                [&](const SourceSeries& s) { return s.name == series; });
      if (found == run.tasks.end()) {
        run.tasks.push_back({series, {}});
        found = run.tasks.end() - 1;
      }
      found->val_loss.push_back({step, v});
    }
  }
}

void read_line(const json& j, const std::string& where, RunMetrics& run) {
  if (!j.is_object()) throw UserError(where + ": not a JSON object");
  auto step_it = j.find("step");
  if (step_it == j.end() || !step_it->is_number_integer())
    throw UserError(fmt::format("{}: field 'step' must be an integer ({})", where,
                                step_it == j.end() ? "absent" : excerpt(step_it->dump())));
  const double step = static_cast<double>(step_it->get<int64_t>());
  double v;
  if (number_field(j, "loss", where, &v)) run.loss.push_back({step, v});
  if (number_field(j, "lr", where, &v)) run.lr.push_back({step, v});
  if (number_field(j, "grad_norm", where, &v)) run.grad_norm.push_back({step, v});
  if (number_field(j, "tokens", where, &v)) run.tokens.push_back({step, v});
  if (number_field(j, "val_loss", where, &v)) run.val_loss.push_back({step, v});
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  if (number_field(j, "rss_bytes", where, &v)) run.rss_gib.push_back({step, v / kGiB});
  if (number_field(j, "device_bytes_in_use", where, &v)) run.device_gib.push_back({step, v / kGiB});
  read_sources(j, step, where, run);
  read_tasks(j, step, where, run);
}

void sort_by_x(std::vector<PlotPoint>& pts) {
  std::stable_sort(pts.begin(), pts.end(),
                   [](const PlotPoint& a, const PlotPoint& b) { return a.x < b.x; });
}

}  // namespace

RunMetrics read_run_metrics(const std::string& arg) {
  RunMetrics run;
  run.path = metrics_path(arg);
  std::ifstream in(run.path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) throw UserError(fmt::format("plot: cannot read '{}'", run.path));
  const std::string text = ss.str();
  size_t pos = 0;
  for (int64_t line_no = 1; pos < text.size(); ++line_no) {
    size_t end = text.find('\n', pos);
    const bool complete = end != std::string::npos;
    if (!complete) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", run.path, line_no);
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      if (!complete) break;  // the line a live run is writing
      throw UserError(fmt::format("{}: not valid JSON: {}", where, excerpt(line)));
    }
    read_line(j, where, run);
  }
  for (auto* s : {&run.loss, &run.lr, &run.grad_norm, &run.val_loss, &run.tokens, &run.rss_gib,
                  &run.device_gib})
    sort_by_x(*s);
  for (SourceSeries& s : run.val_sources) sort_by_x(s.val_loss);
  for (SourceSeries& s : run.tasks) sort_by_x(s.val_loss);
  return run;
}

std::vector<std::string> plot_labels(const std::vector<std::string>& run_dirs,
                                     const std::vector<std::string>& given) {
  if (!given.empty() && given.size() != run_dirs.size())
    throw UserError(fmt::format("plot: --labels names {} label(s) for {} run(s)", given.size(),
                                run_dirs.size()));
  std::vector<std::string> labels = given;
  if (labels.empty()) {
    for (const std::string& d : run_dirs) {
      fs::path p = fs::absolute(d).lexically_normal();
      if (p.filename().empty()) p = p.parent_path();
      if (p.filename() == "metrics.jsonl") p = p.parent_path();
      labels.push_back(p.filename().string());
    }
  }
  std::map<std::string, int> seen;
  for (std::string& l : labels) {
    int n = ++seen[l];
    while (n > 1 && seen.count(fmt::format("{} ({})", l, n))) ++n;
    if (n > 1) l = fmt::format("{} ({})", l, n), seen[l] = 1;
  }
  return labels;
}

std::vector<PlotPoint> steps_to_tokens(const std::vector<PlotPoint>& by_step,
                                       const RunMetrics& run) {
  const std::vector<PlotPoint>& t = run.tokens;  // sorted by step
  if (t.empty() && !by_step.empty())
    throw UserError(fmt::format(
        "plot: {} has no 'tokens' on its step lines, so --x tokens cannot place its points; use "
        "--x step",
        run.path));
  std::vector<PlotPoint> out;
  out.reserve(by_step.size());
  for (const PlotPoint& p : by_step) {
    auto hi = std::lower_bound(t.begin(), t.end(), p.x,
                               [](const PlotPoint& a, double s) { return a.x < s; });
    double tokens;
    if (hi != t.end() && hi->x == p.x) {
      tokens = hi->y;
    } else if (hi != t.end() && hi != t.begin()) {
      auto lo = hi - 1;
      tokens = lo->y + (hi->y - lo->y) * (p.x - lo->x) / (hi->x - lo->x);
    } else {
      const PlotPoint& near = hi == t.end() ? t.back() : t.front();
      tokens = near.x > 0 ? near.y * p.x / near.x : near.y;
    }
    out.push_back({tokens, p.y});
  }
  return out;
}

Rgb run_color(size_t i) {
  static const uint32_t kTab10[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                    0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
  const uint32_t c = kTab10[i % 10];
  return {((c >> 16) & 255) / 255.0, ((c >> 8) & 255) / 255.0, (c & 255) / 255.0};
}

}  // namespace lmt
