#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stallscope::rundir {

/// File in a run directory where each Python process of the job notes itself
/// (python/stallscope/_startup.py): one JSON object per line.
inline constexpr const char* kPythonNotesFile = "python.jsonl";

/// One Python interpreter of the job: its "start" note, and the "hooks" note auto.py writes
/// once torch is imported.
struct PythonProcess {
  int32_t pid = 0;
  int32_t ppid = 0;
  std::string version;         ///< "3.12.1"
  std::string implementation;  ///< "cpython"
  std::string executable;
  bool venv = false;
  std::vector<std::string> argv;
  bool shim = false;                   ///< stallscope's sitecustomize ran: PYTHONPATH was honoured
  bool recording = false;              ///< the recorder loaded and the writer is on
  bool auto_hooks = true;              ///< STALLSCOPE_AUTO was not 0
  std::optional<std::string> backend;  ///< "core" | "native"
  std::optional<std::string> backend_error;  ///< why no recorder loaded
  bool hooks_noted = false;                  ///< a "hooks" note came (torch was imported)
  std::optional<std::string> torch_version;
  /// Phase → how it is measured ("global hook", "patch", "not measured: …"), as noted.
  std::vector<std::pair<std::string, std::string>> mechanisms;
  std::optional<std::string> hooks_error;
  /// When the interpreter started and when torch was imported (the notes' ts_ns,
  /// CLOCK_MONOTONIC); empty when not noted.
  std::optional<int64_t> start_ns;
  std::optional<int64_t> hooks_ns;
};

/// The notes of a run directory. Lines that are not JSON objects are counted, not fatal.
struct PythonNotes {
  std::vector<PythonProcess> processes;  ///< in order of their start notes
  int64_t malformed_lines = 0;
  int64_t overlong_lines = 0;  ///< over kMaxJsonLineBytes: skipped unread (issue 27 B16)
  /// Why the file could not be read (unreadable, not a regular file: a FIFO is never opened,
  /// issue 27 B14), naming it; empty when it was read or is missing.
  std::string error;
};

/// Reads `<run_dir>/python.jsonl`; a missing file gives no processes (older runs, --no-auto).
/// Memory: one line of at most kMaxJsonLineBytes at a time, plus the notes kept.
[[nodiscard]] PythonNotes ReadPythonNotes(const std::string& run_dir);

/// If `cmdline` (argv joined by spaces, as the process table has it) starts a Python that ignores
/// PYTHONPATH or skips site (-E, -I, -S, alone or combined as -IS), the flag; else nullopt.
[[nodiscard]] std::optional<char> PythonFlagIgnoringStartup(std::string_view cmdline);

/// True when `comm` or the first word of `cmdline` names a Python interpreter (python, python3,
/// python3.12, ...).
[[nodiscard]] bool LooksLikePython(std::string_view comm, std::string_view cmdline);

}  // namespace stallscope::rundir
