#include "rundir/python_notes.h"

#include <map>

#include <nlohmann/json.hpp>

#include "base/file_read.h"
#include "base/json_fields.h"

namespace stallscope::rundir {
namespace {

using nlohmann::json;

std::string Str(const json& j, const char* key) {
  return JsonOpt<std::string>(j, key).value_or(std::string());
}

void ApplyStart(const json& j, PythonProcess& p) {
  p.start_ns = JsonOpt<int64_t>(j, "ts_ns");
  p.ppid = JsonOpt<int32_t>(j, "ppid").value_or(0);
  p.version = Str(j, "python");
  p.implementation = Str(j, "implementation");
  p.executable = Str(j, "executable");
  p.venv = JsonOpt<bool>(j, "venv").value_or(false);
  if (auto it = j.find("argv"); it != j.end() && it->is_array()) {
    for (const auto& a : *it) {
      if (a.is_string()) p.argv.push_back(a.get<std::string>());
    }
  }
  p.shim = JsonOpt<bool>(j, "shim").value_or(false);
  p.recording = JsonOpt<bool>(j, "recording").value_or(false);
  p.auto_hooks = JsonOpt<bool>(j, "auto").value_or(true);
  p.backend = JsonOpt<std::string>(j, "backend");
  p.backend_error = JsonOpt<std::string>(j, "backend_error");
}

void ApplyHooks(const json& j, PythonProcess& p) {
  p.hooks_noted = true;
  p.hooks_ns = JsonOpt<int64_t>(j, "ts_ns");
  p.torch_version = JsonOpt<std::string>(j, "torch");
  p.hooks_error = JsonOpt<std::string>(j, "error");
  p.mechanisms.clear();
  if (auto it = j.find("mechanisms"); it != j.end() && it->is_object()) {
    for (const auto& [phase, how] : it->items()) {
      if (how.is_string()) p.mechanisms.emplace_back(phase, how.get<std::string>());
    }
  }
}

bool IsFlagWithArgument(char c) { return c == 'X' || c == 'W' || c == 'Q'; }

}  // namespace

PythonNotes ReadPythonNotes(const std::string& run_dir) {
  PythonNotes notes;
  std::map<int32_t, size_t> by_pid;
  auto counts = ForEachLine(run_dir + "/" + kPythonNotesFile, [&](const TextLine& line) {
    if (line.text.empty()) return;
    json j = json::parse(line.text, nullptr, false);
    const int32_t pid = j.is_object() ? JsonOpt<int32_t>(j, "pid").value_or(0) : 0;
    const std::string event = j.is_object() ? Str(j, "event") : std::string();
    if (pid <= 0 || (event != "start" && event != "hooks")) {
      ++notes.malformed_lines;
      return;
    }
    auto [it, fresh] = by_pid.try_emplace(pid, notes.processes.size());
    if (fresh) {
      notes.processes.emplace_back();
      notes.processes.back().pid = pid;
    }
    PythonProcess& p = notes.processes[it->second];
    if (event == "start") {
      ApplyStart(j, p);
    } else {
      ApplyHooks(j, p);
    }
  });
  if (counts.ok()) {
    notes.overlong_lines = counts->overlong;
  } else if (counts.error().code != ErrorCode::kNotFound) {
    notes.error = counts.error().message;
  }
  return notes;
}

bool LooksLikePython(std::string_view comm, std::string_view cmdline) {
  auto is_python = [](std::string_view name) {
    if (const size_t slash = name.rfind('/'); slash != std::string_view::npos) {
      name.remove_prefix(slash + 1);
    }
    if (!name.starts_with("python")) return false;
    name.remove_prefix(6);
    for (char c : name) {
      if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.')) return false;
    }
    return true;
  };
  std::string_view first = cmdline.substr(0, cmdline.find(' '));
  return is_python(comm) || (!first.empty() && is_python(first));
}

std::optional<char> PythonFlagIgnoringStartup(std::string_view cmdline) {
  size_t pos = cmdline.find(' ');
  if (pos == std::string_view::npos) return std::nullopt;
  bool skip_next = false;
  while (pos < cmdline.size()) {
    while (pos < cmdline.size() && cmdline[pos] == ' ') ++pos;
    const size_t end = std::min(cmdline.find(' ', pos), cmdline.size());
    std::string_view word = cmdline.substr(pos, end - pos);
    pos = end;
    if (word.empty()) break;
    if (skip_next) {
      skip_next = false;
      continue;
    }
    // Options end at the script, "-" (stdin), "--", or -c / -m (their argument is the program).
    if (word.size() < 2 || word[0] != '-' || word[1] == '-') break;
    for (size_t i = 1; i < word.size(); ++i) {
      const char c = word[i];
      if (c == 'c' || c == 'm') return std::nullopt;
      if (c == 'E' || c == 'I' || c == 'S') return c;
      if (IsFlagWithArgument(c)) {
        skip_next = i + 1 == word.size();  // "-X dev" vs "-Xdev"
        break;
      }
    }
  }
  return std::nullopt;
}

}  // namespace stallscope::rundir
