#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace stallscope::rundir {

/// Version of run.json and report.json (README "Run directory").
inline constexpr int kRunSchemaVersion = 1;

/// Every name `run` writes in a run directory (the monitor's events.bin and its names, the
/// Python notes, the rings' folder): what `run --force` may replace in a previous run's --out.
/// RunE2e.DataBoundWithoutWorkersShowsDataLoading checks a real run writes nothing else.
inline constexpr const char* kRunDirEntries[] = {
    "run.json", "recording.jsonl", "report.txt",         "report.json",
    "phases",   "events.bin",      "events.names.jsonl", "python.jsonl",
    "job.log",  "report.html",     "stacks.jsonl"};

/// The files of a run directory.
struct RunPaths {
  std::string dir;
  std::string run_json() const { return dir + "/run.json"; }
  std::string recording() const { return dir + "/recording.jsonl"; }
  std::string phases_dir() const { return dir + "/phases"; }
  std::string report_txt() const { return dir + "/report.txt"; }
  std::string report_json() const { return dir + "/report.json"; }
  std::string report_html() const { return dir + "/report.html"; }
  std::string job_log() const { return dir + "/job.log"; }
};

/// The line of a job's log that most likely says why it failed: of the file's last 16 KiB, the
/// last Python exception line ("ModuleNotFoundError: No module named 'numpy'"), else the last
/// non-blank line; trimmed and cut to 200 bytes. Empty when the file is missing or blank.
[[nodiscard]] std::string LastErrorLine(const std::string& path);

/// How the job ended, as run.json says it (`status`).
enum class RunStatus : uint8_t {
  kRunning,  ///< "running": not ended yet (or the monitor died before it could say)
  kExited,   ///< "exited": the job exited by itself (`--steps` ends it so, exit code 0)
  kKilled,   ///< "killed": a signal ended it
  kStopped,  ///< "stopped": `--duration` ended it (SIGTERM, then SIGKILL)
};
/// Every status with its run.json name, in enum order.
inline constexpr std::pair<RunStatus, std::string_view> kRunStatusNames[] = {
    {RunStatus::kRunning, "running"},
    {RunStatus::kExited, "exited"},
    {RunStatus::kKilled, "killed"},
    {RunStatus::kStopped, "stopped"},
};
[[nodiscard]] std::string_view RunStatusName(RunStatus status);
/// The status of a run.json name; empty for any other string.
[[nodiscard]] std::optional<RunStatus> ParseRunStatus(std::string_view name);

/// What `run` knows about the job, written at start and rewritten (atomically) at the end.
struct RunMeta {
  int schema_version = kRunSchemaVersion;
  std::string tool_version;
  std::string name;
  std::vector<std::string> command;
  std::string hostname;
  int32_t pid = 0;
  int64_t start_wall_ns = 0;
  int64_t start_mono_ns = 0;
  std::optional<int64_t> end_mono_ns;
  std::optional<int> exit_code;
  RunStatus status = RunStatus::kRunning;
  bool auto_hooks = true;
  int64_t interval_ns = 0;
  /// CPU time (user + system) of the stallscope monitor itself over the run, and of the job
  /// (its process and every descendant it waited for), both from getrusage at the end.
  std::optional<double> monitor_cpu_s;
  std::optional<double> job_cpu_s;
  /// The environment variables that change how a job performs (`PerformanceEnvironment`), as the
  /// job got them: `compare` shows what differed. Never the whole environment (it holds secrets).
  std::map<std::string, std::string> env;
};

/// The variables of `environ` (NAME=VALUE strings) whose names start with a prefix that tunes
/// threads, CUDA, NCCL, PyTorch or the allocator (OMP_, MKL_, CUDA_, NCCL_, PYTORCH_, TORCH_, ...),
/// plus `extra` (NAME=VALUE, set on top for the job).
[[nodiscard]] std::map<std::string, std::string> PerformanceEnvironment(
    const char* const* environ, const std::vector<std::string>& extra = {});

/// Creates `<base>/<YYYYmmdd>-<HHMMSS>-<name>/` and its phases/ (a numeric suffix when taken).
[[nodiscard]] Result<RunPaths> CreateRunDir(const std::string& base, const std::string& name,
                                            int64_t wall_ns);

/// A default run name from the command: `python train.py` → "train", `torchrun ... x.py` → "x".
[[nodiscard]] std::string DefaultRunName(const std::vector<std::string>& command);

/// The command as a shell would take it back: arguments with spaces, quotes or shell characters
/// in single quotes ("'a b'", "'it'\\''s'"), an empty one as ''. Not escaped for a terminal:
/// callers EscapeControl it.
[[nodiscard]] std::string ShellJoin(const std::vector<std::string>& argv);

/// Writes run.json via a temporary file and rename(2): readers never see half a file.
[[nodiscard]] Status WriteRunMeta(const RunPaths& paths, const RunMeta& meta);
/// The largest run.json read: stallscope writes a few KiB (the env map included).
inline constexpr size_t kMaxRunJsonBytes = size_t{1} << 20;
/// Reads run.json. Errors, one line naming the file: kNotFound "DIR: not a stallscope run
/// directory (no run.json)"; kIo "…/run.json: cannot read: permission denied" (the errno's
/// words); kUnsupported when it is not a regular file (a FIFO is never opened) or is over
/// kMaxRunJsonBytes; kParse when it is not a JSON object, a field has the wrong type, or one of
/// "command", "status", "start_mono_ns" (written at every run's start) is absent: `{}` is no run.
[[nodiscard]] Result<RunMeta> ReadRunMeta(const RunPaths& paths);

/// Writes `content` to `path` atomically (temporary file + rename).
[[nodiscard]] Status WriteFileAtomic(const std::string& path, const std::string& content);

}  // namespace stallscope::rundir
