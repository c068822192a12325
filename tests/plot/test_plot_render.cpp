// `lmtrain plot` drawn: two fake runs (one with validation sources) rendered to SVG and PNG. The
// SVG must be well-formed XML, carry the legend labels as text and hold exactly one stroked path
// per run and metric (plus its legend sample), so a missing series fails. The PNG must have the
// asked size and every run's colour inside every panel it has data in, and a run drawn alone must
// lack the other's colour. Then each user error of the command. A build without cairo fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "cli/cli_util.h"
#include "cli/test_seed.h"
#include "io/io_test_util.h"
#include "plot/plot.h"

#ifdef LMTRAIN_HAVE_CAIRO
#include <cairo.h>
#endif

namespace lmt {
namespace {

namespace fs = std::filesystem;

#ifndef LMTRAIN_HAVE_CAIRO

TEST(PlotRender, NeedsCairo) {
  FAIL() << "lmtrain was built without cairo, so `lmtrain plot` cannot draw; run "
            "scripts/setup.sh (libcairo2-dev, fonts-dejavu-core), then configure and build again";
}

#else

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Two runs: "alpha" (steps, evals) and "beta" (steps, evals with val_sources wiki and code),
// with fresh random noise and lengths.
struct Fixture {
  fs::path alpha, beta, out;
  Fixture() {
    std::mt19937 rng(test::fresh_seed("plot_fixture"));
    std::uniform_real_distribution<double> noise(-0.1, 0.1);
    out = test::temp_dir() / "plot_render";
    fs::remove_all(out);
    alpha = out / "alpha";
    beta = out / "beta";
    write(alpha, 37 + rng() % 20, 512, false, rng, noise);
    write(beta, 41 + rng() % 20, 1024, true, rng, noise);
  }
  static void write(const fs::path& dir, int steps, int tokens_per_step, bool sources,
                    std::mt19937& rng, std::uniform_real_distribution<double>& noise) {
    fs::create_directories(dir);
    std::ofstream f(dir / "metrics.jsonl");
    const double base = sources ? 2.5 : 3.0;
    for (int s = 1; s <= steps; ++s) {
      const double loss = base + 5.0 * std::exp(-s / 12.0) + noise(rng);
      f << "{\"step\":" << s << ",\"loss\":" << loss << ",\"lr\":" << 1e-3 * std::min(1.0, s / 10.0)
        << ",\"grad_norm\":" << 0.5 + 3.0 / s + noise(rng)
        << ",\"tokens_per_s\":1000,\"tokens\":" << s * tokens_per_step << "}\n";
      if (s % 10 == 0) {
        f << "{\"step\":" << s << ",\"val_loss\":" << loss + 0.2 << ",\"val_ppl\":1";
        if (sources)
          f << ",\"val_sources\":{\"wiki\":{\"loss\":" << loss + 0.1
            << ",\"ppl\":1,\"tokens\":64},\"code\":{\"loss\":" << loss + 0.4
            << ",\"ppl\":1,\"tokens\":64}}";
        f << "}\n";
      }
    }
  }
};

// A well-formedness check of XML as cairo and our text layer write it: every tag closed in
// order, one root, quoted attributes, only known entities. Returns the text of each <text>.
std::vector<std::string> check_xml(const std::string& x) {
  std::vector<std::string> stack, texts;
  int roots = 0;
  size_t i = 0;
  std::string current_text;
  bool in_text = false;
  while (i < x.size()) {
    if (x[i] != '<') {
      if (x[i] == '&') {
        const size_t semi = x.find(';', i);
        EXPECT_NE(semi, std::string::npos);
        const std::string ent = x.substr(i, semi - i + 1);
        EXPECT_TRUE(
            std::regex_match(ent, std::regex("&(amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);")))
            << ent;
        if (in_text) current_text += ent == "&amp;" ? "&" : ent == "&lt;" ? "<" : ent;
        i = semi + 1;
        continue;
      }
      if (in_text) current_text += x[i];
      ++i;
      continue;
    }
    if (x.compare(i, 4, "<!--") == 0) {
      i = x.find("-->", i) + 3;
      continue;
    }
    if (x.compare(i, 2, "<?") == 0 || x.compare(i, 2, "<!") == 0) {
      i = x.find('>', i) + 1;
      continue;
    }
    size_t j = i + 1;
    char quote = 0;
    for (; j < x.size() && (quote || x[j] != '>'); ++j)
      if (quote && x[j] == quote)
        quote = 0;
      else if (!quote && (x[j] == '"' || x[j] == '\''))
        quote = x[j];
    EXPECT_LT(j, x.size()) << "unterminated tag at " << i;
    if (j >= x.size()) break;
    const std::string tag = x.substr(i + 1, j - i - 1);
    i = j + 1;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      EXPECT_FALSE(stack.empty()) << "</" << name << "> closes nothing";
      if (stack.empty()) break;
      EXPECT_EQ(stack.back(), name) << "mismatched close";
      stack.pop_back();
      if (name == "text") texts.push_back(current_text), in_text = false;
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \t\n/"));
    EXPECT_TRUE(std::regex_match(name, std::regex("[A-Za-z_][-A-Za-z0-9_:.]*"))) << name;
    if (tag.back() == '/') continue;
    if (stack.empty()) ++roots;
    stack.push_back(name);
    if (name == "text") in_text = true, current_text.clear();
  }
  EXPECT_TRUE(stack.empty()) << "unclosed <" << (stack.empty() ? "" : stack.back()) << ">";
  EXPECT_EQ(roots, 1);
  return texts;
}

// Run index of an exact run colour, or -1.
int run_of(double r, double g, double b, double tol) {
  for (size_t k = 0; k < 10; ++k) {
    const Rgb c = run_color(k);
    if (std::fabs(c.r - r) <= tol && std::fabs(c.g - g) <= tol && std::fabs(c.b - b) <= tol)
      return static_cast<int>(k);
  }
  return -1;
}

TEST(PlotRender, SvgIsWellFormedWithLabelsAndOneStrokedPathPerSeries) {
  Fixture fx;
  const fs::path svg = fx.out / "plot.svg";
  Result r = run("plot '" + fx.alpha.string() + "' '" + fx.beta.string() + "' --out '" +
                 svg.string() + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote"), std::string::npos) << r.out;
  const std::string x = slurp(svg);
  ASSERT_EQ(x.rfind("<?xml", 0), 0u);
  const std::vector<std::string> texts = check_xml(x);
  const std::set<std::string> have(texts.begin(), texts.end());
  for (const char* want : {"alpha", "alpha val", "beta", "beta val", "beta val wiki",
                           "beta val code", "alpha, beta", "step"})
    EXPECT_TRUE(have.count(want)) << "no <text> " << want;
  for (const std::string title : {"Loss", "Validation loss by source", "Learning rate",
                                  "Gradient norm"})  // " (log scale)" may follow
    EXPECT_TRUE(std::any_of(have.begin(), have.end(),
                            [&](const std::string& t) { return t.starts_with(title); }))
        << "no panel title " << title;

  // Stroked paths by (run colour, dashed): cairo writes stroke:rgb(R%,G%,B%).
  std::map<std::pair<int, bool>, int> strokes;
  const std::regex path_re("<path[^>]*style=\"([^\"]*)\"");
  const std::regex stroke_re("stroke:rgb\\(([0-9.]+)%,([0-9.]+)%,([0-9.]+)%\\)");
  for (auto it = std::sregex_iterator(x.begin(), x.end(), path_re); it != std::sregex_iterator();
       ++it) {
    const std::string style = (*it)[1];
    std::smatch m;
    if (!std::regex_search(style, m, stroke_re)) continue;
    const int run =
        run_of(std::stod(m[1]) / 100, std::stod(m[2]) / 100, std::stod(m[3]) / 100, 1e-3);
    if (run < 0) continue;  // grid, frames
    const bool dashed = style.find("stroke-dasharray") != std::string::npos &&
                        style.find("stroke-dasharray:none") == std::string::npos;
    ++strokes[{run, dashed}];
  }
  // alpha: loss, lr, grad norm + a legend sample; val + a legend sample.
  EXPECT_EQ((strokes[{0, false}]), 4);
  EXPECT_EQ((strokes[{0, true}]), 2);
  // beta: the same, and each source in its panel + a legend sample.
  EXPECT_EQ((strokes[{1, false}]), 4);
  EXPECT_EQ((strokes[{1, true}]), 6);
  EXPECT_EQ(strokes.size(), 4u);                        // no third colour
  for (const auto& e : fs::directory_iterator(fx.out))  // the temporary file was renamed
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
}

uint32_t be32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t k = 0; k < 4; ++k) v = v << 8 | static_cast<unsigned char>(s[at + k]);
  return v;
}

// Pixels of run `run`'s colour (within a few levels: line edges are blended) in a rectangle.
int count_color(cairo_surface_t* img, int run, const PlotRect& r) {
  const int w = cairo_image_surface_get_width(img), h = cairo_image_surface_get_height(img);
  const int stride = cairo_image_surface_get_stride(img);
  const unsigned char* data = cairo_image_surface_get_data(img);
  int n = 0;
  for (int y = std::max(0, int(r.y)); y < std::min(h, int(r.y + r.h)); ++y)
    for (int x = std::max(0, int(r.x)); x < std::min(w, int(r.x + r.w)); ++x) {
      const uint32_t p = reinterpret_cast<const uint32_t*>(data + y * stride)[x];
      if (run_of(((p >> 16) & 255) / 255.0, ((p >> 8) & 255) / 255.0, (p & 255) / 255.0,
                 6 / 255.0) == run)
        ++n;
    }
  return n;
}

PlotFigure render(const std::vector<fs::path>& dirs, const fs::path& out, PlotOptions o = {}) {
  std::vector<std::string> names;
  for (const fs::path& d : dirs) names.push_back(d.string());
  const auto labels = plot_labels(names, {});
  std::vector<RunMetrics> runs;
  for (const std::string& n : names) runs.push_back(read_run_metrics(n));
  return render_plot(plot_panels(runs, labels, o.x), o, out.string());
}

TEST(PlotRender, PngHasTheSizeAndEveryRunsColourInEachOfItsPanels) {
  Fixture fx;
  const fs::path png = fx.out / "plot.png";
  PlotOptions o;
  o.width = 1000 + static_cast<int>(test::fresh_seed("plot_png") % 301);
  o.height = 700;
  o.x = PlotX::tokens;
  const PlotFigure fig = render({fx.alpha, fx.beta}, png, o);
  const std::string bytes = slurp(png);
  ASSERT_GT(bytes.size(), 33u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(bytes, 16), static_cast<uint32_t>(o.width));
  EXPECT_EQ(be32(bytes, 20), 700u);
  cairo_surface_t* img = cairo_image_surface_create_from_png(png.c_str());
  ASSERT_EQ(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
  EXPECT_EQ(cairo_image_surface_get_width(img), o.width);
  ASSERT_EQ(fig.panels.size(), 4u);
  for (const PlotPanel& p : fig.panels) {
    std::set<size_t> runs;
    for (const PlotSeries& s : p.series) runs.insert(s.run);
    for (int run : {0, 1})
      if (runs.count(static_cast<size_t>(run)))
        EXPECT_GT(count_color(img, run, p.area), 20) << p.title << " run " << run;
      else
        EXPECT_EQ(count_color(img, run, p.area), 0) << p.title << " run " << run;
  }
  EXPECT_EQ(fig.panels[1].title, "Validation loss by source");  // beta's only
  EXPECT_EQ(fig.legend_labels, (std::vector<std::string>{"alpha", "alpha val", "beta", "beta val",
                                                         "beta val code", "beta val wiki"}));
  for (int run : {0, 1}) EXPECT_GT(count_color(img, run, fig.legend), 20);
  cairo_surface_destroy(img);
}

TEST(PlotRender, ARunDrawnAloneLacksTheOthersColour) {
  Fixture fx;
  for (const fs::path& dir : {fx.alpha, fx.beta}) {
    const fs::path png = fx.out / (dir.filename().string() + ".png");
    Result r = run("plot '" + dir.string() + "' --out '" + png.string() + "'");
    ASSERT_EQ(r.code, 0) << r.out;
    cairo_surface_t* img = cairo_image_surface_create_from_png(png.c_str());
    ASSERT_EQ(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
    const PlotRect all{0, 0, 1200, 800};
    EXPECT_GT(count_color(img, 0, all), 100) << dir;  // drawn alone, a run is run 0
    EXPECT_EQ(count_color(img, 1, all), 0) << dir;
    cairo_surface_destroy(img);
  }
}

TEST(PlotCli, EachUserErrorIsOneMessageAndExitTwo) {
  Fixture fx;
  const std::string ok = "'" + fx.alpha.string() + "'";
  const fs::path out = fx.out / "keep.svg";
  ASSERT_EQ(run("plot " + ok + " --out '" + out.string() + "'").code, 0);
  const std::string before = slurp(out);
  auto expect = [&](const std::string& args, const std::string& msg) {
    Result r = run("plot " + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(msg), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(slurp(out), before) << "a failed plot touched the old picture";
  };
  const fs::path empty_dir = fx.out / "not_a_run";
  fs::create_directories(empty_dir);
  expect("'" + empty_dir.string() + "' --out '" + out.string() + "'",
         "'" + empty_dir.string() + "' has no metrics.jsonl");
  const fs::path bad = fx.out / "bad";
  fs::create_directories(bad);
  std::ofstream(bad / "metrics.jsonl") << "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":3,}\n";
  expect(ok + " '" + bad.string() + "' --out '" + out.string() + "'",
         (bad / "metrics.jsonl").string() + ":2: not valid JSON");
  const fs::path none = fx.out / "starting";
  fs::create_directories(none);
  std::ofstream(none / "metrics.jsonl") << "{\"step\":1,\"tokens_per_s\":5}\n";
  expect("'" + none.string() + "' --out '" + out.string() + "'", "no points to draw");
  expect(ok + " --out '" + (fx.out / "plot.jpg").string() + "'", "must end in .svg or .png");
  EXPECT_FALSE(fs::exists(fx.out / "plot.jpg"));
  const fs::path under_file = out / "plot.png";  // a path through a regular file
  expect(ok + " --out '" + under_file.string() + "'", "cannot write '" + under_file.string());
  expect(ok + " --out '" + (fx.out / "missing" / "p.svg").string() + "'", "cannot write");
  expect(ok + " '" + fx.beta.string() + "' --labels one --out '" + out.string() + "'",
         "--labels names 1 label(s) for 2 run(s)");
  expect(ok + " --width 10 --out '" + out.string() + "'", "--width 10");
  for (const auto& e : fs::directory_iterator(fx.out))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
}

#endif

}  // namespace
}  // namespace lmt
