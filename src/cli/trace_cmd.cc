// `stallscope trace`: analyse torch.profiler (Kineto / Chrome) traces of one rank or a whole job.

#include <malloc.h>

#include <cstdio>

#include <fmt/format.h>

#include "base/units.h"
#include "cli/commands.h"
#include "cli/output_path.h"
#include "diagnose/trace_report.h"
#include "report/html_render.h"
#include "report/trace_render.h"
#include "rundir/run_dir.h"
#include "trace/perfetto_export.h"
#include "trace/trace_reader.h"

namespace stallscope::cli {
namespace {

/// "A:B", "A:", ":B" or "A" → inclusive ProfilerStep numbers.
Status ParseSteps(const std::string& text, trace::AnalysisOptions& o) {
  if (text.empty()) return OkStatus();
  auto colon = text.find(':');
  std::string_view a = std::string_view(text).substr(0, colon);
  std::string_view b = colon == std::string::npos ? a : std::string_view(text).substr(colon + 1);
  if (!a.empty()) {
    o.first_step = ParseInt64(a);
    if (!o.first_step)
      return MakeError(ErrorCode::kInvalidArgument, "--steps {}: expected A:B", text);
  }
  if (!b.empty()) {
    o.last_step = ParseInt64(b);
    if (!o.last_step)
      return MakeError(ErrorCode::kInvalidArgument, "--steps {}: expected A:B", text);
  }
  if (o.first_step && o.last_step && *o.first_step > *o.last_step) {
    return MakeError(ErrorCode::kInvalidArgument, "--steps {}: A is after B", text);
  }
  return OkStatus();
}

/// Issue 12 finding 5: `--export-perfetto` once overwrote the input trace it named. Checked
/// before anything is read (cli/output_path.h): never one of the inputs, files of a folder
/// included (even with --force), an existing file only with --force, and never a FIFO, device
/// or symbolic link for --html (written by rename: issue 27 B01).
Status CheckExportPath(const TraceOptions& o) {
  if (o.export_perfetto.empty() && o.html.empty()) return OkStatus();
  std::vector<std::string> inputs = o.paths;
  if (auto files = trace::ExpandTracePaths(o.paths); files.ok())
    inputs.insert(inputs.end(), files->begin(), files->end());
  struct Output {
    const char* flag;
    const std::string* path;
    OutputWrite how;
  };
  for (auto [flag, path, how] :
       {Output{"--export-perfetto", &o.export_perfetto, OutputWrite::kInPlace},
        Output{"--html", &o.html, OutputWrite::kReplace}}) {
    if (path->empty()) continue;
    if (auto refused = RefuseOutputPath(flag, *path, o.force, how, inputs))
      return MakeError(ErrorCode::kInvalidArgument, "{}", *refused);
  }
  return OkStatus();
}

/// --export-perfetto: writes every rank's events, read in full, before the analysis.
diagnose::TracesHook PerfettoExport(const std::string& path) {
  return [path](const std::vector<trace::RankTrace>& traces) -> Status {
    TRY(trace::PerfettoExportStats stats, trace::WritePerfettoJsonFile(traces, path));
    fmt::print(stderr,
               "stallscope trace: wrote {} ({} slices, {} flows, {} tracks; open it in "
               "https://ui.perfetto.dev)\n",
               EscapeControl(path), stats.slices, stats.flows, stats.tracks);
    return OkStatus();
  };
}

// glibc hands each freed big buffer back to the kernel and the next one faults its pages in
// again (~7 µs a fault on the test VMs: a third of the time on a 250 MB rank): keep freed memory
// for reuse instead. Process-local (a child inherits nothing). 32 MiB is glibc's ceiling for
// the mmap threshold on 64-bit.
void KeepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
}

}  // namespace

int RunTrace(const TraceOptions& o) {
  KeepFreedMemory();
  trace::AnalysisOptions analysis;
  analysis.hta_compat = o.hta_compat;
  if (auto st = ParseSteps(o.steps, analysis); !st.ok()) {
    fmt::print(stderr, "stallscope trace: {}\n", EscapeControl(st.error().message));
    return 2;
  }
  if (auto st = CheckExportPath(o); !st.ok()) {
    fmt::print(stderr, "stallscope trace: {}\n", EscapeControl(st.error().message));
    return 2;
  }
  // Issue 27 B15: a FIFO (device, socket) named like a trace in a folder hung the read; it is
  // skipped, and said so once here.
  if (auto list = trace::ListTracePaths(o.paths); list.ok()) {
    for (const std::string& line : list->skipped)
      fmt::print(stderr, "stallscope trace: warning: {}\n", EscapeControl(line));
  }
  trace::ReadOptions read;
  if (o.rank >= 0) read.rank = o.rank;
  auto report = diagnose::AnalyzeTraceFiles(
      o.paths, read, analysis, o.threads,
      o.export_perfetto.empty() ? diagnose::TracesHook{} : PerfettoExport(o.export_perfetto));
  if (!report.ok()) {
    fmt::print(stderr, "stallscope trace: {}\n", EscapeControl(report.error().message));
    return 1;
  }
  // Warnings go to stderr too, so a --json consumer sees them without parsing.
  for (const auto& r : report->ranks) {
    for (const auto& w : r.warnings)
      fmt::print(stderr, "stallscope trace: warning: {}\n", EscapeControl(w));
  }
  report::TraceTextOptions text;
  text.per_step = o.per_step;
  text.top_kernels = o.top;
  std::string out =
      o.json ? report::RenderTraceJson(*report) : report::RenderTraceText(*report, text);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (!o.html.empty()) {
    std::string title = o.paths.size() == 1 ? o.paths[0] : fmt::format("{} traces", o.paths.size());
    if (auto st = rundir::WriteFileAtomic(o.html, report::RenderTraceHtml(title, *report));
        !st.ok()) {
      fmt::print(stderr, "stallscope trace: {}\n", EscapeControl(st.error().message));
      return 1;
    }
    fmt::print(stderr, "stallscope trace: wrote {}\n", EscapeControl(o.html));
  }
  return 0;
}

}  // namespace stallscope::cli
