#include "report/top_screen.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/units.h"

namespace stallscope::report {
namespace {

constexpr size_t kMaxHistoryPoints = 1024;  // 60 s at ~6 driver points/s is ~360
constexpr std::string_view kGpmFirstWindow =
    "its first window is still open (read every few seconds)";

/// Display columns of UTF-8 `text`: code points (every glyph here is one column wide).
size_t Columns(std::string_view text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

/// The first `columns` glyphs of `text`.
std::string CutColumns(std::string_view text, size_t columns) {
  size_t n = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 && n++ == columns) {
      return std::string(text.substr(0, i));
    }
  }
  return std::string(text);
}

/// Builds a row, keeping it within `width` columns.
class RowBuilder {
 public:
  explicit RowBuilder(int width) : left_(static_cast<size_t>(std::max(width, 0))) {}
  RowBuilder& Add(std::string_view text, TopAttr attr = TopAttr::kNormal) {
    if (text.empty() || left_ == 0) return *this;
    std::string cut = CutColumns(text, left_);
    left_ -= Columns(cut);
    if (!row_.spans.empty() && row_.spans.back().attr == attr) {
      row_.spans.back().text += cut;
    } else {
      row_.spans.push_back({std::move(cut), attr});
    }
    return *this;
  }
  /// Adds `text` only when all of it fits (a number cut in half would mislead); false if not.
  bool AddWhole(std::string_view text, TopAttr attr = TopAttr::kNormal) {
    if (Columns(text) > left_) return false;
    Add(text, attr);
    return true;
  }
  TopRow Take() { return std::move(row_); }

