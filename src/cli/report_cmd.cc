// `stallscope report PATH --html FILE`: the HTML report of a run directory, profiler traces (a
// file or a folder of ranks) or a recording.

#include <filesystem>

#include <fmt/format.h>

#include "analysis/summary.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/output_path.h"
#include "diagnose/run_analysis.h"
#include "diagnose/run_dir.h"
#include "diagnose/run_report.h"
#include "diagnose/trace_report.h"
#include "report/html_render.h"
#include "report/png_render.h"
#include "sample/recording.h"
#include "sample/seed_monitor.h"
#include "trace/trace_reader.h"

namespace stallscope::cli {
namespace {

namespace fs = std::filesystem;

enum class InputKind { kRun, kTrace, kRecording };

/// A run directory has run.json; a .json/.json.gz file or any other folder is traces (but a .json
/// of seed 002's GPU monitor objects, a recording); any other file is a recording (which says so
/// itself when it is not one).
InputKind Classify(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    return fs::exists(fs::path(path) / "run.json", ec) ? InputKind::kRun : InputKind::kTrace;
  }
  auto ends = [&](std::string_view s) { return path.ends_with(s); };
  if (ends(".json") && sample::LooksLikeSeedMonitorFile(path)) return InputKind::kRecording;
  if (ends(".json") || ends(".json.gz") || ends(".gz")) return InputKind::kTrace;
  return InputKind::kRecording;
}

/// What one input gives: the page, and the sampled series the PNG figures draw (none for
/// traces: a profiler trace has no sampled GPU metrics).
struct Rendered {
  std::string page;
  bool has_samples = false;
  analysis::RecordingSummary machine;
  std::vector<diagnose::Series> series;
};

void PrintWarnings(const std::vector<std::string>& warnings) {
  for (const auto& w : warnings)
    fmt::print(stderr, "stallscope report: warning: {}\n", EscapeControl(w));
}

Result<Rendered> RunInput(const std::string& dir) {
  TRY(diagnose::LoadedRun run, diagnose::LoadAndAnalyzeRun(dir));
  const diagnose::RunReport& report = run.analysis.report;
  PrintWarnings(report.warnings);
  return Rendered{report::RenderRunHtml(run.data, report), true, report.machine, report.series};
}

Result<Rendered> TraceInput(const std::string& path, unsigned threads) {
  TRY(diagnose::TraceReport report,
      diagnose::AnalyzeTraceFiles({path}, trace::ReadOptions{}, trace::AnalysisOptions{}, threads,
                                  diagnose::TracesHook{}));
  for (const auto& r : report.ranks) PrintWarnings(r.warnings);
  return Rendered{report::RenderTraceHtml(path, report), false, {}, {}};
}

Result<Rendered> RecordingInput(const std::string& path) {
  TRY(sample::Recording recording, sample::ReadRecording(path));
  analysis::RecordingSummary summary = analysis::Summarize(recording);
  PrintWarnings(recording.warnings);
  const int64_t t0 = recording.samples.empty() ? 0 : recording.samples[0].mono_ns;
  std::string page = report::RenderRecordingHtml(path, recording, summary);
  return Rendered{std::move(page), true, summary, diagnose::RawMachineSeries(recording, t0)};
}

Result<Rendered> Render(const ReportOptions& o) {
  switch (Classify(o.path)) {
    case InputKind::kRun:
      return RunInput(o.path);
    case InputKind::kTrace:
      return TraceInput(o.path, o.threads);
    case InputKind::kRecording:
      return RecordingInput(o.path);
  }
  return MakeError(ErrorCode::kInvalidArgument, "{}: unknown input", o.path);
}

Status WritePng(const ReportOptions& o, const Rendered& r) {
  if (!r.has_samples) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--png {}: {} is profiler traces, which have no sampled GPU metrics to draw "
                     "(use --html)",
                     o.png, o.path);
  }
  TRY(report::PngFigures figures, report::WritePngFigures(r.machine, r.series, o.png, o.force));
  report::ReleasePngCaches();
  for (const auto& f : figures.written)
    fmt::print(stderr, "stallscope report: wrote {}\n", EscapeControl(f));
  for (const auto& f : figures.skipped)
    fmt::print(stderr, "stallscope report: skipped {}\n", EscapeControl(f));
  return OkStatus();
}

}  // namespace

int RunReport(const ReportOptions& o) {
  if (o.html.empty() && o.png.empty()) {
    fmt::print(stderr, "stallscope report: give --html FILE, --png DIR or both\n");
    return 2;
  }
  std::vector<std::string> inputs = {o.path};
  if (auto files = trace::ExpandTracePaths(inputs); files.ok())
    inputs.insert(inputs.end(), files->begin(), files->end());
  if (!o.html.empty()) {
    if (auto refused = RefuseOutputPath("--html", o.html, o.force, inputs)) {
      fmt::print(stderr, "stallscope report: {}\n", EscapeControl(*refused));
      return 2;
    }
  }
  auto rendered = Render(o);
  if (!rendered.ok()) {
    fmt::print(stderr, "stallscope report: {}\n", EscapeControl(rendered.error().message));
    return 1;
  }
  if (!o.html.empty()) {
    if (auto st = diagnose::WriteFileAtomic(o.html, rendered->page); !st.ok()) {
      fmt::print(stderr, "stallscope report: {}\n", EscapeControl(st.error().message));
      return 1;
    }
    fmt::print(stderr, "stallscope report: wrote {} ({})\n", EscapeControl(o.html),
               FormatBytes(static_cast<double>(rendered->page.size())));
  }
  if (!o.png.empty()) {
    if (auto st = WritePng(o, *rendered); !st.ok()) {
      fmt::print(stderr, "stallscope report: {}\n", EscapeControl(st.error().message));
      return 1;
    }
  }
  return 0;
}

}  // namespace stallscope::cli
