#include "rundir/run_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/file_read.h"
#include "base/json_fields.h"
#include "base/json_writer.h"
#include "base/name_table.h"
#include "base/units.h"

namespace stallscope::rundir {

namespace fs = std::filesystem;

namespace {

/// Reads run.json's fields with their types checked. A field that is absent keeps its default
/// (older run.json files lack the newer fields); null means "not known yet" only for the fields
/// the writer leaves null while the job runs (end_mono_ns, exit_code, monitor_cpu_s, job_cpu_s);
/// any other null or a value of the wrong type is an error naming the file and the field.
class MetaFields {
 public:
  MetaFields(const nlohmann::json& j, std::string file) : j_(j), file_(std::move(file)) {}

  template <typename T>
  void Read(const char* key, T& out) {
    const nlohmann::json* v = Find(key);
    if (v == nullptr) return;
    if (v->is_null()) return Fail(key, "is null", Expected<T>());
    std::optional<T> got = Convert<T>(key);
    if (!got) return Fail(key, "has the wrong type or range", Expected<T>());
    out = std::move(*got);
  }
  template <typename T>
  void ReadOptional(const char* key, std::optional<T>& out) {
    const nlohmann::json* v = Find(key);
    if (v == nullptr || v->is_null()) return;
    std::optional<T> got = Convert<T>(key);
    if (!got) return Fail(key, "has the wrong type or range", Expected<T>());
    out = std::move(got);
  }
  /// The first error met, if any.
  const std::optional<Error>& error() const { return error_; }

 private:
  const nlohmann::json* Find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || error_ ? nullptr : &*it;
  }
  template <typename T>
  std::optional<T> Convert(const char* key) const {
    const nlohmann::json& v = *j_.find(key);
    if constexpr (std::is_same_v<T, double>) {
      if (v.is_number()) return v.get<double>();
      return std::nullopt;
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      if (!v.is_array()) return std::nullopt;
      std::vector<std::string> out;
      for (const auto& a : v) {
        if (!a.is_string()) return std::nullopt;
        out.push_back(a.get<std::string>());
      }
      return out;
    } else {
      return JsonOpt<T>(j_, key);
    }
  }
  template <typename T>
  static const char* Expected() {
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    if constexpr (std::is_same_v<T, std::string>) return "a string";
    if constexpr (std::is_same_v<T, double>) return "a number";
    if constexpr (std::is_same_v<T, std::vector<std::string>>) return "an array of strings";
    return "an integer";
  }
  void Fail(const char* key, const char* what, const char* expected) {
    error_ = MakeError(ErrorCode::kParse, "{}: field \"{}\" {} (expected {})", file_, key, what,
                       expected);
  }

  const nlohmann::json& j_;
  std::string file_;
  std::optional<Error> error_;
};

}  // namespace

std::string DefaultRunName(const std::vector<std::string>& command) {
  // The first argument that looks like a script names the run; else the program itself.
  std::string pick;
  for (const auto& arg : command) {
    if (arg.size() > 3 && arg.substr(arg.size() - 3) == ".py") {
      pick = arg;
      break;
    }
  }
  if (pick.empty() && !command.empty()) pick = command[0];
  std::string stem = fs::path(pick).stem().string();
  std::string clean;
  for (char c : stem)
    clean.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_');
  return clean.empty() ? "run" : clean;
}

Result<RunPaths> CreateRunDir(const std::string& base, const std::string& name, int64_t wall_ns) {
  time_t secs = static_cast<time_t>(wall_ns / 1'000'000'000);
  tm local{};
  localtime_r(&secs, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) return MakeError(ErrorCode::kIo, "{}: cannot create: {}", base, ec.message());
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string dir = fmt::format("{}/{}-{}{}", base, stamp, name,
                                  attempt == 0 ? "" : fmt::format("-{}", attempt));
    if (fs::create_directory(dir, ec)) {
      RunPaths paths{dir};
      fs::create_directory(paths.phases_dir(), ec);
      if (ec)
        return MakeError(ErrorCode::kIo, "{}: cannot create: {}", paths.phases_dir(), ec.message());
      return paths;
    }
    if (ec) return MakeError(ErrorCode::kIo, "{}: cannot create: {}", dir, ec.message());
  }
  return MakeError(ErrorCode::kIo, "{}: too many runs named {} this second", base, name);
}

