// Lays out and draws `lmtrain plot`'s figure with cairo: the same drawing code for SVG (cairo's
// SVG surface) and PNG (an image surface). Panels sit in two rows (losses; learning rate,
// gradient norm and memory) left of one legend. Cairo's SVG surface would write text as glyph
// outlines, so for SVG the text is written as <text> elements instead (searchable, selectable,
// editable), at the positions measured with the same font. Output goes through write_text_file:
// atomic.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/text_file.h"
#include "plot/plot.h"

#ifdef LMTRAIN_HAVE_CAIRO
#include <cairo-svg.h>
#include <cairo.h>
#endif

namespace lmt {

namespace {

enum class Format { svg, png };

Format format_of(const std::string& out) {
  std::string ext = out.size() >= 4 ? out.substr(out.size() - 4) : "";
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (ext == ".svg") return Format::svg;
  if (ext == ".png") return Format::png;
  throw UserError(fmt::format("plot: --out '{}' must end in .svg or .png", out));
}

}  // namespace

#ifndef LMTRAIN_HAVE_CAIRO

bool plot_built_with_cairo() {
  return false;
}

PlotFigure render_plot(std::vector<PlotPanel>, const PlotOptions&, const std::string& out) {
  format_of(out);
  throw UserError(
      "plot: this lmtrain was built without cairo; run scripts/setup.sh (it installs "
      "libcairo2-dev and fonts-dejavu-core), then configure and build again");
}

#else

bool plot_built_with_cairo() {
  return true;
}

namespace {

constexpr const char* kFont = "DejaVu Sans";

struct TextItem {
  double x, y;  // the anchor point on the baseline
  std::string text;
  double size;
  bool bold;
  double anchor;  // 0 left, 0.5 centre, 1 right
  Rgb color;
};

std::string xml_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (c >= 0x20 || c == '\t') out += static_cast<char>(c);  // XML 1.0 has no other controls
    }
  }
  return out;
}

// Draws on a cairo context; text goes to cairo (PNG) or to <text> elements (SVG).
class Canvas {
 public:
  Canvas(cairo_t* cr, Format f, double scale) : cr_(cr), format_(f), s_(scale) {}
  double s() const { return s_; }
  cairo_t* cr() const { return cr_; }

  double width(const std::string& t, double size, bool bold = false) {
    font(size, bold);
    cairo_text_extents_t e;
    cairo_text_extents(cr_, t.c_str(), &e);
    return e.x_advance;
  }
  // Draws `t` with its vertical centre (cap height) at cy.
  void text(double x, double cy, const std::string& t, double size, double anchor,
            bool bold = false, Rgb color = {0.15, 0.15, 0.15}) {
    const double w = width(t, size, bold);
    const double baseline = cy + 0.36 * size;  // DejaVu Sans: cap height is 0.73 em
    if (format_ == Format::svg) {
      texts_.push_back({x, baseline, t, size, bold, anchor, color});
      return;
    }
    cairo_set_source_rgb(cr_, color.r, color.g, color.b);
    cairo_move_to(cr_, x - anchor * w, baseline);
    cairo_show_text(cr_, t.c_str());
    cairo_new_path(cr_);
  }
  // `t` cut to fit `max_w` (with an ellipsis), never inside a UTF-8 character.
  std::string fit(std::string t, double max_w, double size, bool bold = false) {
    if (width(t, size, bold) <= max_w) return t;
    while (!t.empty() && width(t + "\u2026", size, bold) > max_w) {
      t.pop_back();
      while (!t.empty() && (static_cast<unsigned char>(t.back()) & 0xC0) == 0x80) t.pop_back();
      if (!t.empty() && (static_cast<unsigned char>(t.back()) & 0xC0) == 0xC0) t.pop_back();
    }
    return t + "\u2026";
  }
  std::string svg_text_layer() const {
    std::string out = fmt::format("<g font-family=\"{}, Verdana, sans-serif\">\n", kFont);
    for (const TextItem& t : texts_) {
      const char* anchor = t.anchor == 0 ? "start" : t.anchor == 1 ? "end" : "middle";
      out += fmt::format(
          "<text x=\"{:.2f}\" y=\"{:.2f}\" font-size=\"{:.2f}\"{} text-anchor=\"{}\" "
          "fill=\"#{:02x}{:02x}{:02x}\">{}</text>\n",
          t.x, t.y, t.size, t.bold ? " font-weight=\"bold\"" : "", anchor,
          static_cast<int>(t.color.r * 255 + 0.5), static_cast<int>(t.color.g * 255 + 0.5),
          static_cast<int>(t.color.b * 255 + 0.5), xml_escape(t.text));
    }
    return out + "</g>\n";
  }

