#pragma once
// PNG figures of a run (issue 14, seed 002's figures), for reports, tickets and chat where HTML
// does not go. Drawn with cairo; only this file's library links it, never the front binary.

#include <string>
#include <string_view>
#include <vector>

#include "analysis/summary.h"
#include "base/result.h"
#include "diagnose/run_report.h"

namespace stallscope::report {

/// The figures WritePngFigures draws, in order; file names are fixed.
inline constexpr const char* kPngUtilization = "utilization.png";
inline constexpr const char* kPngMemory = "memory.png";
inline constexpr const char* kPngLoadBalance = "load_balance.png";

/// Pixel size of every figure.
inline constexpr int kPngWidthPx = 1200;
inline constexpr int kPngHeightPx = 700;

/// What WritePngFigures did.
struct PngFigures {
  std::vector<std::string> written;  ///< paths of the files written, in kPng* order
  /// One line per figure not drawn: "memory.png: no GPU in the recording".
  std::vector<std::string> skipped;
};

/// Writes seed 002's figures of a run into `dir` (created, with its parents, when missing):
/// - utilization.png: one line per GPU over time ("gpuN.utilization_fine_pct" where present,
///   else "gpuN.utilization_pct"), and host CPU busy ("host.cpu_busy_pct") in a panel under it;
/// - memory.png: per GPU, mean memory used (± std, peak marked) against the GPU's total;
/// - load_balance.png: per-GPU mean utilization, with `machine.util_balance` (CV and class,
///   computed by analysis::ComputeBalance; nothing is recomputed here) in the title.
/// `machine` gives the GPUs (their order is the series' gpuN), names and statistics; `series` is
/// diagnose::RunReport::series.
///
/// Empty input is not an error: with no GPU, utilization.png shows the host CPU alone and the
/// other two are skipped; a figure with nothing to draw at all (no GPU and no host sample) is
/// skipped too, each with its reason in `skipped`.
///
/// Errors (one line naming the path): a figure's file exists and `force` is false ("...: exists;
/// give --force to replace it"), checked for every figure before any is written, so a refusal
/// writes nothing; the directory cannot be created; a file cannot be written. Files are written
/// to "NAME.tmp" and renamed, so a failed write leaves no half file under the final name.
///
/// GPU names come from the driver or a recording: anything outside printable ASCII becomes '?'
/// and long names are cut, so any name renders. Not thread-safe with respect to `dir`.
[[nodiscard]] Result<PngFigures> WritePngFigures(const analysis::RecordingSummary& machine,
                                                 const std::vector<diagnose::Series>& series,
                                                 const std::string& dir, bool force);

/// `name` made safe for cairo's toy text API: bytes outside printable ASCII become '?' (invalid
/// UTF-8 would put the cairo context in an error state), and a name over `max_chars` is cut with
/// "..." at the end.
/// Drops cairo's and fontconfig's font caches, which live as long as the process: call once
/// before exit after WritePngFigures (else LeakSanitizer reports them in the ASan build).
void ReleasePngCaches();

[[nodiscard]] std::string PngLabel(std::string_view name, size_t max_chars);

}  // namespace stallscope::report