Status WriteFileAtomic(const std::string& path, const std::string& content) {
  std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr)
    return MakeError(ErrorCode::kIo, "{}: cannot write: {}", tmp, std::strerror(errno));
  bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  ok = (std::fflush(f) == 0) && ok;
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return MakeError(ErrorCode::kIo, "{}: cannot write: {}", path, std::strerror(errno));
  }
  return OkStatus();
}

std::map<std::string, std::string> PerformanceEnvironment(const char* const* environ,
                                                          const std::vector<std::string>& extra) {
  static constexpr std::string_view kPrefixes[] = {
      "OMP_",   "MKL_",       "OPENBLAS_",        "KMP_",       "GOMP_",          "CUDA_",
      "NCCL_",  "NVIDIA_",    "PYTORCH_",         "TORCH_",     "TORCHINDUCTOR_", "CUBLAS_",
      "CUDNN_", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "STALLSCOPE_"};
  // Different in every run by design: would show as a difference that is none.
  static constexpr std::string_view kSkip[] = {"STALLSCOPE_RUN_DIR", "STALLSCOPE_PYTHONPATH",
                                               "STALLSCOPE_SCRATCH_DIR"};
  std::map<std::string, std::string> out;
  auto add = [&](std::string_view entry) {
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) return;
    std::string_view name = entry.substr(0, eq);
    for (std::string_view skip : kSkip) {
      if (name == skip) return;
    }
    for (std::string_view p : kPrefixes) {
      if (name.starts_with(p)) {
        out[std::string(name)] = std::string(entry.substr(eq + 1));
        return;
      }
    }
  };
  for (const char* const* e = environ; e != nullptr && *e != nullptr; ++e) add(*e);
  for (const auto& e : extra) add(e);
  return out;
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    if (!out.empty()) out += ' ';
    // POSIX shell: inside single quotes every character is literal but the quote itself.
    bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) ||
             std::string_view("-_./=:,+@%").find(ch) != std::string_view::npos;
    });
    if (plain) {
      out += arg;
      continue;
    }
    out += '\'';
    for (char ch : arg) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    out += '\'';
  }
  return out;
}

Status WriteRunMeta(const RunPaths& paths, const RunMeta& m) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject()
      .Field("schema_version", m.schema_version)
      .Field("tool", m.tool_version)
      .Field("name", m.name);
  w.FieldArray("command", m.command);
  w.Field("hostname", m.hostname)
      .Field("pid", m.pid)
      .Field("start_wall_ns", m.start_wall_ns)
      .Field("start_mono_ns", m.start_mono_ns)
      .Field("end_mono_ns", m.end_mono_ns)
      .Field("exit_code", m.exit_code)
      .Field("status", RunStatusName(m.status))
      .FieldBool("auto_hooks", m.auto_hooks)
      .Field("interval_ns", m.interval_ns)
      .Field("monitor_cpu_s", m.monitor_cpu_s, 3)
      .Field("job_cpu_s", m.job_cpu_s, 3);
  w.Key("env").BeginObject();
  for (const auto& [name, value] : m.env) w.Field(name, value);
  w.EndObject().EndObject();
  out += "\n";
  return WriteFileAtomic(paths.run_json(), out);
}

std::string_view RunStatusName(RunStatus status) { return NameIn(kRunStatusNames, status); }

std::optional<RunStatus> ParseRunStatus(std::string_view name) {
  return ValueNamed(kRunStatusNames, name);
}