 private:
  void font(double size, bool bold) {
    cairo_select_font_face(cr_, kFont, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr_, size);
  }
  cairo_t* cr_;
  Format format_;
  double s_;
  std::vector<TextItem> texts_;
};

// Line and marker of a series style (see PlotSeries::style).
void set_line_style(Canvas& c, int style) {
  const double s = c.s();
  cairo_set_line_width(c.cr(), (style == 0 ? 1.8 : 1.6) * s);
  static const std::vector<std::vector<double>> kSourceDashes = {
      {2, 2.5}, {9, 3, 2, 3}, {4, 2}, {12, 3, 2, 3, 2, 3}};
  std::vector<double> dash;
  if (style == 1) dash = {7, 4};
  if (style == kDeviceMemoryStyle) dash = {1.5, 3};
  if (style >= 2) dash = kSourceDashes[static_cast<size_t>(style - 2) % kSourceDashes.size()];
  for (double& d : dash) d *= s;
  cairo_set_dash(c.cr(), dash.data(), static_cast<int>(dash.size()), 0);
}

void marker(Canvas& c, int style, double x, double y) {
  if (style == 0 || style == kDeviceMemoryStyle) return;
  cairo_t* cr = c.cr();
  const double r = 3.2 * c.s();
  switch (style < 2 ? 0 : 1 + (style - 2) % 4) {
    case 0:
    case 4:
      cairo_new_sub_path(cr);
      cairo_arc(cr, x, y, r, 0, 2 * M_PI);
      break;
    case 1:
      cairo_rectangle(cr, x - r * 0.85, y - r * 0.85, 1.7 * r, 1.7 * r);
      break;
    case 2:
      cairo_move_to(cr, x, y - 1.15 * r);
      cairo_line_to(cr, x + r, y + 0.75 * r);
      cairo_line_to(cr, x - r, y + 0.75 * r);
      cairo_close_path(cr);
      break;
    case 3:
      cairo_move_to(cr, x, y - 1.2 * r);
      cairo_line_to(cr, x + 1.2 * r, y);
      cairo_line_to(cr, x, y + 1.2 * r);
      cairo_line_to(cr, x - 1.2 * r, y);
      cairo_close_path(cr);
      break;
  }
}

double to_unit(const Axis& a, double v) {
  if (a.log) return (std::log10(v) - std::log10(a.lo)) / (std::log10(a.hi) - std::log10(a.lo));
  return (v - a.lo) / (a.hi - a.lo);
}

struct Fonts {
  double title, panel, tick, legend;
};

void draw_series(Canvas& c, const PlotPanel& p, const PlotSeries& s) {
  cairo_t* cr = c.cr();
  const Rgb col = run_color(s.run);
  std::vector<std::pair<double, double>> pts;
  bool pen_down = false;
  for (const PlotPoint& q : s.points) {
    if ((p.y.log && q.y <= 0) || (p.x.log && q.x <= 0)) {
      pen_down = false;  // no place on a log axis: a gap
      continue;
    }
    const double px = p.area.x + to_unit(p.x, q.x) * p.area.w;
    const double py = p.area.y + (1 - to_unit(p.y, q.y)) * p.area.h;
    if (pen_down) {
      cairo_line_to(cr, px, py);
    } else {
      cairo_move_to(cr, px, py);
      cairo_line_to(cr, px, py);  // a lone point still shows (round caps)
    }
    pen_down = true;
    pts.emplace_back(px, py);
  }
  cairo_set_source_rgb(cr, col.r, col.g, col.b);
  set_line_style(c, s.style);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_stroke(cr);
  if (s.style != 0 && pts.size() <= 60) {
    for (auto [x, y] : pts) marker(c, s.style, x, y);
    cairo_fill(cr);
  }
}

void draw_panel(Canvas& c, const PlotPanel& p, const Fonts& f, double title_y, bool x_name,
                const std::string& x_label) {
  cairo_t* cr = c.cr();
  const double s = c.s();
  const PlotRect& a = p.area;
  c.text(a.x, title_y, p.title, f.panel, 0, true);
  cairo_set_dash(cr, nullptr, 0, 0);
  cairo_set_line_width(cr, 1 * s);
  cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
  for (double t : p.x.ticks) {
    const double x = std::round(a.x + to_unit(p.x, t) * a.w) + 0.5;
    cairo_move_to(cr, x, a.y);
    cairo_line_to(cr, x, a.y + a.h);
  }
  for (double t : p.y.ticks) {
    const double y = std::round(a.y + (1 - to_unit(p.y, t)) * a.h) + 0.5;
    cairo_move_to(cr, a.x, y);
    cairo_line_to(cr, a.x + a.w, y);
  }
  cairo_stroke(cr);
  for (size_t i = 0; i < p.x.ticks.size(); ++i)
    c.text(a.x + to_unit(p.x, p.x.ticks[i]) * a.w, a.y + a.h + 0.95 * f.tick, p.x.labels[i], f.tick,
           0.5);
  for (size_t i = 0; i < p.y.ticks.size(); ++i)
    c.text(a.x - 6 * s, a.y + (1 - to_unit(p.y, p.y.ticks[i])) * a.h, p.y.labels[i], f.tick, 1);
  if (x_name) c.text(a.x + a.w / 2, a.y + a.h + 2.3 * f.tick, x_label, f.tick, 0.5);
  cairo_save(cr);
  cairo_rectangle(cr, a.x - 4 * s, a.y - 4 * s, a.w + 8 * s, a.h + 8 * s);
  cairo_clip(cr);
  for (const PlotSeries& ser : p.series) draw_series(c, p, ser);
  cairo_restore(cr);
  cairo_set_dash(cr, nullptr, 0, 0);
  cairo_set_line_width(cr, 1 * s);
  cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
  cairo_rectangle(cr, std::round(a.x) + 0.5, std::round(a.y) + 0.5, std::round(a.w),
                  std::round(a.h));
  cairo_stroke(cr);
}

