#pragma once
// Where the job's Python was while the time went (issue 31): the stack samples of stacks.jsonl
// placed in the phase and the step they fell in, counted per line of the job's own code, and the
// lines of the principal finding's phase added to its evidence.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diagnose/findings.h"
#include "rundir/run_data.h"

namespace stallscope::diagnose {

struct RunReport;

/// One line of code and the samples that were at it.
struct StackLine {
  std::string where;  ///< "train.py:141" (site-packages and the stdlib's folders cut off)
  std::string file;   ///< as the interpreter named it
  std::string function;
  int line = 0;
  std::string text;      ///< the source line, when it could be read
  bool library = false;  ///< an installed package or the stdlib: no line of the job's own code
  int64_t samples = 0;
  double share = 0;  ///< of the group's samples
  /// The library frame most of these samples were in below this line ("PIL/Image.py:2192
  /// resize"), and its share of this line's samples; empty when the line itself was innermost.
  std::string via;
  double via_share = 0;
};

/// The samples of one phase of the ranks' main threads, or of the DataLoader workers.
struct StackGroup {
  std::string name;  ///< a phase ("data_loading", "other", ...), or "workers"
  int64_t samples = 0;
  std::vector<StackLine> lines;  ///< the job's own lines (else the innermost), most samples first
};

/// What the stack samples of a run say (report.json "stacks", docs/formats.md).
struct StackReport {
  bool present = false;  ///< stacks.jsonl held samples
  int main_hz = 0;
  int worker_hz = 0;
  int64_t samples = 0;         ///< every sample of the file
  int64_t steady_samples = 0;  ///< of the ranks' main threads in their steady steps
  int64_t torn = 0;
  int64_t failed = 0;
  std::optional<double> cpu_s;        ///< the sampling thread's CPU time
  std::vector<StackGroup> phases;     ///< most samples first
  std::optional<StackGroup> workers;  ///< over the steady window
  /// The ranks' main threads while their GPU was idle (the driver's sub-second utilization at or
  /// below stack_gpu_idle_pct), in the steady steps, whatever the phase; empty without those
  /// samples (no GPU, an old driver) or when a rank's GPU is not known (several GPUs and no
  /// process list naming the rank's pid).
  std::optional<StackGroup> gpu_idle;
  /// The ranks' other threads (`run --stacks-threads all`: a pin-memory thread, a logging
  /// thread), in the steady steps; empty without such samples.
  std::optional<StackGroup> threads;
  /// A job that marked no steps (no training loop): its processes' main threads over the whole
  /// run (DataLoader workers apart); empty when some rank has steps.
  std::optional<StackGroup> whole_run;
  /// Processes not sampled, one line each with the reason (not Python, no rights, exited before
  /// it was read, exec'd into something else, its reads kept failing).
  std::vector<std::string> unreadable;
};

/// At most this many lines per group in the report.
inline constexpr size_t kMaxStackLines = 10;

/// Whether `file` is an installed package's or the standard library's (or stallscope's own hooks),
/// not the job's code.
[[nodiscard]] bool IsLibraryFile(std::string_view file);
/// `file` for people: the part after site-packages/, dist-packages/ or lib/pythonX.Y/, else
/// relative to `cwd` when under it, else as is.
[[nodiscard]] std::string ShortPath(std::string_view file, std::string_view cwd);

/// Places every sample of `data.stacks` in its rank's step phases (report.phases, steady steps
/// only) and counts lines per phase; DataLoader workers' samples in the steady window, apart.
[[nodiscard]] StackReport AttributeStacks(const rundir::RunData& data, const RunReport& report);

/// Adds to each finding of the verdict whose evidence names a phase ("phase_share.other") the
/// lines the main thread was at during that phase, to a data-bound finding what the workers
/// were doing, and to the principal finding where the main thread was while the GPU was idle;
/// one evidence line each (metric "stacks.<group>", "stacks.gpu_idle").
void AddStackEvidence(Verdict& verdict, const StackReport& stacks);

}  // namespace stallscope::diagnose
