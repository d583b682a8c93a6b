#include "diagnose/run_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json_writer.h"

namespace stallscope::diagnose {

namespace fs = std::filesystem;

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
      .Field("status", m.status)
      .FieldBool("auto_hooks", m.auto_hooks)
      .Field("interval_ns", m.interval_ns)
      .Field("monitor_cpu_s", m.monitor_cpu_s, 3)
      .Field("job_cpu_s", m.job_cpu_s, 3)
      .EndObject();
  out += "\n";
  return WriteFileAtomic(paths.run_json(), out);
}

Result<RunMeta> ReadRunMeta(const RunPaths& paths) {
  std::ifstream in(paths.run_json());
  if (!in)
    return MakeError(ErrorCode::kNotFound, "{}: not a stallscope run directory (no run.json)",
                     paths.dir);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return MakeError(ErrorCode::kParse, "{}: run.json is not valid JSON", paths.dir);
  }
  RunMeta m;
  m.schema_version = j.value("schema_version", 0);
  m.tool_version = j.value("tool", "");
  m.name = j.value("name", "");
  if (j.contains("command") && j["command"].is_array()) {
    for (const auto& a : j["command"]) {
      if (a.is_string()) m.command.push_back(a.get<std::string>());
    }
  }
  m.hostname = j.value("hostname", "");
  m.pid = j.value("pid", 0);
  m.start_wall_ns = j.value<int64_t>("start_wall_ns", 0);
  m.start_mono_ns = j.value<int64_t>("start_mono_ns", 0);
  if (j.contains("end_mono_ns") && j["end_mono_ns"].is_number())
    m.end_mono_ns = j["end_mono_ns"].get<int64_t>();
  if (j.contains("exit_code") && j["exit_code"].is_number())
    m.exit_code = j["exit_code"].get<int>();
  m.status = j.value("status", "running");
  m.auto_hooks = j.value("auto_hooks", true);
  m.interval_ns = j.value<int64_t>("interval_ns", 0);
  if (j.contains("monitor_cpu_s") && j["monitor_cpu_s"].is_number())
    m.monitor_cpu_s = j["monitor_cpu_s"].get<double>();
  if (j.contains("job_cpu_s") && j["job_cpu_s"].is_number())
    m.job_cpu_s = j["job_cpu_s"].get<double>();
  return m;
}

}  // namespace stallscope::diagnose
