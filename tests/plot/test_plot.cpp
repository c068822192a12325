// `lmtrain plot` without drawing: reading metrics.jsonl (errors name the file and line; a live
// run's half-written last line is left out), labels, step -> tokens, round ticks and panels.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/io_test_util.h"
#include "plot/plot.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

fs::path run_dir(const std::string& name, const std::string& metrics) {
  const fs::path dir = test::temp_dir() / "plot" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "metrics.jsonl", std::ios::binary) << metrics;
  return dir;
}

TEST(PlotRead, StepAndEvalLinesBecomeSeries) {
  const fs::path dir = run_dir(
      "read",
      "{\"step\":2,\"loss\":5.5,\"lr\":0.002,\"grad_norm\":1.5,\"tokens\":200}\n"
      "{\"step\":1,\"loss\":6.0,\"lr\":0.001,\"grad_norm\":2.0,\"tokens\":100}\n"
      "\n"
      "{\"step\":2,\"val_loss\":5.7,\"val_ppl\":300,\"val_sources\":{\"wiki\":{\"loss\":5.6,"
      "\"ppl\":270,\"tokens\":64},\"code\":{\"loss\":5.9,\"ppl\":365,\"tokens\":64}}}\n"
      "{\"step\":3,\"loss\":null,\"lr\":0.003,\"grad_norm\":1.0,\"tokens\":300}\n");
  const RunMetrics r = read_run_metrics(dir.string());
  ASSERT_EQ(r.loss.size(), 2u);  // the null (a NaN as nlohmann writes it) is a gap
  EXPECT_EQ(r.loss[0].x, 1);     // sorted by step
  EXPECT_EQ(r.loss[1].y, 5.5);
  EXPECT_EQ(r.lr.size(), 3u);
  EXPECT_EQ(r.grad_norm.size(), 3u);
  ASSERT_EQ(r.val_loss.size(), 1u);
  EXPECT_EQ(r.val_loss[0].y, 5.7);
  ASSERT_EQ(r.val_sources.size(), 2u);
  EXPECT_EQ(r.val_sources[0].name, "code");  // nlohmann's objects iterate in key order
  EXPECT_EQ(r.val_sources[1].val_loss.at(0).y, 5.6);
  EXPECT_EQ(r.tokens.size(), 3u);
}

// eval.tasks' lines: one series a task and metric ("<task> <metric>"), the standard errors left
// out, and a "Task scores" panel to draw them in.
TEST(PlotRead, TaskScoresBecomeSeriesAndAPanel) {
  const fs::path dir = run_dir(
      "tasks",
      "{\"step\":1,\"loss\":6.0,\"lr\":0.001,\"grad_norm\":2.0,\"tokens\":100}\n"
      "{\"step\":2,\"eval_tasks\":{\"arc\":{\"acc\":0.5,\"acc_stderr\":0.05}}}\n"
      "{\"step\":1,\"eval_tasks\":{\"arc\":{\"acc\":0.25,\"acc_stderr\":0.04},"
      "\"wiki\":{\"bits_per_byte\":1.5}}}\n");
  const RunMetrics r = read_run_metrics(dir.string());
  ASSERT_EQ(r.tasks.size(), 2u);
  EXPECT_EQ(r.tasks[0].name, "arc acc");
  ASSERT_EQ(r.tasks[0].val_loss.size(), 2u);
  EXPECT_EQ(r.tasks[0].val_loss[0].x, 1);  // sorted by step
  EXPECT_EQ(r.tasks[0].val_loss[1].y, 0.5);
  EXPECT_EQ(r.tasks[1].name, "wiki bits_per_byte");
  const std::vector<PlotPanel> panels = plot_panels({r}, {"run"}, PlotX::step);
  bool found = false;
  for (const PlotPanel& p : panels)
    if (p.title == "Task scores (eval.tasks)") found = p.series.size() == 2;
  EXPECT_TRUE(found);
  const fs::path bad = run_dir("bad_tasks", "{\"step\":1,\"eval_tasks\":{\"arc\":[1]}}\n");
  test::expect_user_error([&] { read_run_metrics(bad.string()); },
                          {"metrics.jsonl:1:", "eval_tasks 'arc' must be an object"});
}

