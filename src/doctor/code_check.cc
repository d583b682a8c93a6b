#include "doctor/code_check.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json_fields.h"
#include "base/json_writer.h"
#include "base/units.h"
#include "doctor/python_probe.h"

namespace stallscope::embedded {
extern const std::string_view kCodeCheckPy;  // src/doctor/code_check.py (CMake embeds it)
}  // namespace stallscope::embedded

namespace stallscope::doctor {
namespace {

std::string_view SeverityName(CodeSeverity s) { return s == CodeSeverity::kWarn ? "warn" : "info"; }

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

std::string Location(std::string_view file, int64_t line) {
  return line > 0 ? fmt::format("{}:{}", file, line) : std::string(file);
}

int64_t CountWarns(const CodeReport& r) {
  return std::count_if(r.findings.begin(), r.findings.end(),
                       [](const CodeFinding& f) { return f.severity == CodeSeverity::kWarn; });
}

std::string Plural(int64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
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
  if (const auto it = j.find("warnings"); it != j.end() && it->is_array()) {
    for (const auto& w : *it) {
      auto file = JsonOpt<std::string>(w, "file");
      auto message = JsonOpt<std::string>(w, "message");
      if (!file || !message) {
        ++r.malformed;
        continue;
      }
      r.warnings.push_back({*file, JsonOpt<int64_t>(w, "line").value_or(0), *message});
    }
  }
  return r;
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

std::string RenderCodeText(const CodeReport& r) {
  if (!r.ran) {
    return fmt::format("stallscope doctor --code: could not check {}: {}\n", EscapeControl(r.path),
                       EscapeControl(r.error));
  }
  const int64_t warns = CountWarns(r);
  const int64_t infos = static_cast<int64_t>(r.findings.size()) - warns;
  std::string out =
      fmt::format("{}: {}, {} in {} ({}, Python {})\n", warns > 0 ? "WARN" : "OK",
                  Plural(warns, "GPU-stalling pattern", "GPU-stalling patterns"),
                  Plural(infos, "note", "notes"), Plural(r.files_checked, "file", "files"),
                  EscapeControl(r.path), EscapeControl(r.python_version));
  size_t width = 0;
  for (const CodeFinding& f : r.findings) {
    width = std::max(width, EscapeControl(Location(f.file, f.line)).size());
  }
  for (const CodeFinding& f : r.findings) {
    out += fmt::format("\n{:<4}  {:<{}}  {}\n", f.severity == CodeSeverity::kWarn ? "WARN" : "INFO",
                       EscapeControl(Location(f.file, f.line)), width, f.id);
    if (!f.source.empty()) out += fmt::format("      | {}\n", EscapeControl(f.source));
    out +=
        fmt::format("      why: {}\n      fix: {}\n", EscapeControl(f.why), EscapeControl(f.fix));
  }
  if (r.truncated) out += "\n(more findings than these: fix these and run it again)\n";
  if (!r.warnings.empty()) out += "\n";
  for (const CodeWarning& w : r.warnings) {
    out += fmt::format("warning: {}: {}\n", EscapeControl(Location(w.file, w.line)),
                       EscapeControl(w.message));
  }
  if (r.files_checked == 0 && r.warnings.empty()) {
    out += fmt::format("warning: no .py file in {} (venv, site-packages and .git are skipped)\n",
                       EscapeControl(r.path));
  }
  if (r.malformed > 0) {
    out += fmt::format("warning: {} malformed entries in the analyzer's answer were skipped\n",
                       r.malformed);
  }
  if (warns > 0) {
    out +=
        "\nNext: fix the WARN lines (each costs GPU time every step), then measure the change:\n"
        "  stallscope run -- python train.py\n";
  } else if (infos > 0) {
    out += "\nNext: nothing stalls every step; the INFO notes are worth a look.\n";
  }
  return out;
}

std::string RenderCodeJson(const CodeReport& r, std::string_view tool_version) {
  std::string out;
  JsonWriter w(out);
  const int64_t warns = CountWarns(r);
  w.BeginObject().Field("schema_version", 1).Field("tool", "stallscope doctor --code");
  w.Field("version", tool_version).Field("path", r.path).Field("python", r.python);
  w.FieldBool("ran", r.ran).Key("error");
  r.ran ? w.Null() : w.String(r.error);
  w.Field("python_version", r.python_version).Field("files_checked", r.files_checked);
  w.Key("summary").BeginObject().Field("warn", warns);
  w.Field("info", static_cast<int64_t>(r.findings.size()) - warns);
  w.Field("exit_code", CodeExitCode(r)).FieldBool("truncated", r.truncated).EndObject();
  w.Key("findings").BeginArray();
  for (const CodeFinding& f : r.findings) {
    w.BeginObject().Field("file", f.file).Field("line", f.line).Field("id", f.id);
    w.Field("severity", SeverityName(f.severity)).Field("source", f.source);
    w.Field("why", f.why).Field("fix", f.fix).EndObject();
  }
  w.EndArray().Key("warnings").BeginArray();
  for (const CodeWarning& x : r.warnings) {
    w.BeginObject().Field("file", x.file).Field("line", x.line).Field("message", x.message);
    w.EndObject();
  }
  w.EndArray().EndObject();
  out += '\n';
  return out;
}

int CodeExitCode(const CodeReport& r) {
  if (!r.ran) return 2;
  return CountWarns(r) > 0 ? 1 : 0;
}

}  // namespace stallscope::doctor
