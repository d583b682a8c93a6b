#pragma once

// `stallscope doctor --code PATH`: a static check of training code for patterns that stall GPUs.
// The analysis is a Python script (code_check.py, embedded) that the job's interpreter runs on
// PATH with the standard library's `ast`: it never imports torch or the code it reads. This side
// runs it and parses its one JSON line (src/doctor/README.md); src/report/doctor_render.cc renders
// the findings.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stallscope::doctor {

/// The analyzer script (src/doctor/code_check.py). It prints one line: kCodeCheckMarker, a blank,
/// then a JSON object: "python", "files_checked", "files_not_checked", "findings", "truncated",
/// "warnings" (one per file not checked, with the reason; at most 100).
[[nodiscard]] std::string_view CodeCheckScript();
inline constexpr std::string_view kCodeCheckMarker = "STALLSCOPE_CODE_CHECK";

enum class CodeSeverity { kInfo, kWarn };

/// One pattern found at file:line.
struct CodeFinding {
  std::string file;
  int64_t line = 0;
  std::string id;  ///< the pattern, e.g. "loop-item" (README-doctor-code.md lists them)
  CodeSeverity severity = CodeSeverity::kInfo;
  std::string why;
  std::string fix;
  std::string source;  ///< the line's text, stripped, at most 160 characters
};

/// A file that was not checked (a SyntaxError, unreadable, not a regular file, over 5 MiB) and
/// why; line 0 when unknown.
struct CodeWarning {
  std::string file;
  int64_t line = 0;
  std::string message;
};

struct CodeReport {
  std::string path;    ///< what was checked, as given
  std::string python;  ///< the interpreter that ran the analyzer, as given
  bool ran = false;    ///< false: `error` says why there are no findings
  std::string error;
  std::string python_version;  ///< e.g. "3.11.7"
  int64_t files_checked = 0;
  /// Files the analyzer could not read or parse (B12: never passed as clean); `warnings` names
  /// the first 100 of them.
  int64_t files_not_checked = 0;
  bool truncated = false;  ///< more findings than the analyzer reports (2000)
  std::vector<CodeFinding> findings;
  std::vector<CodeWarning> warnings;  ///< the files not checked, each with the reason
  int64_t malformed = 0;  ///< findings or warnings in the JSON that lacked a field (skipped)
};

/// Reads the analyzer's output (the marker line; other lines are ignored). `ran` is false, with
/// the reason in `error`, when there is no marker line or its JSON is not an object.
[[nodiscard]] CodeReport ParseCodeCheck(std::string_view stdout_text);

/// Why `path` cannot be given to --code ("no such file or directory", "a FIFO, not a regular
/// file or directory"), or nothing when it is a directory or a regular file (after symlinks).
[[nodiscard]] std::optional<std::string> CodePathProblem(const std::string& path);

/// Runs the analyzer under `python` on `path` (a .py file or a directory; it must exist). Never
/// fails: a missing interpreter, a timeout or garbage is reported in `error`.
[[nodiscard]] CodeReport CheckCode(const std::string& python, const std::string& path,
                                   int64_t timeout_ns);

/// How many findings are "warn".
[[nodiscard]] int64_t CountWarnFindings(const CodeReport& report);

/// "warn" or "info": the JSON's and the text's word.
[[nodiscard]] std::string_view SeverityName(CodeSeverity severity);

/// Exit status of `doctor --code`, the first that applies: 2 when the check could not run, 3
/// when a file could not be checked (a CI gate must not pass code it never read), 1 when a
/// finding is "warn" (or worse), else 0.
[[nodiscard]] int CodeExitCode(const CodeReport& report);
inline constexpr int kCodeExitNotRun = 2;
inline constexpr int kCodeExitNotChecked = 3;

}  // namespace stallscope::doctor
