// `stallscope doctor`: gathers the facts (NVML, /proc and /sys, the job's Python, the data
// directory), runs the checks and prints them. The judging lives in src/doctor, the output in
// src/report/doctor_render.cc.

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/units.h"
#include "cli/commands.h"
#include "doctor/check.h"
#include "doctor/code_check.h"
#include "doctor/data_probe.h"
#include "doctor/gather.h"
#include "doctor/python_probe.h"
#include "report/doctor_render.h"

extern char** environ;

namespace stallscope::cli {
namespace {

// Importing torch takes seconds (CUDA libraries load); a hung import must not hang doctor.
constexpr int64_t kPythonTimeoutNs = 20'000'000'000;
// Parsing is fast (a large repository in seconds); the bound only catches a hung interpreter.
constexpr int64_t kCodeCheckTimeoutNs = 120'000'000'000;

/// A line on stderr while something slow runs, for people at a terminal only.
void DoctorProgress(bool show, std::string_view what) {
  if (show) fmt::print(stderr, "stallscope doctor: {}\n", EscapeControl(what));
}

/// `path` made absolute and normal ("." → "/work/run"), for the report.
std::string AbsolutePath(const std::string& path) {
  std::error_code ec;
  std::string out = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec) return path;
  if (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

/// `doctor --code PATH`: only the static check of the training code (src/doctor/code_check.h).
int RunDoctorCode(const DoctorOptions& o) {
  // A device, FIFO or socket is refused before the interpreter starts (the analyzer checks
  // each file it reads again).
  if (auto problem = doctor::CodePathProblem(o.code)) {
    fmt::print(stderr, "stallscope doctor: --code {}: {}\n", EscapeControl(o.code),
               EscapeControl(*problem));
    return doctor::kCodeExitNotRun;
  }
  DoctorProgress(!o.json && isatty(STDERR_FILENO) != 0,
                 fmt::format("{} parses {} (never runs it)", o.python, o.code));
  const doctor::CodeReport r = doctor::CheckCode(o.python, o.code, kCodeCheckTimeoutNs);
  if (!r.ran && !o.json) {
    fmt::print(stderr, "{}", report::RenderCodeText(r));
  } else {
    fmt::print("{}", o.json ? report::RenderCodeJson(r, ToolVersion()) : report::RenderCodeText(r));
  }
  return doctor::CodeExitCode(r);
}

}  // namespace

int RunDoctor(const DoctorOptions& o) {
  if (!o.code.empty()) return RunDoctorCode(o);
  auto data_time = ParseDurationNs(o.data_time);
  if (!data_time.ok()) {
    fmt::print(stderr, "stallscope doctor: --data-time: {}\n",
               EscapeControl(data_time.error().message));
    return 2;
  }
  host::ProcFs fs;
  fs.proc_root = o.sampling.proc_root;
  fs.sys_root = o.sys_root;
  fs.cgroup_root = o.cgroup_root;
  fs.shm_path = o.shm_path;
  gpu::NvmlOptions nvml;
  nvml.library_path = o.sampling.nvml_lib;
  if (nvml.library_path.empty()) {
    if (const char* env = std::getenv("STALLSCOPE_NVML_LIB")) nvml.library_path = env;
  }
  nvml.query_pcie_throughput = false;  // 20 ms per direction per GPU, and not a check
  const bool show = !o.json && isatty(STDERR_FILENO) != 0;

  doctor::Report r;
  r.tool_version = ToolVersion();
  char hostname[256] = {};
  if (gethostname(hostname, sizeof hostname - 1) == 0) r.hostname = hostname;
  r.wall_ns = SystemClock().WallNs();
  doctor::Facts& f = r.facts;
  f.gpu = doctor::GatherGpus(nvml, fs);
  f.host = doctor::GatherHost(fs, AbsolutePath(o.checkpoint_dir));
  f.env = doctor::EnvironmentMap(environ);
  f.workers = o.workers;
  if (!o.no_python) {
    DoctorProgress(show, fmt::format("asking {} about torch and CUDA", o.python));
    f.python = doctor::ProbePython(o.python, kPythonTimeoutNs);
  }
  if (!o.data.empty()) {
    doctor::DataProbeOptions data;
    data.time_budget_ns = *data_time;
    data.threads = static_cast<uint32_t>(std::clamp<int64_t>(o.workers.value_or(4), 1, 16));
    DoctorProgress(show,
                   fmt::format("reading {} for up to {}", o.data, FormatDurationNs(*data_time)));
    f.data = doctor::ProbeData(o.data, data);
  }
  r.checks = doctor::RunChecks(f);
  fmt::print("{}", o.json ? report::RenderDoctorJson(r) : report::RenderDoctorText(r));
  return doctor::ExitCode(r.checks);
}

}  // namespace stallscope::cli