 private:
  size_t left_;
  TopRow row_;
};

TopAttr LevelAttr(double pct) {
  if (pct >= 80) return TopAttr::kHigh;
  if (pct >= 50) return TopAttr::kMid;
  return TopAttr::kLow;
}

constexpr std::array<std::string_view, 8> kBlocks = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
constexpr std::string_view kAscii = "_.-~=+*#";

/// Per column, the level 0..7 of the mean of the points in its span; -1 where there is none.
std::vector<int> HistoryLevels(const std::deque<UtilPoint>& points, int64_t end_wall_ns,
                               int columns) {
  if (columns <= 0) return {};
  const auto n = static_cast<size_t>(columns);
  std::vector<double> sum(n, 0);
  std::vector<int> count(n, 0);
  const int64_t start = end_wall_ns - TopModel::kHistoryNs;
  for (const auto& p : points) {
    if (p.wall_ns <= start || p.wall_ns > end_wall_ns) continue;
    // (ns * columns) stays far below 2^63 for 60 s and any terminal width.
    auto col = static_cast<size_t>((p.wall_ns - start - 1) * columns / TopModel::kHistoryNs);
    sum[col] += p.util_pct;
    ++count[col];
  }
  std::vector<int> levels(n, -1);
  for (size_t c = 0; c < n; ++c) {
    if (count[c] > 0) levels[c] = std::clamp(static_cast<int>(sum[c] / count[c] / 12.5), 0, 7);
  }
  return levels;
}

std::string_view Glyph(int level, bool unicode) {
  if (level < 0) return " ";
  const auto k = static_cast<size_t>(level);
  return unicode ? kBlocks[k] : kAscii.substr(k, 1);
}

/// "[|||||     ]": `width` cells inside the brackets, filled for `pct` (empty: n/a, dimmed).
void AddBar(RowBuilder& row, std::optional<double> pct, int width) {
  row.Add("[");
  if (!pct) {
    row.Add(std::string(static_cast<size_t>(width), ' '), TopAttr::kDim);
  } else {
    double clamped = std::clamp(*pct, 0.0, 100.0);
    auto filled = static_cast<size_t>(std::lround(clamped / 100.0 * width));
    row.Add(std::string(filled, '|'), LevelAttr(clamped));
    row.Add(std::string(static_cast<size_t>(width) - filled, ' '));
  }
  row.Add("]");
}

std::optional<double> Ratio(std::optional<uint64_t> part, std::optional<uint64_t> whole) {
  if (!part || !whole || *whole == 0) return std::nullopt;
  return static_cast<double>(*part) / static_cast<double>(*whole) * 100.0;
}

TopRow TitleRow(const TopModel& m, const TopView& v) {
  RowBuilder row(v.width);
  row.Add("stallscope top", TopAttr::kTitle);
  if (v.paused) row.Add("  PAUSED", TopAttr::kWarn);
  row.Add(fmt::format("  {}", EscapeControl(m.header().hostname)));
  if (m.has_sample()) row.Add(fmt::format("  {}", FormatIsoUtc(m.latest().wall_ns)));
  row.Add(fmt::format("  every {}  sort {}", FormatDurationNs(m.interval_ns), TopSortName(v.sort)),
          TopAttr::kDim);
  row.Add("  h help  q quit", TopAttr::kDim);
  return row.Take();
}

struct GpuLayout {
  int name = 14;
  int bar = 10;
};

GpuLayout LayoutGpus(int width) {
  GpuLayout l;
  l.name = width >= 120 ? 22 : width >= 90 ? 14 : width >= 70 ? 8 : 0;
  // Fixed parts: "NNN " + name + " " + 3 x ("[" "]" " " value) + 2 separators + " TEMP".
  const int fixed = 4 + (l.name > 0 ? l.name + 1 : 0) + 3 * 3 + 4 + 8 + 4 + 2 + 5;
  l.bar = std::clamp((width - fixed) / 3, 3, 40);
  return l;
}

TopRow GpuRow(const TopModel& m, size_t i, const GpuLayout& l, int width) {
  const gpu::GpuSample& g = m.latest().gpus[i];
  RowBuilder row(width);
  row.Add(fmt::format("{:>3} ", i), TopAttr::kHeader);
  if (l.name > 0) {
    std::string_view name = "?";
    if (i < m.header().gpus.size()) name = m.header().gpus[i].name;
    if (name.starts_with("NVIDIA ")) name.remove_prefix(7);  // every row would say it
    std::string shown = Elide(EscapeControl(name), static_cast<size_t>(l.name));
    row.Add(fmt::format("{:<{}} ", shown, l.name));
  }
  if (g.lost) return row.Add("LOST: the GPU stopped answering", TopAttr::kWarn).Take();
  std::optional<double> util;
  if (g.util_gpu_pct) util = *g.util_gpu_pct;
  AddBar(row, util, l.bar);
  row.Add(util ? fmt::format(" {:>3.0f}% ", *util) : std::string(" n/a  "));
  AddBar(row, Ratio(g.mem_used_bytes, g.mem_total_bytes), l.bar);
  if (g.mem_used_bytes && g.mem_total_bytes) {
    row.Add(fmt::format(" {:>8} ",
                        fmt::format("{:.0f}/{:.0f}G", static_cast<double>(*g.mem_used_bytes) / kGiB,
                                    static_cast<double>(*g.mem_total_bytes) / kGiB)));
  } else {
    row.Add(" n/a      ");
  }
  std::optional<double> power;
  if (g.power_mw && g.power_limit_mw && *g.power_limit_mw > 0)
    power = static_cast<double>(*g.power_mw) / *g.power_limit_mw * 100.0;
  AddBar(row, power, l.bar);
  row.Add(g.power_mw ? fmt::format(" {:>3.0f}W", *g.power_mw / 1000.0) : std::string(" n/a"));
  row.Add(g.temperature_c ? fmt::format(" {:>3}C", *g.temperature_c) : std::string("  n/a"));
  return row.Take();
}

/// A GPM value in a fixed width (" 22%", " n/a"), coloured by level.
void AddGpmValue(RowBuilder& row, std::string_view label, std::optional<double> pct) {
  row.Add(label);
  if (pct) {
    row.Add(fmt::format("{:>3.0f}%", std::clamp(*pct, 0.0, 100.0)), LevelAttr(*pct));
  } else {
    row.Add(" n/a", TopAttr::kDim);
  }
}

/// "tx 1.2 GB/s rx 300.0 MB/s" of a link, or "" when the driver gives neither direction.
std::string LinkCell(std::string_view link, std::optional<double> tx_mibps,
                     std::optional<double> rx_mibps) {
  if (!tx_mibps && !rx_mibps) return "";
  auto rate = [](std::optional<double> mibps) {
    return mibps ? FormatBytes(*mibps * kMiB) + "/s" : std::string("n/a");
  };
  return fmt::format("  {} tx {} rx {}", link, rate(tx_mibps), rate(rx_mibps));
}

/// The GPU's GPM line under its row, aligned on the UTIL column: what the hardware counters
/// say the kernels did with the GPU (issue 28: utilization 99% can be SM active 22%). Most
/// telling first, so a narrow terminal cuts the least.
TopRow GpmRow(const gpu::GpmMetrics& x, const GpuLayout& l, int width) {
  RowBuilder row(width);
  row.Add("    ");
  if (l.name > 0) {
    // The window's length where it is known and fits.
    std::string label = "GPM";
    if (x.window_ns > 0) label += " " + FormatDurationNs(x.window_ns);
    if (Columns(label) > static_cast<size_t>(l.name)) label = "GPM";
    row.Add(fmt::format("{:<{}} ", label, l.name), TopAttr::kDim);
  }
  AddGpmValue(row, "SM active ", x.sm_active_pct);
  AddGpmValue(row, "  tensor ", x.tensor_active_pct);
  AddGpmValue(row, "  DRAM ", x.dram_active_pct);
  // The rest whole or not at all, in this order (no later cell where an earlier one is cut).
  const std::string cells[] = {
      x.sm_occupancy_pct
          ? fmt::format("  occupancy {:>3.0f}%", std::clamp(*x.sm_occupancy_pct, 0.0, 100.0))
          : "",
      LinkCell("PCIe", x.pcie_tx_mibps, x.pcie_rx_mibps),
      LinkCell("NVLink", x.nvlink_tx_mibps, x.nvlink_rx_mibps)};
  for (const auto& cell : cells) {
    if (!row.AddWhole(cell)) break;
  }
  return row.Take();
}

TopRow HistoryRow(const TopModel& m, size_t i, const TopView& v) {
  RowBuilder row(v.width);
  row.Add("  60s ", TopAttr::kDim);
  for (int level : HistoryLevels(m.history()[i], m.latest().wall_ns, std::max(v.width - 6, 1))) {
    row.Add(Glyph(level, v.unicode), level < 0 ? TopAttr::kDim : LevelAttr((level + 1) * 12.5));
  }
  return row.Take();
}

void AddHostRows(const TopModel& m, const TopView& v, std::vector<TopRow>& rows) {
  const host::HostSample& h = m.latest().host;
  const int bar = std::clamp(v.width / 4, 5, 30);
  RowBuilder cpu(v.width);
  cpu.Add("CPU ", TopAttr::kHeader);
  std::optional<double> busy;
  if (h.cpu) busy = h.cpu->busy_pct;
  AddBar(cpu, busy, bar);
  if (h.cpu) {
    cpu.Add(fmt::format(" {:5.1f}%  usr {:.1f}  sys {:.1f}  iowait {:.1f}", h.cpu->busy_pct,
                        h.cpu->user_pct, h.cpu->system_pct, h.cpu->iowait_pct));
  } else {
    cpu.Add(" n/a", TopAttr::kDim);
  }
  cpu.Add(fmt::format("  {} CPUs", h.cpu_count));
  if (h.load1) cpu.Add(fmt::format("  load {:.2f}", *h.load1));
  rows.push_back(cpu.Take());

  RowBuilder mem(v.width);
  mem.Add("MEM ", TopAttr::kHeader);
  AddBar(mem, Ratio(h.mem_used_bytes, h.mem_total_bytes), bar);
  if (h.mem_used_bytes && h.mem_total_bytes) {
    mem.Add(fmt::format(" {:.1f}/{:.1f} GiB", static_cast<double>(*h.mem_used_bytes) / kGiB,
                        static_cast<double>(*h.mem_total_bytes) / kGiB));
  }
  std::string psi;
  auto add_psi = [&](const char* name, const std::optional<host::Pressure>& p) {
    if (p) psi += fmt::format(" {} {:.1f}%", name, p->some_avg10_pct);
  };
  add_psi("cpu", h.psi_cpu);
  add_psi("io", h.psi_io);
  add_psi("mem", h.psi_memory);
  if (!psi.empty()) mem.Add("  PSI" + psi, TopAttr::kNormal);
  rows.push_back(mem.Take());
}

void AddRunRows(const TopRunStatus& run, const TopView& v, std::vector<TopRow>& rows) {
  RowBuilder head(v.width);
  head.Add("RUN ", TopAttr::kHeader);
  head.Add(EscapeControl(run.dir));
  if (run.window) head.Add(fmt::format("  {:.2f} steps/s", run.window->steps_per_s));
  // The run's state before the suspicion: a long DIR leaves little room on the row.
  if (run.window && !run.note.empty()) head.Add("  " + EscapeControl(run.note), TopAttr::kDim);
  if (!run.suspicion.empty()) head.Add("  " + run.suspicion, TopAttr::kWarn);
  rows.push_back(head.Take());
  RowBuilder phases(v.width);
  phases.Add("    ");
  if (!run.window) {
    phases.Add(run.note.empty() ? "no steps yet" : EscapeControl(run.note), TopAttr::kDim);
  } else {
    for (const auto& p : run.window->phases) {
      phases.Add(fmt::format("{} {:.0f}%  ", EscapeControl(p.name), p.share * 100),
                 LevelAttr(p.share * 100));
    }
  }
  rows.push_back(phases.Take());
}

}  // namespace