struct LegendEntry {
  std::string label;
  size_t run;
  int style;
};

std::vector<LegendEntry> legend_entries(const std::vector<PlotPanel>& panels) {
  std::vector<LegendEntry> out;
  for (const PlotPanel& p : panels)
    for (const PlotSeries& s : p.series)
      if (std::none_of(out.begin(), out.end(),
                       [&](const LegendEntry& e) { return e.run == s.run && e.style == s.style; }))
        out.push_back({s.label, s.run, s.style});
  std::stable_sort(out.begin(), out.end(), [](const LegendEntry& a, const LegendEntry& b) {
    return a.run != b.run ? a.run < b.run : a.style < b.style;
  });
  return out;
}

// Legend in the right-hand column: a line sample and a label per entry, its font made smaller
// where many entries would run past `max_h`. Returns its box.
PlotRect draw_legend(Canvas& c, std::vector<LegendEntry>& entries, const Fonts& f, double right,
                     double top, double max_w, double max_h) {
  cairo_t* cr = c.cr();
  const double s = c.s(), pad = 10 * s, sample = 30 * s, gap = 8 * s;
  const double n = static_cast<double>(entries.size());
  const double font = std::max(6.0, std::min(f.legend, (max_h - 2 * pad) / (1.6 * n - 0.6)));
  const double row = font * 1.6;
  double text_w = 0;
  for (LegendEntry& e : entries) {
    e.label = c.fit(e.label, max_w - 2 * pad - sample - gap, font);
    text_w = std::max(text_w, c.width(e.label, font));
  }
  PlotRect box{0, top, 2 * pad + sample + gap + text_w, 2 * pad + row * n - 0.6 * font};
  box.x = right - box.w;
  cairo_rectangle(cr, box.x + 0.5, box.y + 0.5, box.w, box.h);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_fill_preserve(cr);
  cairo_set_dash(cr, nullptr, 0, 0);
  cairo_set_line_width(cr, 1 * s);
  cairo_set_source_rgb(cr, 0.8, 0.8, 0.8);
  cairo_stroke(cr);
  for (size_t i = 0; i < entries.size(); ++i) {
    // On a pixel's centre, so that a line about 1.5 pixels wide covers one row fully: off it, a
    // thin sample is blended over two rows and shows no pixel of its run's colour at all.
    const double cy = std::floor(box.y + pad + 0.5 * font + row * i) + 0.5;
    const Rgb col = run_color(entries[i].run);
    cairo_set_source_rgb(cr, col.r, col.g, col.b);
    set_line_style(c, entries[i].style);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_BUTT);
    cairo_move_to(cr, box.x + pad, cy);
    cairo_line_to(cr, box.x + pad + sample, cy);
    cairo_stroke(cr);
    if (entries[i].style != 0) {
      marker(c, entries[i].style, box.x + pad + sample / 2, cy);
      cairo_fill(cr);
    }
    c.text(box.x + pad + sample + gap, cy, entries[i].label, font, 0);
  }
  return box;
}

