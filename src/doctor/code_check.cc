#include "doctor/code_check.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/file_read.h"
#include "base/json_fields.h"
#include "base/units.h"
#include "doctor/python_probe.h"

namespace stallscope::embedded {
extern const std::string_view kCodeCheckPy;  // src/doctor/code_check.py (CMake embeds it)
}  // namespace stallscope::embedded

namespace stallscope::doctor {
namespace {

/// One finding from its JSON object; empty when a required field is missing or mistyped.
std::optional<CodeFinding> ParseFinding(const nlohmann::json& j) {
  CodeFinding f;
  auto file = JsonOpt<std::string>(j, "file");
  auto line = JsonOpt<int64_t>(j, "line");
  auto id = JsonOpt<std::string>(j, "id");
  auto severity = JsonOpt<std::string>(j, "severity");
  if (!file || !line || !id || !severity) return std::nullopt;
  f.file = std::move(*file);
  f.line = *line;
  f.id = std::move(*id);
  // An unknown severity from a newer analyzer counts as warn: better loud than silent.
  f.severity = *severity == "info" ? CodeSeverity::kInfo : CodeSeverity::kWarn;
  f.why = JsonOpt<std::string>(j, "why").value_or("");
  f.fix = JsonOpt<std::string>(j, "fix").value_or("");
  f.source = JsonOpt<std::string>(j, "source").value_or("");
  return f;
}

/// The JSON text after the marker (which must start a line: a sitecustomize may print first).
std::optional<std::string_view> MarkerLine(std::string_view text) {
  const std::string marker = std::string(kCodeCheckMarker) + " ";
  size_t at = text.find(marker);
  while (at != std::string_view::npos && at > 0 && text[at - 1] != '\n') {
    at = text.find(marker, at + 1);
  }
  if (at == std::string_view::npos) return std::nullopt;
  const size_t begin = at + marker.size();
  const size_t end = text.find('\n', begin);
  return text.substr(begin, end == std::string_view::npos ? end : end - begin);
}

}  // namespace

std::string_view CodeCheckScript() { return embedded::kCodeCheckPy; }

CodeReport ParseCodeCheck(std::string_view text) {
  CodeReport r;
  const std::optional<std::string_view> line = MarkerLine(text);
  if (!line) {
    r.error = "it printed no result line";
    return r;
  }
  const nlohmann::json j = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    r.error = "its result line is not a JSON object";
    return r;
  }
  r.ran = true;
  r.python_version = JsonOpt<std::string>(j, "python").value_or("");
  r.files_checked = JsonOpt<int64_t>(j, "files_checked").value_or(0);
  r.files_not_checked = JsonOpt<int64_t>(j, "files_not_checked").value_or(0);
  r.truncated = JsonOpt<bool>(j, "truncated").value_or(false);
  if (const auto it = j.find("findings"); it != j.end() && it->is_array()) {
    for (const auto& f : *it) {
      if (auto finding = ParseFinding(f)) {
        r.findings.push_back(std::move(*finding));
      } else {
        ++r.malformed;
      }
    }
  }
  int64_t warnings = 0;  // each is a file not checked: a count below them is not believed
  if (const auto it = j.find("warnings"); it != j.end() && it->is_array()) {
    for (const auto& w : *it) {
      ++warnings;
      auto file = JsonOpt<std::string>(w, "file");
      auto message = JsonOpt<std::string>(w, "message");
      if (!file || !message) {
        ++r.malformed;
        continue;
      }
      r.warnings.push_back({*file, JsonOpt<int64_t>(w, "line").value_or(0), *message});
    }
  }
  r.files_not_checked = std::max(r.files_not_checked, warnings);
  return r;
}

std::optional<std::string> CodePathProblem(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? std::string("no such file or directory") : std::strerror(errno);
  }
  if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) return std::nullopt;
  return fmt::format("{}, not a regular file or directory", FileKind(st.st_mode));
}

CodeReport CheckCode(const std::string& python, const std::string& path, int64_t timeout_ns) {
  // -I: isolated mode, so neither PYTHONPATH nor the current directory (the user's code, which
  // may have a json.py) is on sys.path; the analyzer imports only the standard library.
  Result<CommandOutput> run =
      RunCommand({python, "-I", "-c", std::string(CodeCheckScript()), path}, timeout_ns);
  CodeReport r;
  if (!run.ok()) {
    r.error = run.error().code == ErrorCode::kNotFound
                  ? fmt::format("{} not found{}", python,
                                python.find('/') == std::string::npos ? " on PATH" : "")
                  : run.error().message;
  } else if (run->timed_out) {
    r.error = fmt::format("{} gave no answer within {:g} s", python, NsToSeconds(timeout_ns));
  } else {
    r = ParseCodeCheck(run->out);
    if (!r.ran) {
      // The last line of stderr says why (a SyntaxError of a Python 2, a crash).
      std::string_view err = run->err;
      while (!err.empty() && err.back() == '\n') err.remove_suffix(1);
      const size_t nl = err.rfind('\n');
      const std::string_view last = nl == std::string_view::npos ? err : err.substr(nl + 1);
      r.error = fmt::format("{} exited {}: {}", python, run->exit_code,
                            last.empty() ? r.error : std::string(last));
    }
  }
  r.path = path;
  r.python = python;
  return r;
}

int64_t CountWarnFindings(const CodeReport& r) {
  return std::count_if(r.findings.begin(), r.findings.end(),
                       [](const CodeFinding& f) { return f.severity == CodeSeverity::kWarn; });
}

std::string_view SeverityName(CodeSeverity s) { return s == CodeSeverity::kWarn ? "warn" : "info"; }

int CodeExitCode(const CodeReport& r) {
  if (!r.ran) return kCodeExitNotRun;
  if (r.files_not_checked > 0) return kCodeExitNotChecked;
  return CountWarnFindings(r) > 0 ? 1 : 0;
}

}  // namespace stallscope::doctor