std::string RenderTopRunLine(const TopRunStatus& run) {
  std::string out = fmt::format("run {}:", EscapeControl(run.dir));
  if (run.window) {
    out += fmt::format(" {:.2f} steps/s", run.window->steps_per_s);
    for (const auto& p : run.window->phases)
      out += fmt::format(" | {} {:.0f}%", EscapeControl(p.name), p.share * 100);
  } else if (run.note.empty()) {
    out += " no steps yet";
  }
  if (!run.suspicion.empty()) out += " | " + run.suspicion;
  if (!run.note.empty()) out += (run.window ? " | " : " ") + EscapeControl(run.note);
  return out + "\n";
}

namespace {

std::vector<const TopProcess*> SortedProcesses(const TopModel& m, TopSort sort) {
  std::vector<const TopProcess*> out;
  for (const auto& p : m.processes()) out.push_back(&p);
  auto key = [sort](const TopProcess* p) {
    return sort == TopSort::kCpu ? p->cpu_pct.value_or(-1) : p->io_bps.value_or(-1);
  };
  if (sort != TopSort::kPid) {
    std::stable_sort(out.begin(), out.end(),
                     [&](const TopProcess* a, const TopProcess* b) { return key(a) > key(b); });
  }
  return out;
}

void AddProcessRows(const TopModel& m, const TopView& v, size_t room, std::vector<TopRow>& rows) {
  if (room == 0) return;
  if (!m.latest().has_processes) {
    RowBuilder none(v.width);
    none.Add("PROCESSES ", TopAttr::kHeader);
    none.Add("none followed (top --pid PID, or --run DIR)", TopAttr::kDim);
    rows.push_back(none.Take());
    return;
  }
  rows.push_back(RowBuilder(v.width)
                     .Add("    PID S   CPU%      RSS      I/O/s  COMMAND", TopAttr::kHeader)
                     .Take());
  for (const TopProcess* p : SortedProcesses(m, v.sort)) {
    if (rows.size() >= room) break;
    RowBuilder row(v.width);
    row.Add(fmt::format("{:>7} ", p->pid));
    row.Add(std::string(1, p->state), p->state == 'D' ? TopAttr::kWarn : TopAttr::kNormal);
    row.Add(p->cpu_pct ? fmt::format(" {:6.1f}", *p->cpu_pct) : std::string("    n/a"),
            p->cpu_pct ? LevelAttr(*p->cpu_pct) : TopAttr::kDim);
    row.Add(fmt::format(" {:>8}", FormatBytes(static_cast<double>(p->rss_bytes))));
    row.Add(p->io_bps ? fmt::format(" {:>8}/s", FormatBytes(*p->io_bps)) : "        n/a");
    std::string indent(static_cast<size_t>(v.sort == TopSort::kPid ? 2 * p->depth : 0), ' ');
    row.Add("  " + indent + p->name);
    rows.push_back(row.Take());
  }
}

std::vector<TopRow> HelpRows(const TopView& v) {
  static constexpr std::array<std::string_view, 8> kLines = {
      "Keys",
      "  q  quit",
      "  p  pause the display (sampling goes on; p again resumes)",
      "  s  sort processes: cpu, io, tree",
      "  h  this help (any key closes it)",
      "History: the driver's sub-second GPU utilization, last 60 s, oldest left",
      "GPM (Hopper+): SM active, tensor, DRAM from hardware counters, a few s averaged",
      "Bars: green < 50%, yellow < 80%, red >= 80%",
  };
  std::vector<TopRow> rows;
  for (auto line : kLines) rows.push_back(RowBuilder(v.width).Add(line, TopAttr::kReverse).Take());
  return rows;
}

}  // namespace