// Places and draws everything; returns what went where.
PlotFigure draw_figure(Canvas& c, std::vector<PlotPanel> panels, const PlotOptions& o) {
  const double s = c.s(), W = o.width, H = o.height, pad = 16 * s;
  const Fonts f{19 * s, 14 * s, 12 * s, 13 * s};
  cairo_set_source_rgb(c.cr(), 1, 1, 1);
  cairo_paint(c.cr());
  PlotFigure fig;
  fig.title = c.fit(o.title, W - 2 * pad, f.title, true);
  double top = pad;
  if (!fig.title.empty()) {
    c.text(W / 2, top + f.title / 2, fig.title, f.title, 0.5, true);
    top += 2.2 * f.title;
  }
  std::vector<LegendEntry> entries = legend_entries(panels);
  const double legend_top = top + 1.8 * f.panel;
  fig.legend = draw_legend(c, entries, f, W - pad, legend_top, 0.3 * W, H - pad - legend_top);
  for (const LegendEntry& e : entries) fig.legend_labels.push_back(e.label);

  // Two rows: the loss panels, then learning rate, gradient norm and memory (a row may be absent).
  std::vector<std::vector<PlotPanel*>> rows(2);
  for (PlotPanel& p : panels)
    rows[p.title.starts_with("Loss") || p.title.starts_with("Validation") ? 0 : 1].push_back(&p);
  std::erase_if(rows, [](const auto& r) { return r.empty(); });
  const double left = pad, right = fig.legend.x - 2 * pad, bottom = H - pad;
  const double row_h = (bottom - top) / static_cast<double>(rows.size());
  const std::string x_name = o.x == PlotX::tokens ? "tokens" : "step";
  double label_w = 0;  // the widest y tick label of any panel: data areas' left edges align
  for (const PlotPanel& p : panels)
    for (const std::string& l : p.y.labels) label_w = std::max(label_w, c.width(l, f.tick));
  for (size_t r = 0; r < rows.size(); ++r) {
    const bool last_row = r + 1 == rows.size();
    const double cell_w = (right - left - 28 * s * (rows[r].size() - 1)) / rows[r].size();
    for (size_t k = 0; k < rows[r].size(); ++k) {
      PlotPanel& p = *rows[r][k];
      const double cell_x = left + k * (cell_w + 28 * s), cell_y = top + r * row_h;
      const double under = (last_row ? 3.2 : 2.2) * f.tick + (last_row ? 0 : 10 * s);
      p.area = {cell_x + label_w + 8 * s, cell_y + 1.8 * f.panel, 0, 0};
      p.area.w = cell_x + cell_w - p.area.x;
      p.area.h = cell_y + row_h - under - p.area.y;
      draw_panel(c, p, f, cell_y + 0.6 * f.panel, last_row, x_name);
    }
  }
  fig.panels = std::move(panels);
  return fig;
}

cairo_status_t append_bytes(void* closure, const unsigned char* data, unsigned int n) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), n);
  return CAIRO_STATUS_SUCCESS;
}

void check(cairo_status_t st, const char* what) {
  if (st != CAIRO_STATUS_SUCCESS)
    throw UserError(fmt::format("plot: cairo failed to {}: {}", what, cairo_status_to_string(st)));
}

}  // namespace

PlotFigure render_plot(std::vector<PlotPanel> panels, const PlotOptions& o,
                       const std::string& out) {
  const Format format = format_of(out);
  if (o.width < 300 || o.height < 200 || o.width > 20000 || o.height > 20000)
    throw UserError(
        fmt::format("plot: --width {} --height {}: each must be in 300..20000 and "
                    "200..20000 pixels",
                    o.width, o.height));
  std::string bytes;
  cairo_surface_t* surface =
      format == Format::svg
          ? cairo_svg_surface_create_for_stream(append_bytes, &bytes, o.width, o.height)
          : cairo_image_surface_create(CAIRO_FORMAT_ARGB32, o.width, o.height);
  check(cairo_surface_status(surface), "make a surface");
  if (format == Format::svg) cairo_svg_surface_set_document_unit(surface, CAIRO_SVG_UNIT_PX);
  cairo_t* cr = cairo_create(surface);
  Canvas canvas(cr, format, std::max(0.6, std::min(o.width / 1200.0, o.height / 800.0)));
  PlotFigure fig;
  try {
    fig = draw_figure(canvas, std::move(panels), o);
  } catch (...) {
    cairo_destroy(cr);
    cairo_surface_destroy(surface);
    throw;
  }
  const cairo_status_t drawn = cairo_status(cr);
  cairo_destroy(cr);
  if (format == Format::png) {
    cairo_surface_flush(surface);
    check(cairo_surface_write_to_png_stream(surface, append_bytes, &bytes), "encode the PNG");
  } else {
    cairo_surface_finish(surface);
  }
  const cairo_status_t finished = cairo_surface_status(surface);
  cairo_surface_destroy(surface);
  check(drawn, "draw");
  check(finished, "finish the picture");
  if (format == Format::svg) {
    const size_t end = bytes.rfind("</svg>");
    LMT_CHECK(end != std::string::npos, "cairo's SVG has no </svg>");
    bytes.insert(end, canvas.svg_text_layer());
  }
  try {
    write_text_file(out, bytes);
  } catch (const UserError& e) {
    throw UserError(fmt::format("plot: --out: {}", e.what()));
  }
  return fig;
}

#endif

}  // namespace lmt
