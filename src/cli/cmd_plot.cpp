// `lmtrain plot`: one or more runs' metrics.jsonl drawn as a figure for a report (SVG or PNG):
// loss and validation loss, validation loss per source, learning rate and gradient norm, each
// run in its own colour. It reads the file as it is, so it also watches a run in progress.
#include <fmt/core.h>

#include "cli/commands.h"
#include "core/error.h"
#include "plot/plot.h"

namespace lmt::cli {

Run add_plot(CLI::App& app) {
  struct Opts {
    std::vector<std::string> runs, labels;
    std::string out, x = "step", title;
    int width = 1200, height = 800;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("runs", o->runs, "run directories (each holding metrics.jsonl)")
      ->required()
      ->type_name("RUN_DIR");
  app.add_option("--out", o->out, "the picture to write: FILE.svg or FILE.png")->required();
  app.add_option("--x", o->x, "the x axis: step or tokens (tokens trained on)")
      ->capture_default_str()
      ->check(CLI::IsMember({"step", "tokens"}));
  app.add_option("--labels", o->labels,
                 "legend labels, one per run, comma-separated (default: the directories' names)")
      ->delimiter(',');
  app.add_option("--title", o->title, "the figure's title (default: the labels)");
  app.add_option("--width", o->width, "width in pixels")->capture_default_str();
  app.add_option("--height", o->height, "height in pixels")->capture_default_str();
  return [o] {
    if (!plot_built_with_cairo())
      render_plot({}, PlotOptions{}, o->out);  // says how to get cairo (after the --out check)
    const std::vector<std::string> labels = plot_labels(o->runs, o->labels);
    std::vector<RunMetrics> runs;
    for (const std::string& dir : o->runs) runs.push_back(read_run_metrics(dir));
    PlotOptions opts;
    opts.x = o->x == "tokens" ? PlotX::tokens : PlotX::step;
    opts.width = o->width;
    opts.height = o->height;
    opts.title = o->title;
    if (opts.title.empty())
      for (size_t i = 0; i < labels.size(); ++i) opts.title += (i ? ", " : "") + labels[i];
    const PlotFigure fig = render_plot(plot_panels(runs, labels, opts.x), opts, o->out);
    std::string panels;
    for (const PlotPanel& p : fig.panels) panels += (panels.empty() ? "" : "; ") + p.title;
    fmt::print("plot: wrote {} ({} run{}: {})\n", o->out, runs.size(), runs.size() == 1 ? "" : "s",
               panels);
    return 0;
  };
}

}  // namespace lmt::cli