std::string TopRow::Text() const {
  std::string out;
  for (const auto& s : spans) out += s.text;
  return out;
}

const char* TopSortName(TopSort sort) {
  switch (sort) {
    case TopSort::kCpu:
      return "cpu";
    case TopSort::kIo:
      return "io";
    case TopSort::kPid:
      return "tree";
  }
  return "?";
}

std::vector<std::string> GpmNotes(const sample::RecordingHeader& header,
                                  const sample::Sample& sample) {
  const size_t gpus = sample.gpus.size();
  std::vector<std::pair<std::string, std::vector<size_t>>> notes;
  for (size_t i = 0; i < gpus && i < header.gpus.size(); ++i) {
    const gpu::GpuSample& g = sample.gpus[i];
    const gpu::GpuStatic& st = header.gpus[i];
    if (g.lost || g.gpm) continue;
    // Live views carry the last window (gpu::CarrySlowFields): none yet means the first has
    // not closed.
    std::string note = st.gpm ? std::string(kGpmFirstWindow) : EscapeControl(st.gpm_note);
    if (note.empty()) continue;
    auto it =
        std::find_if(notes.begin(), notes.end(), [&](const auto& n) { return n.first == note; });
    if (it == notes.end()) it = notes.insert(notes.end(), {std::move(note), {}});
    it->second.push_back(i);
  }
  std::vector<std::string> out;
  for (auto& [note, which] : notes) {
    if (which.size() < gpus) note = fmt::format("GPU {}: {}", fmt::join(which, ", "), note);
    out.push_back(std::move(note));
  }
  return out;
}

