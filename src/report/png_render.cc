#include "report/png_render.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>

#include <cairo.h>  // types and constants only: libcairo.so.2 is loaded at run time
#include <dlfcn.h>
#include <fmt/format.h>

#include "base/stats.h"

namespace stallscope::report {
namespace {

namespace fs = std::filesystem;

// Every cairo function the figures call.
// clang-format off
#define STALLSCOPE_CAIRO_FUNCTIONS(X) \
  X(destroy) X(surface_destroy) X(clip) X(create) X(debug_reset_static_data) \
  X(fill) X(fill_preserve) X(image_surface_create) X(line_to) X(move_to) \
  X(paint) X(rectangle) X(rel_line_to) X(restore) X(rotate) \
  X(save) X(select_font_face) X(set_dash) X(set_font_size) X(set_line_join) \
  X(set_line_width) X(set_source_rgb) X(show_text) X(status) X(status_to_string) \
  X(stroke) X(surface_flush) X(surface_write_to_png) X(text_extents) X(translate)
// clang-format on

/// cairo, loaded with dlopen on the first figure (as NVML is): the binary does not need
/// libcairo.so.2 (and its X11, fontconfig and freetype) to start, so the bundle carries none
/// of them and works wherever its glibc does; `--png` alone needs cairo on the machine.
struct CairoApi {
#define STALLSCOPE_CAIRO_MEMBER(name) decltype(&::cairo_##name) name = nullptr;
  STALLSCOPE_CAIRO_FUNCTIONS(STALLSCOPE_CAIRO_MEMBER)
#undef STALLSCOPE_CAIRO_MEMBER
};

struct LoadedCairo {
  CairoApi api;
  std::string error;  ///< why cairo is not usable; empty when loaded
};

const LoadedCairo& LoadCairo() {
  static const LoadedCairo loaded = [] {
    LoadedCairo out;
    auto fail = [&out](std::string_view what) {
      const char* why = dlerror();
      out.error = fmt::format("{}: {}", what, why != nullptr ? why : "not found");
      return out;
    };
    void* handle = dlopen("libcairo.so.2", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return fail("libcairo.so.2");
#define STALLSCOPE_CAIRO_LOAD(name)                                                          \
  out.api.name = reinterpret_cast<decltype(&::cairo_##name)>(dlsym(handle, "cairo_" #name)); \
  if (out.api.name == nullptr) return fail("cairo_" #name);
    STALLSCOPE_CAIRO_FUNCTIONS(STALLSCOPE_CAIRO_LOAD)
#undef STALLSCOPE_CAIRO_LOAD
    return out;
  }();
  return loaded;
}

const CairoApi& Cairo() { return LoadCairo().api; }

struct Rgb {
  double r, g, b;
};

// Matplotlib's tab10: readable on white and told apart by most colour-blind readers.
constexpr std::array<Rgb, 10> kPalette = {{{0.122, 0.467, 0.706},
                                           {1.000, 0.498, 0.055},
                                           {0.173, 0.627, 0.173},
                                           {0.839, 0.153, 0.157},
                                           {0.580, 0.404, 0.741},
                                           {0.549, 0.337, 0.294},
                                           {0.890, 0.467, 0.761},
                                           {0.498, 0.498, 0.498},
                                           {0.737, 0.741, 0.133},
                                           {0.090, 0.745, 0.812}}};
constexpr Rgb kInk{0.15, 0.15, 0.15};
constexpr Rgb kGrid{0.88, 0.88, 0.88};
constexpr Rgb kPlotBackground{0.97, 0.97, 0.98};
constexpr Rgb kHostCpu{0.35, 0.35, 0.35};

constexpr size_t kNameChars = 40;     // a GPU name in a legend or under a bar
constexpr size_t kLegendRows = 16;    // more GPUs than this: "+N more"
constexpr size_t kBarLabelsMax = 16;  // more bars than this: every k-th label only
constexpr double kTitlePt = 20;
constexpr double kLabelPt = 13;

Rgb GpuColor(size_t i) { return kPalette[i % kPalette.size()]; }

struct SurfaceDelete {
  void operator()(cairo_surface_t* s) const { Cairo().surface_destroy(s); }
};
struct ContextDelete {
  void operator()(cairo_t* c) const { Cairo().destroy(c); }
};
using SurfacePtr = std::unique_ptr<cairo_surface_t, SurfaceDelete>;
using ContextPtr = std::unique_ptr<cairo_t, ContextDelete>;

struct Rect {
  double x, y, w, h;
  double Right() const { return x + w; }
  double Bottom() const { return y + h; }
};

/// A value range mapped onto a pixel range.
struct Scale {
  double lo, hi;
  double px_lo, px_hi;
  double Map(double v) const {
    double f = hi > lo ? (v - lo) / (hi - lo) : 0.0;
    if (!std::isfinite(f)) f = f > 0 ? 1 : 0;  // NaN: the axis; cairo must never see one
    return px_lo + std::clamp(f, 0.0, 1.0) * (px_hi - px_lo);
  }
};

void SetColor(cairo_t* cr, Rgb c) { Cairo().set_source_rgb(cr, c.r, c.g, c.b); }

enum class Align { kLeft, kCenter, kRight };

/// Draws `text` (already PngLabel-safe or our own) with its baseline at y.
void Text(cairo_t* cr, double x, double y, const std::string& text, double pt, Align align,
          bool bold = false) {
  Cairo().select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  Cairo().set_font_size(cr, pt);
  cairo_text_extents_t ext{};
  Cairo().text_extents(cr, text.c_str(), &ext);
  double dx = align == Align::kLeft     ? 0
              : align == Align::kCenter ? ext.x_advance / 2
                                        : ext.x_advance;
  Cairo().move_to(cr, x - dx, y);
  Cairo().show_text(cr, text.c_str());
}

/// A step of 1, 2 or 5 × 10^k giving about `target` intervals over `range`.
double NiceStep(double range, int target) {
  if (!(range > 0) || !std::isfinite(range)) return 1;
  double raw = range / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

std::string TickText(double v, double step) {
  return step >= 1 ? fmt::format("{:.0f}", v) : fmt::format("{:.1f}", v);
}

/// The tick values of `s`: about `target` multiples of a nice step, at most 4 × target (a range
/// from hostile data cannot loop for long).
std::vector<double> Ticks(const Scale& s, int target, double* step) {
  *step = NiceStep(s.hi - s.lo, target);
  std::vector<double> out;
  for (double v = std::ceil(s.lo / *step) * *step;
       v <= s.hi + *step * 1e-6 && out.size() < static_cast<size_t>(4 * target); v += *step)
    out.push_back(v);
  return out;
}

/// Plot background, grid and tick labels of both axes, and the axis titles. `x` null: no
/// vertical grid (bar charts); `x_title` empty: the grid without labels (a panel above another).
void DrawAxes(cairo_t* cr, const Rect& plot, const Scale* x, const Scale& y,
              const std::string& x_title, const std::string& y_title) {
  SetColor(cr, kPlotBackground);
  Cairo().rectangle(cr, plot.x, plot.y, plot.w, plot.h);
  Cairo().fill(cr);
  Cairo().set_line_width(cr, 1);
  double ystep = 1;
  for (double v : Ticks(y, 5, &ystep)) {
    double py = std::round(y.Map(v)) + 0.5;
    SetColor(cr, kGrid);
    Cairo().move_to(cr, plot.x, py);
    Cairo().line_to(cr, plot.Right(), py);
    Cairo().stroke(cr);
    SetColor(cr, kInk);
    Text(cr, plot.x - 8, py + 4, TickText(v, ystep), kLabelPt - 1, Align::kRight);
  }
  double xstep = 1;
  for (double v : x != nullptr ? Ticks(*x, 8, &xstep) : std::vector<double>{}) {
    double px = std::round(x->Map(v)) + 0.5;
    SetColor(cr, kGrid);
    Cairo().move_to(cr, px, plot.y);
    Cairo().line_to(cr, px, plot.Bottom());
    Cairo().stroke(cr);
    SetColor(cr, kInk);
    if (!x_title.empty())
      Text(cr, px, plot.Bottom() + 18, TickText(v, xstep), kLabelPt - 1, Align::kCenter);
  }
  if (!x_title.empty())
    Text(cr, plot.x + plot.w / 2, plot.Bottom() + 40, x_title, kLabelPt, Align::kCenter);
  SetColor(cr, kInk);
  Cairo().rectangle(cr, plot.x + 0.5, plot.y + 0.5, plot.w - 1, plot.h - 1);
  Cairo().stroke(cr);
  Cairo().save(cr);
  Cairo().translate(cr, plot.x - 58, plot.y + plot.h / 2);
  Cairo().rotate(cr, -M_PI / 2);
  Text(cr, 0, 0, y_title, kLabelPt, Align::kCenter);
  Cairo().restore(cr);
}

void DrawLine(cairo_t* cr, const Rect& plot, const Scale& x, const Scale& y,
              const std::vector<diagnose::SeriesPoint>& points, Rgb color, double width) {
  if (points.empty()) return;
  Cairo().save(cr);
  Cairo().rectangle(cr, plot.x, plot.y, plot.w, plot.h);
  Cairo().clip(cr);
  SetColor(cr, color);
  Cairo().set_line_width(cr, width);
  Cairo().set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  bool pen_down = false;
  for (const auto& p : points) {
    // NaN or infinity (bad data is data): a gap in the line, not a cairo error state.
    if (!std::isfinite(p.t_s) || !std::isfinite(p.value)) {
      pen_down = false;
      continue;
    }
    if (pen_down) {
      Cairo().line_to(cr, x.Map(p.t_s), y.Map(p.value));
    } else {
      Cairo().move_to(cr, x.Map(p.t_s), y.Map(p.value));
      Cairo().rel_line_to(cr, 0.5, 0);  // a lone point: a short dash, not an invisible path
      pen_down = true;
    }
  }
  Cairo().stroke(cr);
  Cairo().restore(cr);
}

struct LegendEntry {
  std::string text;
  Rgb color;
};

/// A column of colour swatches and labels from (x, y) down; more than kLegendRows: "+N more".
void DrawLegend(cairo_t* cr, double x, double y, const std::vector<LegendEntry>& entries) {
  for (size_t i = 0; i < entries.size() && i <= kLegendRows; ++i) {
    double row_y = y + static_cast<double>(i) * 20;
    if (i == kLegendRows) {
      SetColor(cr, kInk);
      Text(cr, x, row_y + 5, fmt::format("+{} more", entries.size() - i), kLabelPt - 1,
           Align::kLeft);
      break;
    }
    SetColor(cr, entries[i].color);
    Cairo().rectangle(cr, x, row_y - 5, 18, 4);
    Cairo().fill(cr);
    SetColor(cr, kInk);
    Text(cr, x + 24, row_y + 2, entries[i].text, kLabelPt - 1, Align::kLeft);
  }
}

const diagnose::Series* FindSeries(const std::vector<diagnose::Series>& series,
                                   const std::string& name) {
  for (const auto& s : series)
    if (s.name == name && !s.points.empty()) return &s;
  return nullptr;
}

std::string GpuLabel(const analysis::GpuSummary& g) {
  return g.name.empty() ? fmt::format("GPU {}", g.index)
                        : fmt::format("GPU {} {}", g.index, PngLabel(g.name, kNameChars));
}

double LastTime(const std::vector<const diagnose::Series*>& lines) {
  double t = 0;
  for (const auto* s : lines)
    if (s != nullptr)
      for (const auto& p : s->points) t = std::max(t, std::isfinite(p.t_s) ? p.t_s : 0.0);
  return t > 0 ? t : 1;
}

void WhitePage(cairo_t* cr) {
  Cairo().set_source_rgb(cr, 1, 1, 1);
  Cairo().paint(cr);
}

/// Figure 1: GPU utilization over time (fine samples where recorded), host CPU under it.
void DrawUtilization(cairo_t* cr, const analysis::RecordingSummary& m,
                     const std::vector<diagnose::Series>& series) {
  WhitePage(cr);
  std::vector<const diagnose::Series*> gpu_lines;
  bool fine = false;
  for (size_t i = 0; i < m.gpus.size(); ++i) {
    const auto* s = FindSeries(series, fmt::format("gpu{}.utilization_fine_pct", i));
    fine = fine || s != nullptr;
    if (s == nullptr) s = FindSeries(series, fmt::format("gpu{}.utilization_pct", i));
    gpu_lines.push_back(s);
  }
  const auto* host = FindSeries(series, "host.cpu_busy_pct");
  std::vector<const diagnose::Series*> all = gpu_lines;
  all.push_back(host);
  double t_end = LastTime(all);
  SetColor(cr, kInk);
  Text(cr, 40, 36,
       m.gpus.empty()
           ? std::string("Host CPU busy over time (no GPU recorded)")
           : fmt::format("GPU utilization over time ({} GPU{}{})", m.gpus.size(),
                         m.gpus.size() == 1 ? "" : "s", fine ? ", sub-second samples" : ""),
       kTitlePt, Align::kLeft, true);
  const double left = 90, right = kPngWidthPx - 290;
  Scale x{0, t_end, left, right};
  std::vector<LegendEntry> legend;
  if (!m.gpus.empty()) {
    Rect top{left, 60, right - left, 380};
    Scale y{0, 100, top.Bottom(), top.y};
    DrawAxes(cr, top, &x, y, "", "GPU utilization (%)");
    for (size_t i = 0; i < gpu_lines.size(); ++i) {
      if (gpu_lines[i] != nullptr) DrawLine(cr, top, x, y, gpu_lines[i]->points, GpuColor(i), 1.6);
      legend.push_back(
          {GpuLabel(m.gpus[i]) + (gpu_lines[i] == nullptr ? " (no data)" : ""), GpuColor(i)});
    }
  }
  Rect bottom =
      m.gpus.empty() ? Rect{left, 60, right - left, 560} : Rect{left, 470, right - left, 150};
  Scale yb{0, 100, bottom.Bottom(), bottom.y};
  DrawAxes(cr, bottom, &x, yb, "time since job start (s)", "host CPU busy (%)");
  if (host != nullptr) DrawLine(cr, bottom, x, yb, host->points, kHostCpu, 1.4);
  legend.push_back({host != nullptr ? "host CPU busy" : "host CPU busy (no data)", kHostCpu});
  DrawLegend(cr, right + 24, 80, legend);
}

/// MiB, or GiB when the largest value is over 4 GiB (tick labels stay short).
struct MemUnit {
  double div;
  const char* name;
};
MemUnit PickMemUnit(double max_mib) {
  return max_mib > 4096 ? MemUnit{1024, "GiB"} : MemUnit{1, "MiB"};
}

/// Bar slots for `n` GPUs across `plot`: the centre and width of bar i.
struct Bars {
  Rect plot;
  size_t n;
  double Slot() const { return plot.w / static_cast<double>(std::max<size_t>(n, 1)); }
  double Center(size_t i) const { return plot.x + Slot() * (static_cast<double>(i) + 0.5); }
  double Width() const { return std::min(Slot() * 0.6, 120.0); }
  /// Labels every k-th bar when there are many.
  bool Labelled(size_t i) const { return i % ((n + kBarLabelsMax - 1) / kBarLabelsMax) == 0; }
};

void BarLabels(cairo_t* cr, const Bars& bars, const analysis::RecordingSummary& m) {
  SetColor(cr, kInk);
  for (size_t i = 0; i < bars.n; ++i) {
    if (!bars.Labelled(i)) continue;
    double cx = bars.Center(i);
    Text(cr, cx, bars.plot.Bottom() + 20, fmt::format("GPU {}", m.gpus[i].index), kLabelPt,
         Align::kCenter);
    // A name fits under the bar only when there are few bars.
    if (bars.n <= 8 && !m.gpus[i].name.empty())
      Text(cr, cx, bars.plot.Bottom() + 38,
           PngLabel(m.gpus[i].name, static_cast<size_t>(bars.Slot() / 8)), kLabelPt - 3,
           Align::kCenter);
  }
}

std::string BalanceCaption(const analysis::Balance& b) {
  if (!b.cv_pct) return "CV n/a (needs 2+ GPUs with data)";
  return fmt::format("CV {:.1f}% ({})", *b.cv_pct,
                     b.quality ? BalanceClassName(*b.quality) : std::string_view("?"));
}

void DrawMemoryBar(cairo_t* cr, const Bars& bars, const Scale& y, size_t i,
                   const analysis::GpuSummary& g, MemUnit u) {
  double cx = bars.Center(i), w = bars.Width();
  if (g.memory_total_mib) {  // the capacity: an outlined pale bar behind
    double top = y.Map(*g.memory_total_mib / u.div);
    Cairo().set_source_rgb(cr, 0.90, 0.92, 0.95);
    Cairo().rectangle(cr, cx - w / 2, top, w, y.px_lo - top);
    Cairo().fill_preserve(cr);
    SetColor(cr, kInk);
    Cairo().set_line_width(cr, 1);
    Cairo().stroke(cr);
  }
  if (g.memory_used_mib.count() == 0) return;
  const auto& s = g.memory_used_mib;
  double top = y.Map(s.mean() / u.div);
  SetColor(cr, GpuColor(i));
  Cairo().rectangle(cr, cx - w * 0.4, top, w * 0.8, y.px_lo - top);
  Cairo().fill(cr);
  SetColor(cr, kInk);  // ± std whisker, peak as a dashed tick (seed 002: "12800.0 MB (±45.2)")
  Cairo().set_line_width(cr, 1.5);
  Cairo().move_to(cr, cx, y.Map((s.mean() - s.stddev()) / u.div));
  Cairo().line_to(cr, cx, y.Map((s.mean() + s.stddev()) / u.div));
  Cairo().stroke(cr);
  const double dash[] = {4, 3};
  Cairo().set_dash(cr, dash, 2, 0);
  Cairo().move_to(cr, cx - w / 2, y.Map(s.max() / u.div));
  Cairo().line_to(cr, cx + w / 2, y.Map(s.max() / u.div));
  Cairo().stroke(cr);
  Cairo().set_dash(cr, nullptr, 0, 0);
  if (!bars.Labelled(i)) return;
  std::string label = g.memory_total_mib ? fmt::format("{:.1f} / {:.1f}", s.mean() / u.div,
                                                       *g.memory_total_mib / u.div)
                                         : fmt::format("{:.1f}", s.mean() / u.div);
  Text(cr, cx, std::min(top, y.Map(s.max() / u.div)) - 6, label, kLabelPt - 2, Align::kCenter);
}

/// Figure 2: per GPU, memory used (mean ± std, peak dashed) against the GPU's total.
void DrawMemory(cairo_t* cr, const analysis::RecordingSummary& m) {
  WhitePage(cr);
  double max_mib = 1;
  for (const auto& g : m.gpus) {
    if (g.memory_total_mib && std::isfinite(*g.memory_total_mib))
      max_mib = std::max(max_mib, *g.memory_total_mib);
    if (g.memory_used_mib.count() > 0 && std::isfinite(g.memory_used_mib.max()))
      max_mib = std::max(max_mib, g.memory_used_mib.max());
  }
  MemUnit u = PickMemUnit(max_mib);
  SetColor(cr, kInk);
  Text(cr, 40, 36,
       fmt::format("Per-GPU memory: used vs total (sum of means {:.1f} {}; balance {})",
                   m.total_memory_used_mib / u.div, u.name, BalanceCaption(m.memory_balance)),
       kTitlePt - 2, Align::kLeft, true);
  Text(cr, 40, 60, "bar: mean used (whisker ±1 std, dashed: peak); pale outline: total",
       kLabelPt - 1, Align::kLeft);
  Rect plot{100, 80, kPngWidthPx - 140.0, kPngHeightPx - 160.0};
  Scale y{0, max_mib / u.div * 1.08, plot.Bottom(), plot.y};
  DrawAxes(cr, plot, nullptr, y, "", fmt::format("memory used ({})", u.name));
  Bars bars{plot, m.gpus.size()};
  for (size_t i = 0; i < m.gpus.size(); ++i) DrawMemoryBar(cr, bars, y, i, m.gpus[i], u);
  BarLabels(cr, bars, m);
}

/// Figure 3: per-GPU mean utilization (the numbers util_balance was computed from) and the CV.
void DrawLoadBalance(cairo_t* cr, const analysis::RecordingSummary& m) {
  WhitePage(cr);
  SetColor(cr, kInk);
  Text(cr, 40, 36, "Load balance: utilization " + BalanceCaption(m.util_balance), kTitlePt,
       Align::kLeft, true);
  Text(cr, 40, 60,
       "seed 002: CV = std / mean of the per-GPU means; classes Excellent, Good, Fair, Poor",
       kLabelPt - 1, Align::kLeft);
  Rect plot{100, 80, kPngWidthPx - 140.0, kPngHeightPx - 160.0};
  Scale y{0, 105, plot.Bottom(), plot.y};
  DrawAxes(cr, plot, nullptr, y, "", "mean GPU utilization (%)");
  Bars bars{plot, m.gpus.size()};
  RunningStats across;
  for (size_t i = 0; i < m.gpus.size(); ++i) {
    const auto& s = m.gpus[i].util_pct;
    if (s.count() == 0) continue;
    across.Add(s.mean());
    double cx = bars.Center(i), top = y.Map(s.mean());
    SetColor(cr, GpuColor(i));
    Cairo().rectangle(cr, cx - bars.Width() / 2, top, bars.Width(), y.px_lo - top);
    Cairo().fill(cr);
    SetColor(cr, kInk);
    if (bars.Labelled(i))
      Text(cr, cx, top - 6, fmt::format("{:.1f}%", s.mean()), kLabelPt - 1, Align::kCenter);
  }
  if (across.count() > 0) {  // the mean across GPUs, which the CV measures spread around
    const double dash[] = {6, 4};
    Cairo().set_dash(cr, dash, 2, 0);
    Cairo().set_line_width(cr, 1.5);
    double py = y.Map(across.mean());
    Cairo().move_to(cr, plot.x, py);
    Cairo().line_to(cr, plot.Right(), py);
    Cairo().stroke(cr);
    Cairo().set_dash(cr, nullptr, 0, 0);
    Text(cr, plot.Right() - 4, py - 6, fmt::format("mean {:.1f}%", across.mean()), kLabelPt - 1,
         Align::kRight);
  }
  BarLabels(cr, bars, m);
}

/// Draws with `draw` on a fresh surface and writes it to `path` (via path + ".tmp").
template <typename Draw>
Status RenderTo(const std::string& path, Draw draw) {
  SurfacePtr surface(Cairo().image_surface_create(CAIRO_FORMAT_ARGB32, kPngWidthPx, kPngHeightPx));
  ContextPtr cr(Cairo().create(surface.get()));
  draw(cr.get());
  Cairo().surface_flush(surface.get());
  if (cairo_status_t st = Cairo().status(cr.get()); st != CAIRO_STATUS_SUCCESS)
    return MakeError(ErrorCode::kInternal, "{}: drawing failed: {}", path,
                     Cairo().status_to_string(st));
  std::string tmp = path + ".tmp";
  if (cairo_status_t st = Cairo().surface_write_to_png(surface.get(), tmp.c_str());
      st != CAIRO_STATUS_SUCCESS) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return MakeError(ErrorCode::kIo, "{}: cannot write: {}", tmp, Cairo().status_to_string(st));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return MakeError(ErrorCode::kIo, "{}: cannot write: {}", path, ec.message());
  }
  return OkStatus();
}

/// The directory exists or is created; nothing in `targets` may be replaced without `force`.
Status PrepareDir(const std::string& dir, const std::vector<std::string>& targets, bool force) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    return MakeError(ErrorCode::kIo, "{}: cannot create the directory: {}", dir,
                     ec ? ec.message() : "exists and is not a directory");
  for (const auto& path : targets) {
    fs::file_status st = fs::symlink_status(path, ec);
    if (!fs::exists(st)) continue;
    if (fs::is_directory(st))
      return MakeError(ErrorCode::kInvalidArgument, "{}: is a directory", path);
    if (!force)
      return MakeError(ErrorCode::kInvalidArgument,
                       "{}: exists; give --force to replace it, or another directory", path);
  }
  return OkStatus();
}

}  // namespace

std::string PngLabel(std::string_view name, size_t max_chars) {
  std::string out;
  size_t keep = name.size() > max_chars ? (max_chars > 3 ? max_chars - 3 : 0) : name.size();
  out.reserve(keep + 3);
  for (size_t i = 0; i < keep; ++i) {
    auto c = static_cast<unsigned char>(name[i]);
    out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  }
  if (keep < name.size()) out += std::string_view("...").substr(0, std::min<size_t>(max_chars, 3));
  return out;
}

Result<PngFigures> WritePngFigures(const analysis::RecordingSummary& machine,
                                   const std::vector<diagnose::Series>& series,
                                   const std::string& dir, bool force) {
  if (const std::string& why = LoadCairo().error; !why.empty()) {
    return MakeError(ErrorCode::kUnsupported,
                     "PNG figures need cairo ({}); install it (Debian/Ubuntu: apt-get install "
                     "libcairo2), or use --html",
                     why);
  }
  PngFigures out;
  auto path = [&](const char* name) { return (fs::path(dir) / name).string(); };
  const bool gpus = !machine.gpus.empty();
  const bool host = FindSeries(series, "host.cpu_busy_pct") != nullptr;
  std::vector<std::string> targets;
  if (gpus || host)
    targets.push_back(path(kPngUtilization));
  else
    out.skipped.push_back(
        fmt::format("{}: no GPU and no host CPU sample to draw", kPngUtilization));
  if (gpus) {
    targets.push_back(path(kPngMemory));
    targets.push_back(path(kPngLoadBalance));
  } else {
    out.skipped.push_back(fmt::format("{}: no GPU in the recording", kPngMemory));
    out.skipped.push_back(fmt::format("{}: no GPU in the recording", kPngLoadBalance));
  }
  if (targets.empty()) return out;
  TRY_STATUS(PrepareDir(dir, targets, force));
  if (gpus || host) {
    TRY_STATUS(RenderTo(path(kPngUtilization),
                        [&](cairo_t* cr) { DrawUtilization(cr, machine, series); }));
    out.written.push_back(path(kPngUtilization));
  }
  if (gpus) {
    TRY_STATUS(RenderTo(path(kPngMemory), [&](cairo_t* cr) { DrawMemory(cr, machine); }));
    out.written.push_back(path(kPngMemory));
    TRY_STATUS(RenderTo(path(kPngLoadBalance), [&](cairo_t* cr) { DrawLoadBalance(cr, machine); }));
    out.written.push_back(path(kPngLoadBalance));
  }
  return out;
}

void ReleasePngCaches() {
  if (!LoadCairo().error.empty()) return;
  Cairo().debug_reset_static_data();
  // fontconfig came with cairo: already loaded, so this finds it without loading anything.
  if (void* fc = dlopen("libfontconfig.so.1", RTLD_NOW | RTLD_NOLOAD); fc != nullptr) {
    if (auto fini = reinterpret_cast<void (*)()>(dlsym(fc, "FcFini"))) fini();
    dlclose(fc);
  }
}

}  // namespace stallscope::report