Result<RunMeta> ReadRunMeta(const RunPaths& paths) {
  // Issue 27 B14: a FIFO (or a device) is refused unopened: reading one waits forever. B21: an
  // unreadable run.json (permission denied, a symbolic link loop) is said so, not "missing".
  // run.json is a few KiB; the cap keeps a hostile one from costing memory.
  auto text = ReadSmallFile(paths.run_json(), kMaxRunJsonBytes);
  if (!text.ok()) {
    const Error& e = text.error();
    if (e.code == ErrorCode::kNotFound) {
      return MakeError(ErrorCode::kNotFound, "{}: not a stallscope run directory (no run.json)",
                       paths.dir);
    }
    if (e.code == ErrorCode::kUnsupported) return e;
    // "{path}: cannot open: permission denied" reads, for the user, as "cannot read".
    std::string message = e.message;
    if (const size_t at = message.find(": cannot open: "); at != std::string::npos)
      message.replace(at, 15, ": cannot read: ");
    return Error{ErrorCode::kIo, message};
  }
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return MakeError(ErrorCode::kParse, "{}: run.json is not valid JSON", paths.dir);
  }
  RunMeta m;
  m.schema_version = 0;  // absent: written before versions were
  MetaFields f(j, paths.run_json());
  f.Read("schema_version", m.schema_version);
  f.Read("tool", m.tool_version);
  f.Read("name", m.name);
  f.Read("command", m.command);
  f.Read("hostname", m.hostname);
  f.Read("pid", m.pid);
  f.Read("start_wall_ns", m.start_wall_ns);
  f.Read("start_mono_ns", m.start_mono_ns);
  f.ReadOptional("end_mono_ns", m.end_mono_ns);
  f.ReadOptional("exit_code", m.exit_code);
  std::string status = "running";
  f.Read("status", status);
  f.Read("auto_hooks", m.auto_hooks);
  f.Read("interval_ns", m.interval_ns);
  f.ReadOptional("monitor_cpu_s", m.monitor_cpu_s);
  f.ReadOptional("job_cpu_s", m.job_cpu_s);
  if (f.error()) return *f.error();
  // Issue 27 ("Also"): `{}` was read as a run that is still running, started in 1970. Every
  // run.json stallscope writes has these from the start; one without them is not a run's.
  for (const char* field : {"command", "status", "start_mono_ns"}) {
    if (!j.contains(field)) {
      return MakeError(ErrorCode::kParse, "{}: not a stallscope run.json (no \"{}\")",
                       paths.run_json(), field);
    }
  }
  if (auto parsed = ParseRunStatus(status)) {
    m.status = *parsed;
  } else {
    return MakeError(ErrorCode::kParse,
                     "{}: \"status\" is \"{}\", none of running, exited, killed, stopped",
                     paths.run_json(), status);
  }
  if (auto env = j.find("env"); env != j.end() && !env->is_null()) {
    if (!env->is_object()) {
      return MakeError(ErrorCode::kParse, "{}: \"env\" is not an object", paths.run_json());
    }
    for (const auto& [name, value] : env->items()) {
      if (value.is_string()) m.env[name] = value.get<std::string>();
    }
  }
  return m;
}

std::string LastErrorLine(const std::string& path) {
  // A job.log that is not a regular file (a FIFO) is never opened: it would block (issue 27 B14).
  auto file = ReadOnlyFile::Open(path);
  if (!file.ok()) return {};
  const uint64_t from = file->size_bytes() - std::min<uint64_t>(file->size_bytes(), 16384);
  std::string tail(static_cast<size_t>(file->size_bytes() - from), '\0');
  const ssize_t got = ::pread(file->fd(), tail.data(), tail.size(), static_cast<off_t>(from));
  tail.resize(got > 0 ? static_cast<size_t>(got) : 0);
  std::string last;
  std::string error;
  size_t begin = 0;
  while (begin < tail.size()) {
    size_t end = tail.find_first_of("\r\n", begin);
    if (end == std::string::npos) end = tail.size();
    std::string_view line(tail.data() + begin, end - begin);
    begin = end + 1;
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
      line.remove_suffix(1);
    if (line.empty()) continue;
    // "torch.OutOfMemoryError: ...", "RuntimeError: ...": a name at the line's start.
    const std::string_view name = line.substr(0, line.find(':'));
    const bool exception =
        name.size() < line.size() && !name.empty() &&
        std::all_of(name.begin(), name.end(),
                    [](char c) {
                      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
                    }) &&
        (name.ends_with("Error") || name.ends_with("Exception") || name.ends_with("Interrupt"));
    const size_t lead = line.find_first_not_of(" \t");
    (exception ? error : last) = std::string(line.substr(lead));
  }
  std::string out = error.empty() ? last : error;
  if (out.size() > 200) out = out.substr(0, 197) + "...";
  return out;
}

}  // namespace stallscope::rundir