std::string HistoryGlyphs(const std::deque<UtilPoint>& points, int64_t end_wall_ns, int columns,
                          bool unicode) {
  std::string out;
  for (int level : HistoryLevels(points, end_wall_ns, columns)) out += Glyph(level, unicode);
  return out;
}

void TopModel::Add(const sample::Sample& s) {
  const bool had_sample = has_sample_;
  latest_ = s;
  has_sample_ = true;
  history_.resize(s.gpus.size());
  buffered_.resize(s.gpus.size(), false);
  for (size_t i = 0; i < s.gpus.size(); ++i) {
    const gpu::GpuSample& g = s.gpus[i];
    auto& h = history_[i];
    if (g.util_sample_count > 0 && !buffered_[i]) {
      // The first batch replaces the per-sample points of the time it covers.
      buffered_[i] = true;
      while (!h.empty() && h.back().wall_ns >= g.util_samples[0].ts_us * 1000) h.pop_back();
    }
    const int64_t newest = h.empty() ? 0 : h.back().wall_ns;
    if (buffered_[i]) {
      for (size_t k = 0; k < g.util_sample_count; ++k) {
        const int64_t ts = g.util_samples[k].ts_us * 1000;
        if (ts > newest) h.push_back({ts, g.util_samples[k].util_pct});
      }
    } else if (g.util_gpu_pct && s.wall_ns > newest) {
      h.push_back({s.wall_ns, *g.util_gpu_pct});
    }
    while (!h.empty() &&
           (h.front().wall_ns <= s.wall_ns - kHistoryNs || h.size() > kMaxHistoryPoints))
      h.pop_front();
  }

  // Processes in tree order (parents before children), with their I/O rate since last time.
  std::unordered_set<int32_t> pids;
  for (const auto& p : s.processes) pids.insert(p.pid);
  const double dt_s = had_sample ? static_cast<double>(s.mono_ns - io_mono_ns_) / 1e9 : 0;
  std::unordered_map<int32_t, uint64_t> io_now;
  processes_.clear();
  std::function<void(int32_t, int, int)> visit = [&](int32_t parent, int depth, int guard) {
    for (const auto& p : s.processes) {
      bool root = !pids.contains(p.ppid) || p.ppid == p.pid;
      if ((depth == 0 ? !root : p.ppid != parent) || guard > 64) continue;
      TopProcess t{p.pid, p.ppid, depth, p.state, p.cpu_pct, p.rss_bytes, {}, {}};
      t.name = EscapeControl(p.comm.empty() ? p.cmdline.substr(0, p.cmdline.find(' ')) : p.comm);
      if (p.read_bytes && p.write_bytes) {
        uint64_t bytes = *p.read_bytes + *p.write_bytes;
        io_now[p.pid] = bytes;
        auto it = io_bytes_.find(p.pid);
        if (it != io_bytes_.end() && dt_s > 0 && bytes >= it->second)
          t.io_bps = static_cast<double>(bytes - it->second) / dt_s;
      }
      processes_.push_back(std::move(t));
      visit(p.pid, depth + 1, guard + 1);
    }
  };
  visit(0, 0, 0);
  io_bytes_ = std::move(io_now);
  io_mono_ns_ = s.mono_ns;
}

