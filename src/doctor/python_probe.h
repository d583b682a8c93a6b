#pragma once

// Asks the job's Python about itself and torch: runs `PYTHON -c <script>` (standard library only,
// Python 3.8+ and older 3.x alike) with a time limit and reads the one JSON line it prints.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "doctor/facts.h"

namespace stallscope::doctor {

/// The probe script. It prints one line: kPythonProbeMarker, a blank, then a JSON object with
/// "python", "implementation", "executable", "venv", and either "torch_error" or "torch",
/// "torch_cuda", "torch_hip", "torch_threads", "cuda_available", "device_count", "cudnn",
/// "warnings" (what torch warned while initialising CUDA).
[[nodiscard]] std::string_view PythonProbeScript();
inline constexpr std::string_view kPythonProbeMarker = "STALLSCOPE_DOCTOR_PROBE";

/// What a finished command left.
struct CommandOutput {
  int exit_code = -1;  ///< 128+N when killed by signal N
  bool timed_out = false;
  std::string out;  ///< stdout, at most 1 MiB
  std::string err;  ///< stderr, at most 1 MiB
};

/// Runs argv (argv[0] searched in PATH) without a shell, stdin from /dev/null, in its own process
/// group, which is killed (SIGKILL) when `timeout_ns` passes. The command never outlives this
/// process: it gets SIGKILL when this process dies, however it dies (PR_SET_PDEATHSIG). Not
/// thread-safe with respect to a concurrent fork elsewhere. Errors: the command could not be
/// started ("cannot run 'python3': No such file or directory").
[[nodiscard]] Result<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                               int64_t timeout_ns);

/// Reads the probe's output (the marker line; other lines are ignored). `ran` is false, with the
/// reason in `error`, when there is no marker line or its JSON is malformed.
[[nodiscard]] PythonFacts ParsePythonProbe(std::string_view stdout_text);

/// Runs the probe under `python` (a path, or a name searched in PATH) and parses its answer.
/// Never fails: a missing interpreter, a timeout or garbage is reported in `error`.
[[nodiscard]] PythonFacts ProbePython(const std::string& python, int64_t timeout_ns);

}  // namespace stallscope::doctor
