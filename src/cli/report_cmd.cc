// `stallscope report PATH --html FILE`: the HTML report of a run directory, profiler traces (a
// file or a folder of ranks) or a recording.

#include <filesystem>

#include <fmt/format.h>

#include "analysis/summary.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/output_path.h"
#include "diagnose/run_dir.h"
#include "diagnose/run_report.h"
#include "diagnose/trace_report.h"
#include "diagnose/verdict.h"
#include "report/html_render.h"
#include "sample/recording.h"
#include "trace/trace_reader.h"

namespace stallscope::cli {
namespace {

namespace fs = std::filesystem;

enum class InputKind { kRun, kTrace, kRecording };

/// A run directory has run.json; a .json/.json.gz file or any other folder is traces; any other
/// file is a recording (which says so itself when it is not one).
InputKind Classify(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    return fs::exists(fs::path(path) / "run.json", ec) ? InputKind::kRun : InputKind::kTrace;
  }
  auto ends = [&](std::string_view s) { return path.ends_with(s); };
  if (ends(".json") || ends(".json.gz") || ends(".gz")) return InputKind::kTrace;
  return InputKind::kRecording;
}

Result<std::string> RunPage(const std::string& dir) {
  TRY(diagnose::RunData data, diagnose::LoadRun(dir));
  auto report = diagnose::BuildRunReport(data);
  report.verdict = diagnose::Diagnose(data, report);
  for (const auto& w : report.warnings)
    fmt::print(stderr, "stallscope report: warning: {}\n", EscapeControl(w));
  return report::RenderRunHtml(data, report);
}

Result<std::string> TracePage(const std::string& path, unsigned threads) {
  TRY(diagnose::TraceReport report,
      diagnose::AnalyzeTraceFiles({path}, trace::ReadOptions{}, trace::AnalysisOptions{}, threads,
                                  diagnose::TracesHook{}));
  for (const auto& r : report.ranks) {
    for (const auto& w : r.warnings)
      fmt::print(stderr, "stallscope report: warning: {}\n", EscapeControl(w));
  }
  return report::RenderTraceHtml(path, report);
}

Result<std::string> RecordingPage(const std::string& path) {
  TRY(sample::Recording recording, sample::ReadRecording(path));
  analysis::RecordingSummary summary = analysis::Summarize(recording);
  for (const auto& w : recording.warnings)
    fmt::print(stderr, "stallscope report: warning: {}\n", EscapeControl(w));
  return report::RenderRecordingHtml(path, recording, summary);
}

}  // namespace

int RunReport(const ReportOptions& o) {
  std::vector<std::string> inputs = {o.path};
  if (auto files = trace::ExpandTracePaths(inputs); files.ok())
    inputs.insert(inputs.end(), files->begin(), files->end());
  if (auto refused = RefuseOutputPath("--html", o.html, o.force, inputs)) {
    fmt::print(stderr, "stallscope report: {}\n", EscapeControl(*refused));
    return 2;
  }
  Result<std::string> page = [&]() -> Result<std::string> {
    switch (Classify(o.path)) {
      case InputKind::kRun:
        return RunPage(o.path);
      case InputKind::kTrace:
        return TracePage(o.path, o.threads);
      case InputKind::kRecording:
        return RecordingPage(o.path);
    }
    return MakeError(ErrorCode::kInvalidArgument, "{}: unknown input", o.path);
  }();
  if (!page.ok()) {
    fmt::print(stderr, "stallscope report: {}\n", EscapeControl(page.error().message));
    return 1;
  }
  if (auto st = diagnose::WriteFileAtomic(o.html, *page); !st.ok()) {
    fmt::print(stderr, "stallscope report: {}\n", EscapeControl(st.error().message));
    return 1;
  }
  fmt::print(stderr, "stallscope report: wrote {} ({})\n", EscapeControl(o.html),
             FormatBytes(static_cast<double>(page->size())));
  return 0;
}

}  // namespace stallscope::cli