std::vector<TopRow> RenderTopScreen(const TopModel& m, const TopView& v) {
  std::vector<TopRow> rows;
  const auto height = static_cast<size_t>(std::max(v.height, 0));
  rows.push_back(TitleRow(m, v));
  if (v.help) {
    for (auto& r : HelpRows(v)) rows.push_back(std::move(r));
  } else if (!m.has_sample()) {
    rows.push_back(RowBuilder(v.width).Add("sampling...", TopAttr::kDim).Take());
  } else {
    const size_t gpus = m.latest().gpus.size();
    // Rows without history and processes: GPU heading + GPUs, two host rows, two run rows.
    // A short terminal drops the history first, then the GPM notes, then the GPM lines.
    const size_t base = rows.size() + 1 + std::max<size_t>(gpus, 1) + 2 + (m.run ? 2 : 0);
    size_t gpm_rows = 0;
    for (const auto& g : m.latest().gpus) gpm_rows += !g.lost && g.gpm ? 1 : 0;
    const bool gpm = base + gpm_rows <= height;
    std::vector<std::string> notes = GpmNotes(m.header(), m.latest());
    if (!gpm || base + gpm_rows + notes.size() > height) notes.clear();
    const bool history = base + gpm_rows + notes.size() + gpus <= height;
    if (gpus == 0) {
      const std::string& note = m.header().gpu_note;
      rows.push_back(RowBuilder(v.width)
                         .Add("GPU ", TopAttr::kHeader)
                         .Add(note.empty() ? "none found" : EscapeControl(note), TopAttr::kDim)
                         .Take());
    } else {
      const GpuLayout l = LayoutGpus(v.width);
      rows.push_back(
          RowBuilder(v.width)
              .Add(fmt::format("GPU {:<{}}{:<{}}{:<{}}{:<{}}TEMP", l.name > 0 ? "NAME" : "",
                               l.name > 0 ? l.name + 1 : 0, "UTIL", l.bar + 8, "MEMORY", l.bar + 12,
                               "POWER", l.bar + 6),
                   TopAttr::kHeader)
              .Take());
      for (size_t i = 0; i < gpus; ++i) {
        rows.push_back(GpuRow(m, i, l, v.width));
        const gpu::GpuSample& g = m.latest().gpus[i];
        if (gpm && !g.lost && g.gpm) rows.push_back(GpmRow(*g.gpm, l, v.width));
        if (history && !m.latest().gpus[i].lost) rows.push_back(HistoryRow(m, i, v));
      }
      for (const auto& note : notes)
        rows.push_back(RowBuilder(v.width).Add("GPM: " + note, TopAttr::kDim).Take());
    }
    AddHostRows(m, v, rows);
    if (m.run) AddRunRows(*m.run, v, rows);
    if (rows.size() < height) AddProcessRows(m, v, height, rows);
  }
  if (rows.size() > height) rows.resize(height);
  return rows;
}

}  // namespace stallscope::report