TEST(PlotRead, ErrorsNameTheFileAndLine) {
  test::expect_user_error([] { read_run_metrics((test::temp_dir() / "plot_none").string()); },
                          {"has no metrics.jsonl"});
  fs::path d =
      run_dir("bad_json", "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":\n{\"step\":3}\n");
  test::expect_user_error([&] { read_run_metrics(d.string()); },
                          {(d / "metrics.jsonl").string() + ":2:", "not valid JSON"});
  d = run_dir("bad_type", "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":\"low\"}\n");
  test::expect_user_error([&] { read_run_metrics(d.string()); },
                          {"metrics.jsonl:2:", "'loss' must be a number"});
  d = run_dir("no_step", "{\"loss\":2}\n");
  test::expect_user_error([&] { read_run_metrics(d.string()); },
                          {"metrics.jsonl:1:", "'step' must be an integer"});
  d = run_dir("bad_sources", "{\"step\":1,\"val_loss\":2,\"val_sources\":[1]}\n");
  test::expect_user_error([&] { read_run_metrics(d.string()); },
                          {"metrics.jsonl:1:", "'val_sources' must be an object"});
}

TEST(PlotRead, ALiveRunsHalfWrittenLastLineIsLeftOut) {
  const fs::path d = run_dir("live", "{\"step\":1,\"loss\":2}\n{\"step\":2,\"lo");
  EXPECT_EQ(read_run_metrics(d.string()).loss.size(), 1u);
  // The same text ended by a newline is a finished line, and malformed.
  const fs::path e = run_dir("live_done", "{\"step\":1,\"loss\":2}\n{\"step\":2,\"lo\n");
  test::expect_user_error([&] { read_run_metrics(e.string()); }, {"metrics.jsonl:2:"});
}

TEST(PlotLabels, DirectoryNamesMadeUniqueOrGiven) {
  EXPECT_EQ(plot_labels({"runs/a/", "other/a", "runs/b", "x/a"}, {}),
            (std::vector<std::string>{"a", "a (2)", "b", "a (3)"}));
  EXPECT_EQ(plot_labels({"r1", "r2"}, {"base", "base"}),
            (std::vector<std::string>{"base", "base (2)"}));
  test::expect_user_error(
      [] {
        plot_labels({"r1", "r2"}, {"one"});
      },
      {"--labels names 1 label(s) for 2 run(s)"});
}

TEST(PlotTokens, EvalStepsMapThroughTheStepLines) {
  RunMetrics r;
  r.path = "m.jsonl";
  r.tokens = {{10, 1000}, {20, 2000}, {30, 3000}};
  const auto t = steps_to_tokens({{20, 1}, {25, 2}, {5, 3}, {40, 4}}, r);
  EXPECT_EQ(t[0].x, 2000);  // a step line's own count
  EXPECT_EQ(t[1].x, 2500);  // between two
  EXPECT_EQ(t[2].x, 500);   // before the first: proportional
  EXPECT_EQ(t[3].x, 4000);  // after the last
  EXPECT_EQ(t[3].y, 4);
  r.tokens.clear();
  test::expect_user_error(
      [&] {
        steps_to_tokens({{1, 1}}, r);
      },
      {"m.jsonl has no 'tokens'", "--x step"});
}

TEST(PlotAxis, RoundTicksAndTheirLabels) {
  Axis a = linear_axis(0.03, 0.97);
  EXPECT_EQ(a.labels, (std::vector<std::string>{"0", "0.2", "0.4", "0.6", "0.8", "1"}));
  EXPECT_EQ(a.lo, 0);
  EXPECT_NEAR(a.hi, 1, 1e-12);
  a = linear_axis(1, 60, 6);
  EXPECT_EQ(a.labels, (std::vector<std::string>{"0", "10", "20", "30", "40", "50", "60"}));
  a = linear_axis(0, 3e-4, 6);
  EXPECT_EQ(a.labels,
            (std::vector<std::string>{"0", "5e-5", "1e-4", "1.5e-4", "2e-4", "2.5e-4", "3e-4"}));
  a = linear_axis(0, 1.9e6, 4);
  EXPECT_EQ(a.labels, (std::vector<std::string>{"0", "0.5M", "1M", "1.5M", "2M"}));
  a = linear_axis(5.3, 7.62);
  EXPECT_EQ(a.labels, (std::vector<std::string>{"5", "5.5", "6", "6.5", "7", "7.5", "8"}));
  EXPECT_EQ(tick_labels({0, 2500, 5000, 7500, 10000}, false),
            (std::vector<std::string>{"0", "2.5k", "5k", "7.5k", "10k"}));
  a = linear_axis(2, 2);  // one value: a range around it
  EXPECT_LT(a.lo, 2);
  EXPECT_GT(a.hi, 2);
}

TEST(PlotAxis, LogTicks) {
  Axis a = log_axis(0.3, 45);
  EXPECT_EQ(a.labels, (std::vector<std::string>{"0.2", "0.5", "1", "2", "5", "10", "20", "50"}));
  EXPECT_TRUE(a.log);
  a = log_axis(2.6, 9.1);  // under a decade: round linear ticks
  EXPECT_EQ(a.labels, (std::vector<std::string>{"2", "4", "6", "8", "10"}));
  a = log_axis(1e-3, 1e4);  // many decades: powers of ten
  EXPECT_EQ(a.labels.front(), "1e-3");
  EXPECT_EQ(a.labels.back(), "10k");
  EXPECT_EQ(a.ticks.size(), 8u);
  a = log_axis(0.36, 3.4);  // the linear ticks' 0 is dropped; a round value ends the axis
  EXPECT_EQ(a.labels, (std::vector<std::string>{"0.3", "1", "2", "3", "4"}));
  EXPECT_EQ(a.lo, a.ticks.front());
  a = log_axis(0.15, 0.9);
  EXPECT_EQ(a.labels, (std::vector<std::string>{"0.15", "0.2", "0.4", "0.6", "0.8", "1"}));
}

TEST(PlotPanels, SeriesPerRunAndMetric) {
  RunMetrics a, b;
  a.path = "a/metrics.jsonl";
  b.path = "b/metrics.jsonl";
  for (int s = 1; s <= 30; ++s) {
    a.loss.push_back({double(s), 8.0 / s});
    a.lr.push_back({double(s), 1e-3});
    b.grad_norm.push_back({double(s), 1.0 + s % 3});
  }
  b.val_sources = {{"wiki", {{10, 4}, {20, 3}}}};
  const auto panels = plot_panels({a, b}, {"a", "b"}, PlotX::step);
  ASSERT_EQ(panels.size(), 4u);
  EXPECT_EQ(panels[0].title, "Loss (log scale)");  // 8 .. 0.27 spans more than 3x
  EXPECT_TRUE(panels[0].y.log);
  EXPECT_EQ(panels[1].title, "Validation loss by source");
  ASSERT_EQ(panels[1].series.size(), 1u);
  EXPECT_EQ(panels[1].series[0].label, "b val wiki");
  EXPECT_EQ(panels[1].series[0].run, 1u);
  EXPECT_EQ(panels[1].series[0].style, 2);
  EXPECT_EQ(panels[2].title, "Learning rate");
  EXPECT_FALSE(panels[3].y.log);  // 1 .. 3: linear
  EXPECT_EQ(panels[0].x.lo, 0);   // steps from 0, the same on every panel
  EXPECT_EQ(panels[3].x.hi, panels[0].x.hi);
  RunMetrics empty;
  empty.path = "c/metrics.jsonl";
  test::expect_user_error(
      [&] {
        plot_panels({a, empty}, {"a", "c"}, PlotX::step);
      },
      {"no points to draw", "c/metrics.jsonl"});
}

// Step lines' memory (metrics.jsonl bytes) becomes a memory panel in GiB: the process's resident
// set solid under the run's label, the device's memory dotted; none without the fields.
TEST(PlotPanels, MemoryPanelWhenStepLinesCarryMemory) {
  const fs::path dir =
      run_dir("memory",
              "{\"step\":1,\"loss\":6.0,\"rss_bytes\":1073741824,\"rss_peak_bytes\":2147483648,"
              "\"device_bytes_in_use\":3221225472}\n"
              "{\"step\":2,\"loss\":5.0,\"rss_bytes\":1610612736,\"device_bytes_in_use\":"
              "4294967296}\n");
  const RunMetrics r = read_run_metrics(dir.string());
  ASSERT_EQ(r.rss_gib.size(), 2u);
  EXPECT_EQ(r.rss_gib[0].y, 1.0);
  EXPECT_EQ(r.rss_gib[1].y, 1.5);
  ASSERT_EQ(r.device_gib.size(), 2u);
  EXPECT_EQ(r.device_gib[1].y, 4.0);
  const auto panels = plot_panels({r}, {"a"}, PlotX::step);
  ASSERT_EQ(panels.size(), 2u);
  EXPECT_EQ(panels[1].title, "Memory (GiB)");
  EXPECT_FALSE(panels[1].y.log);
  ASSERT_EQ(panels[1].series.size(), 2u);
  EXPECT_EQ(panels[1].series[0].label, "a");
  EXPECT_EQ(panels[1].series[0].style, 0);
  EXPECT_EQ(panels[1].series[1].label, "a device");
  EXPECT_EQ(panels[1].series[1].style, kDeviceMemoryStyle);
  EXPECT_LE(panels[1].y.lo, 1.0);
  EXPECT_GE(panels[1].y.hi, 4.0);

  const fs::path cpu =
      run_dir("memory_cpu", "{\"step\":1,\"loss\":6.0,\"rss_bytes\":1073741824}\n");
  const auto cpu_panels = plot_panels({read_run_metrics(cpu.string())}, {"c"}, PlotX::step);
  ASSERT_EQ(cpu_panels.size(), 2u);
  EXPECT_EQ(cpu_panels[1].series.size(), 1u);  // no device line
  const fs::path none = run_dir("memory_none", "{\"step\":1,\"loss\":6.0}\n");
  const auto plain = plot_panels({read_run_metrics(none.string())}, {"n"}, PlotX::step);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].title, "Loss");
}

}  // namespace
}  // namespace lmt
