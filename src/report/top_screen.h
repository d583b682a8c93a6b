#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/live_stats.h"
#include "sample/sample.h"

namespace stallscope::report {

/// The full-screen `stallscope top` (README "top"): a model the command keeps up to date
/// (TopModel::Add), and a pure function from the model to rows of text and attributes
/// (RenderTopScreen) that the ncurses layer (cli/top_tui.cc) paints. No I/O, no clock, no
/// terminal here, so the screen is tested with golden rows.

/// How a span of a row is painted; the ncurses layer maps each to a colour pair.
enum class TopAttr : uint8_t {
  kNormal,
  kTitle,    ///< the first row
  kHeader,   ///< column headings
  kLow,      ///< a bar or level below 50%
  kMid,      ///< 50% to 80%
  kHigh,     ///< 80% and more
  kDim,      ///< n/a, hints
  kWarn,     ///< paused, a suspicion, a lost GPU
  kReverse,  ///< the help box
};

/// A run of text painted with one attribute. `text` is UTF-8; every glyph is one column wide
/// (names from processes and the driver are escaped and elided before they get here).
struct TopSpan {
  std::string text;
  TopAttr attr = TopAttr::kNormal;
};

/// One screen row: spans left to right. Never wider than the width it was rendered for.
struct TopRow {
  std::vector<TopSpan> spans;
  /// The row as plain text (tests, --plain dumps).
  [[nodiscard]] std::string Text() const;
};

/// How processes are sorted (the `s` key cycles through them).
enum class TopSort : uint8_t { kCpu, kIo, kPid };
inline constexpr int kTopSortCount = 3;
[[nodiscard]] const char* TopSortName(TopSort sort);

/// One point of a GPU's utilization history: the driver's sub-second samples
/// (gpu::GpuSample::util_samples) when it gives them, else the once-per-sample reading.
struct UtilPoint {
  int64_t wall_ns = 0;
  uint32_t util_pct = 0;
};

/// A followed process as top shows it: state, CPU and its I/O rate between two samples.
struct TopProcess {
  int32_t pid = 0;
  int32_t ppid = 0;
  int depth = 0;  ///< in the process tree, 0 = the root
  char state = '?';
  std::optional<double> cpu_pct;
  uint64_t rss_bytes = 0;
  std::optional<double> io_bps;  ///< read + write bytes/s; empty on the first sample or no access
  std::string name;              ///< comm, or the command line's first word
};

/// What a live run (`top --run DIR`) says now: its speed, phases and the current suspicion.
struct TopRunStatus {
  std::string dir;
  std::optional<analysis::LiveWindow> window;  ///< empty until the job has taken steps
  std::string suspicion;                       ///< diagnose::SuspicionText, may be empty
  /// "finished: ...", "run directory removed" (shown beside the last numbers), or why there is
  /// nothing to show; "" while the run goes on.
  std::string note;
};

/// Everything the screen shows. Keeps 60 s of utilization history per GPU (bounded: the driver
/// gives at most ~6 points a second, fewer are kept when it gives more). A GPU whose driver has
/// ever delivered its sub-second buffer is drawn from the buffer only: the buffer comes in
/// batches every 1-10 s (gpu/poll_plan.h), so a per-sample point between two batches would hide
/// the older half of the next one.
class TopModel {
 public:
  static constexpr int64_t kHistoryNs = 60'000'000'000;  ///< issue 14: a 60 s history

  explicit TopModel(sample::RecordingHeader header) : header_(std::move(header)) {}

  /// Takes a new sample: the latest values, history points and process I/O rates.
  void Add(const sample::Sample& sample);

  const sample::RecordingHeader& header() const { return header_; }
  const sample::Sample& latest() const { return latest_; }
  bool has_sample() const { return has_sample_; }
  const std::vector<std::deque<UtilPoint>>& history() const { return history_; }
  const std::vector<TopProcess>& processes() const { return processes_; }

  std::optional<TopRunStatus> run;  ///< set for `top --run DIR`
  int64_t interval_ns = 1'000'000'000;

 private:
  sample::RecordingHeader header_;
  sample::Sample latest_;
  bool has_sample_ = false;
  std::vector<std::deque<UtilPoint>> history_;
  std::vector<bool> buffered_;  ///< per GPU: the driver's buffer came at least once
  std::vector<TopProcess> processes_;
  std::unordered_map<int32_t, uint64_t> io_bytes_;  ///< pid → read + write bytes last sample
  int64_t io_mono_ns_ = 0;
};

/// What the keys changed, and the terminal's size.
struct TopView {
  int width = 80;
  int height = 24;
  TopSort sort = TopSort::kCpu;
  bool paused = false;
  bool help = false;
  bool unicode = true;  ///< block glyphs for the history; ASCII levels when the locale is not UTF-8
};

/// The screen: at most `view.height` rows of at most `view.width` columns. Sections drop from
/// the bottom when the terminal is short (processes first, then history rows); the help box
/// replaces the body while `view.help` is set.
[[nodiscard]] std::vector<TopRow> RenderTopScreen(const TopModel& model, const TopView& view);

/// Why GPUs of `sample` show no GPM values (full screen and `top --once`, not the status
/// lines): one line per distinct reason, GpuStatic::gpm_note or "its first window is still
/// open" for a GPU that is sampled, naming the GPUs unless every GPU has it: "GPU 2, 3: MIG is
/// enabled". Empty when every GPU has GPM values or nothing says why not (lost GPUs say nothing).
[[nodiscard]] std::vector<std::string> GpmNotes(const sample::RecordingHeader& header,
                                                const sample::Sample& sample);

/// The run rows as one line for the text modes (`top --run DIR --plain` / `--status`):
/// "run DIR: 3.25 steps/s | data_loading 62% | forward_pass 21% | suspect: ... | finished: ...".
[[nodiscard]] std::string RenderTopRunLine(const TopRunStatus& run);

/// The history of one GPU as `columns` glyphs, oldest left, ending at `end_wall_ns`: each
/// column is the mean of the points in its 60 s / columns span ("▁".."█"; ' ' no point).
[[nodiscard]] std::string HistoryGlyphs(const std::deque<UtilPoint>& points, int64_t end_wall_ns,
                                        int columns, bool unicode);

}  // namespace stallscope::report
