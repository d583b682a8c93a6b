// `stallscope report PATH --html FILE`: the HTML report of a run directory, profiler traces (a
// file or a folder of ranks) or a recording.

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

#include <fmt/format.h>

#include "analysis/summary.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/output_path.h"
#include "diagnose/run_analysis.h"
#include "diagnose/run_report.h"
#include "diagnose/trace_report.h"
#include "report/html_render.h"
#include "report/png_render.h"
#include "rundir/run_dir.h"
#include "sample/recording.h"
#include "sample/seed_monitor.h"
#include "trace/trace_reader.h"

namespace stallscope::cli {
namespace {

namespace fs = std::filesystem;

enum class InputKind { kRun, kDamagedRun, kTrace, kRecording };

/// Names only `run` writes (rundir::kRunDirEntries less run.json and the report files, which
/// a folder of traces might hold too): a folder with one of them is a run directory.
constexpr std::string_view kRunOnlyEntries[] = {
    "events.bin", "events.names.jsonl", "python.jsonl", "recording.jsonl", "phases", "job.log"};

/// The run-only entries `dir` holds ("events.bin, phases/"), empty when none.
std::string RunEntriesIn(const std::string& dir) {
  std::string found;
  for (std::string_view name : kRunOnlyEntries) {
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(fs::path(dir) / name, ec);
    if (ec || !fs::exists(st)) continue;
    found +=
        fmt::format("{}{}{}", found.empty() ? "" : ", ", name, fs::is_directory(st) ? "/" : "");
  }
  return found;
}

/// A run directory has run.json (a folder with run-only files but no run.json is a damaged
/// one); a .json/.json.gz file or any other folder is traces (but a .json of seed 002's GPU
/// monitor objects, a recording); any other file is a recording (which says so itself when it
/// is not one).
InputKind Classify(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::symlink_status(fs::path(path) / "run.json", ec))) return InputKind::kRun;
    return RunEntriesIn(path).empty() ? InputKind::kTrace : InputKind::kDamagedRun;
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
  // Issue 27 B15: a FIFO (device, socket) named like a trace in the folder is skipped; say so.
  if (auto list = trace::ListTracePaths({path}); list.ok()) PrintWarnings(list->skipped);
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

/// Issue 27 B21: a run directory whose run.json is gone was read as a folder of traces
/// ("report.json: not a Chrome trace"). Say what it is, and what can still be reported.
Result<Rendered> DamagedRun(const std::string& dir) {
  std::error_code ec;
  const bool recording = fs::is_regular_file(fs::path(dir) / "recording.jsonl", ec);
  return MakeError(ErrorCode::kNotFound,
                   "{}: a run directory without run.json (it holds {}); run.json is written when "
                   "the run starts, so the run did not start or the file was removed{}",
                   dir, RunEntriesIn(dir),
                   recording ? fmt::format("; its recording alone: stallscope report "
                                           "{}/recording.jsonl --html FILE",
                                           dir)
                             : "");
}

Result<Rendered> Render(const ReportOptions& o) {
  // Issue 27 B21: a path that cannot be reached (a symbolic link loop, a folder it may not
  // search) fell through to the recording reader's "cannot open recording". Its own cause.
  if (struct stat st{}; ::stat(o.path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT)
      return MakeError(ErrorCode::kNotFound, "{}: no such file or directory", o.path);
    return MakeError(ErrorCode::kIo, "{}: cannot open: {}", o.path, ErrnoText(err));
  }
  switch (Classify(o.path)) {
    case InputKind::kRun:
      return RunInput(o.path);
    case InputKind::kDamagedRun:
      return DamagedRun(o.path);
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

/// The figures are written by rename too (report/png_render.cc RenderTo): a FIFO, device or
/// symbolic link under a figure's name in the folder is refused, --force or not (issue 27 B01).
/// Whether a regular file there may be replaced is WritePngFigures's call (--force).
std::optional<std::string> RefusePngDir(const ReportOptions& o) {
  for (const char* name : {report::kPngUtilization, report::kPngMemory, report::kPngLoadBalance}) {
    const std::string path = (fs::path(o.png) / name).string();
    if (auto refused = RefuseOutputPath("--png", path, true, OutputWrite::kReplace)) return refused;
  }
  return std::nullopt;
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
    if (auto refused = RefuseOutputPath("--html", o.html, o.force, OutputWrite::kReplace, inputs)) {
      fmt::print(stderr, "stallscope report: {}\n", EscapeControl(*refused));
      return 2;
    }
  }
  if (!o.png.empty()) {
    if (auto refused = RefusePngDir(o)) {
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
    if (auto st = rundir::WriteFileAtomic(o.html, rendered->page); !st.ok()) {
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
