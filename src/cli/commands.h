#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "cli/machine.h"

namespace stallscope::monitor {
class Session;
}

namespace stallscope::cli {

/// Starts `--serve ADDR` beside a running session (src/cli/serve_cmd.cc, stallscope-full only:
/// the front binary links no HTTP server and leaves every `record --serve` line to
/// stallscope-full). Returns what keeps the exporter running (released before the session
/// finishes), or a one-line error naming the address.
using ServeHook = std::function<Result<std::shared_ptr<void>>(
    monitor::Session& session, const std::string& listen, int64_t interval_ns)>;

/// The ServeHook of stallscope-full.
[[nodiscard]] Result<std::shared_ptr<void>> StartServe(monitor::Session& session,
                                                       const std::string& listen,
                                                       int64_t interval_ns);

/// Checks a --listen / --serve address: empty when fine, else the one-line reason.
[[nodiscard]] std::optional<std::string> BadListenAddress(const std::string& listen);

/// Whether --serve `listen` can be listened on now (exporter::CheckListen): empty when it can,
/// else the one-line reason ("cannot listen on 127.0.0.1:9400: the port is in use"). Checked
/// before a command makes files or starts the job (issue 27 B19); StartServe may still fail
/// (the port taken in between), and the caller then removes what it made.
[[nodiscard]] std::optional<std::string> CannotListen(const std::string& listen);

struct ServeOptions {
  SamplingOptions sampling;
  std::string listen = "127.0.0.1:9400";
  std::string interval = "1s";
  std::string duration;  ///< stop after this long ("" = until a signal)
};
/// `stallscope serve`: GPUs and host as Prometheus metrics. 0 at the end (a signal or
/// --duration), 1 when it cannot listen, 2 on bad flags.
int RunServe(const ServeOptions& options);

struct RecordOptions {
  SamplingOptions sampling;
  std::string interval = "1s";
  std::string output;  ///< empty → stallscope-record-<time>.jsonl; "-" → stdout
  std::string duration;
  bool csv = false;
  /// --format: "jsonl" (default), "csv" (as --csv), "seed" (seed 002's GPU monitor objects);
  /// empty: not given.
  std::string format;
  bool force = false;  ///< replace an existing output file
  int32_t pid = 0;     ///< 0: none (--pid takes 1 or more)
  std::string serve;   ///< --serve ADDR: Prometheus metrics while recording ("" = none)
  std::vector<std::string> command;
};
/// `stallscope record`. Returns the followed command's exit code, else 0; 1 on errors.
/// `serve` starts options.serve (a non-empty --serve without a hook is a usage error).
int RunRecord(const RecordOptions& options, const ServeHook& serve = {});

struct TopOptions {
  SamplingOptions sampling;
  std::string interval = "1s";
  bool once = false;
  bool json = false;
  bool status = false;
  bool plain = false;   ///< the text table even on a terminal (no full screen)
  int32_t pid = 0;      ///< follow this process tree (0 = none)
  std::string run_dir;  ///< --run: follow this run directory, read-only ("" = none)
  int64_t count = 0;    ///< stop after this many refreshes (0 = until Ctrl-C)
};
/// `stallscope top`.
int RunTop(const TopOptions& options);

struct SummaryOptions {
  std::string path;
  bool json = false;
};
/// `stallscope summary`.
int RunSummary(const SummaryOptions& options);

struct RunOptions {
  SamplingOptions sampling;
  std::string name;
  std::string out;  ///< the run directory; empty → stallscope-runs/<date>-<time>-<name>
  std::string interval = "1s";
  bool no_auto = false;
  bool quiet = false;
  bool force = false;          ///< replace the files of a previous run in --out
  int64_t report_every = 100;  ///< interim phase report every N steps (0 = off)
  /// --steps: the hooks end the job after this many steps (STALLSCOPE_STOP_AFTER_STEPS); 0: none.
  int64_t stop_after_steps = 0;
  /// --duration: SIGTERM to the job's process group after this long, SIGKILL 10 s later; "" none.
  std::string stop_after;
  /// NAME=VALUE for the job on top of stallscope's own (`passes` and `sweep` set their controls).
  std::vector<std::string> env;
  /// The job's stdout and stderr go to job.log in the run directory (`passes`, `sweep`).
  bool job_log = false;
  /// --tui: the full-screen top while the job runs (its output goes to job.log), then the report.
  bool tui = false;
  std::string serve;  ///< --serve ADDR: Prometheus metrics while the job runs ("" = none)
  /// --stacks HZ: the Python stacks of each rank's main thread (stacks.jsonl; workers at HZ/5).
  int stacks_hz = 50;
  /// --stacks-threads: "main", or "all" (every thread of the ranks' processes at HZ/5).
  std::string stacks_threads = "main";
  bool no_stacks = false;  ///< --no-stacks
  std::vector<std::string> command;
};
/// `stallscope run`: returns the job's exit code (128+N when killed by signal N).
int RunRun(const RunOptions& options);

/// What `passes` and `sweep` share: how each run is bounded and where the runs go.
struct ExperimentOptions {
  SamplingOptions sampling;
  std::string out;  ///< empty → stallscope-runs/<date>-<time>-<name>-passes (or -sweep)
  std::string interval = "1s";
  int64_t steps = 0;     ///< per run: the hooks end the job after N steps (0: see duration)
  std::string duration;  ///< per run: SIGTERM after this long; neither given → 50 steps
  bool json = false;
  bool force = false;  ///< reuse a non-empty --out
  std::vector<std::string> command;
};

struct PassesOptions {
  ExperimentOptions e;
  int64_t synthetic_batches = 4;
  /// "1,N": the job with 1 and with N processes (seed 000 §1) instead of the A/B/C passes.
  std::string ranks;
};
/// `stallscope passes`: 0 with a conclusion, 1 without (pass A gave no rate), 2 on bad flags,
/// 130 when interrupted.
int RunPasses(const PassesOptions& options);

struct SweepOptions {
  ExperimentOptions e;
  std::vector<std::string> sets;  ///< KEY=V1,V2,...
  std::vector<std::string> args;  ///< argv words appended to the command, {KEY} substituted
};
/// `stallscope sweep`: 0 when a combination gave a rate, 1 when none did, 2 on bad flags, 130
/// when interrupted.
int RunSweep(const SweepOptions& options);

struct DiagnoseOptions {
  std::vector<std::string> dirs;  ///< one run directory, or one per node of one job
  bool json = false;
  bool thresholds = false;
  bool force = false;  ///< merge node runs that do not look like one job
};
/// `stallscope diagnose RUN_DIR` and `stallscope diagnose DIR1 DIR2 ...` (one job's nodes,
/// docs/commands/diagnose.md): 0 reported, 1 when a directory cannot be read or the runs are not
/// one job, 2 without a directory.
int RunDiagnose(const DiagnoseOptions& options);
/// `diagnose DIR1 DIR2 ...`: the runs merged into one job (diagnose_nodes_cmd.cc).
int RunDiagnoseNodes(const DiagnoseOptions& options);

struct ReportOptions {
  std::string path;      ///< a run directory, a trace file or folder of traces, or a recording
  std::string html;      ///< --html FILE
  std::string png;       ///< --png DIR: seed 002's figures
  bool force = false;    ///< --html / --png may replace existing files
  unsigned threads = 0;  ///< trace reading threads, 0 = all cores
};
/// `stallscope report PATH [--html FILE] [--png DIR]`: 0 written, 1 when PATH cannot be read, 2 on
/// bad flags or an output it must not write.
int RunReport(const ReportOptions& options);

struct CompareOptions {
  std::string a;  ///< run directories written by `stallscope run`
  std::string b;
  bool json = false;
};
/// `stallscope compare A B`: 0 when both are run directories (whatever the comparison says: the
/// outcome is in the output), 1 when one is not, 2 on bad flags.
int RunCompare(const CompareOptions& options);

struct TraceOptions {
  std::vector<std::string> paths;  ///< files (.json, .json.gz) or directories of them
  bool json = false;
  int32_t rank = -1;  ///< --rank: fallback when neither distributedInfo nor the name has one
  std::string steps;  ///< --steps A:B
  bool hta_compat = false;
  bool per_step = false;
  size_t top = 8;
  std::string export_perfetto;
  bool force = false;    ///< --force: --export-perfetto / --html may overwrite an existing file
  std::string html;      ///< --html FILE: the HTML report too
  unsigned threads = 0;  ///< 0 = all cores
};
/// `stallscope trace PATH...`: 0 on success, 1 when a file cannot be read or is not a trace, 2 on
/// bad flags.
int RunTrace(const TraceOptions& options);

struct DoctorOptions {
  SamplingOptions sampling;  ///< --nvml-lib, --proc-root
  std::string sys_root = "/sys";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string shm_path = "/dev/shm";
  bool json = false;
  std::string data;                  ///< --data DIR: read test of the training data
  std::string data_time = "3s";      ///< --data-time: its time bound
  std::string checkpoint_dir = ".";  ///< --checkpoint-dir
  std::string python = "python3";    ///< --python: the job's interpreter
  bool no_python = false;            ///< --no-python: do not run it
  std::optional<int64_t> workers;    ///< --workers: the DataLoader workers the job will use
  std::string code;                  ///< --code PATH: only the static check of training code
};
/// `stallscope doctor`: 0 when no check FAILs, 1 when one does, 2 on bad flags. With --code: 0
/// when no finding is a warn, 1 when one is, 2 when PATH is missing or the check cannot run.
int RunDoctor(const DoctorOptions& options);

struct DumpOptions {
  int32_t pid = 0;
  bool no_children = false;  ///< only PID, not its descendants
  bool all = false;          ///< also list the descendants that are not Python processes
  bool json = false;
};
/// `stallscope dump PID`: the Python stacks of PID and its descendants, read without stopping
/// them (src/pystack). 0 when at least one stack was read, 1 when none was (no such process, not
/// Python, not readable: one line each), 2 on bad flags.
int RunDump(const DumpOptions& options);

}  // namespace stallscope::cli
