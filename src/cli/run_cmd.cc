// `stallscope run -- CMD`: start the job, sample GPUs + host + its process tree, drain the phase
// rings its processes write, print live status, and write the run directory and its report.

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "analysis/phases.h"
#include "base/units.h"
#include "cli/child_process.h"
#include "cli/commands.h"
#include "diagnose/run_dir.h"
#include "diagnose/run_report.h"
#include "diagnose/thresholds.h"
#include "diagnose/verdict.h"
#include "phase/event_log.h"
#include "phase/phase_aggregator.h"
#include "report/render.h"
#include "report/run_render.h"
#include "sample/recording.h"
#include "sample/sampler.h"

namespace stallscope::cli {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kPollNs = 100'000'000;            // ring drain period
constexpr int64_t kStatusEveryNs = 10'000'000'000;  // issue 3: a status line every 10 s

/// The directory holding the Python package (stallscope/ + sitecustomize.py) to put on PYTHONPATH.
std::string FindPythonDir() {
  if (const char* env = std::getenv("STALLSCOPE_PYTHONPATH")) return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  for (const fs::path& candidate :
       {exe.parent_path() / "python",
        exe.parent_path().parent_path() / "lib" / "stallscope" / "python"}) {
    if (fs::exists(candidate / "stallscope" / "__init__.py", ec)) return candidate.string();
  }
  return {};
}

/// The current suspicion from phase shares of a window (the full verdict comes with the report).
/// Seed 000: data_loading > 30% of the step is data-bound.
std::string Suspicion(double data, double compute, double covered) {
  if (data > 0.30) return "suspect: input pipeline";
  if (1.0 - covered > 0.30)
    return "suspect: work outside the training phases (logging, syncs, side work)";
  if (compute > 0.70) return "compute-bound so far";
  return "";
}

/// Live view of the phase records: per process, a window aggregator (status line and interim
/// report).
class LiveView {
 public:
  void Add(phase::PhaseReader& ring, const phase::PhaseRecord& r) {
    auto [it, fresh] = procs_.try_emplace(ring.info().pid);
    it->second.ring = &ring;
    it->second.agg.Add(r);
  }

  /// Takes the window since the last call: "12.3 steps/s | data_loading 41% forward_pass 20%".
  /// Also accumulates into the interim totals. Returns "" when no steps were seen.
  std::string TakeStatus(double window_s) {
    Proc* main = nullptr;
    phase::PhaseWindow main_window;
    for (auto& [pid, p] : procs_) {
      phase::PhaseWindow w = p.agg.Take();
      for (const auto& t : w.phases) p.interim_ns[t.phase_id] += t.total_ns;
      p.interim_steps += w.steps;
      if (main == nullptr || w.steps > main_window.steps) {
        main = &p;
        main_window = std::move(w);
      }
    }
    if (main == nullptr || main_window.steps == 0 || window_s <= 0) return "";
    std::string out =
        fmt::format("{:.2f} steps/s", static_cast<double>(main_window.steps) / window_s);
    int shown = 0;
    double data = 0, compute = 0, covered = 0;
    for (const auto& t : main_window.phases) {
      const std::string& name = main->ring->Name(t.phase_id);
      double share = static_cast<double>(t.total_ns) / (window_s * 1e9);
      covered += share;
      if (name == "data_loading") data = share;
      if (analysis::IsComputePhase(name)) compute += share;
      if (shown++ < 3) out += fmt::format(" | {} {:.0f}%", name, share * 100);
    }
    std::string suspicion = Suspicion(data, compute, covered);
    if (!suspicion.empty()) out += " | " + suspicion;
    main_steps_ += main_window.steps;
    return out;
  }

  /// Seed 000-style interim report every `every` steps of the busiest process ("" otherwise).
  std::string TakeInterim(int64_t every, double since_s) {
    if (every <= 0) return "";
    Proc* main = nullptr;
    for (auto& [pid, p] : procs_) {
      if (main == nullptr || p.interim_steps > main->interim_steps) main = &p;
    }
    if (main == nullptr || main->interim_steps < static_cast<uint64_t>(every) || since_s <= 0)
      return "";
    double data = 0, compute = 0, covered = 0;
    std::string rows;
    for (const auto& [id, ns] : main->interim_ns) {
      const std::string& name = main->ring->Name(id);
      double share = static_cast<double>(ns) / (since_s * 1e9);
      covered += share;
      if (name == "data_loading") data = share;
      if (analysis::IsComputePhase(name)) compute += share;
      rows += fmt::format("[stallscope]   {:<20} {:5.1f}%  {:>9.2f} ms/step\n", name, share * 100,
                          static_cast<double>(ns) / 1e6 / static_cast<double>(main->interim_steps));
    }
    std::string suspicion = Suspicion(data, compute, covered);
    std::string out =
        fmt::format("[stallscope] profile, last {} steps ({:.2f} steps/s){}:\n",
                    main->interim_steps, static_cast<double>(main->interim_steps) / since_s,
                    suspicion.empty() ? "" : ", " + suspicion);
    out += rows;
    for (auto& [pid, p] : procs_) {
      p.interim_ns.clear();
      p.interim_steps = 0;
    }
    return out;
  }

 private:
  struct Proc {
    phase::PhaseReader* ring = nullptr;
    phase::PhaseAggregator agg;
    std::map<uint16_t, int64_t> interim_ns;
    uint64_t interim_steps = 0;
  };
  std::map<int32_t, Proc> procs_;
  uint64_t main_steps_ = 0;
};

std::vector<std::string> JobEnvironment(const diagnose::RunPaths& paths, const RunOptions& o) {
  std::vector<std::string> env = {"STALLSCOPE_RUN_DIR=" + fs::absolute(paths.dir).string(),
                                  std::string("STALLSCOPE_AUTO=") + (o.no_auto ? "0" : "1")};
  std::string py = FindPythonDir();
  if (!py.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    env.push_back("PYTHONPATH=" + py +
                  (old != nullptr && *old != '\0' ? std::string(":") + old : ""));
  }
  return env;
}

/// User + system CPU seconds of this process (RUSAGE_SELF: every thread of the monitor) or of
/// its waited-for children and their waited-for descendants (RUSAGE_CHILDREN: the job).
double CpuSeconds(int who) {
  rusage usage{};
  if (getrusage(who, &usage) != 0) return 0;
  auto secs = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

/// Writes report.txt and report.json from the run directory; prints the text unless quiet.
int Report(const diagnose::RunPaths& paths, bool quiet) {
  auto data = diagnose::LoadRun(paths.dir);
  if (!data.ok()) {
    fmt::print(stderr, "stallscope run: {}\n", data.error().message);
    return 1;
  }
  auto report = diagnose::BuildRunReport(*data);
  report.verdict = diagnose::Diagnose(*data, report);
  std::string text = report::RenderRunReportText(report);
  auto st1 = diagnose::WriteFileAtomic(paths.report_txt(), text);
  auto st2 = diagnose::WriteFileAtomic(paths.report_json(), report::RenderRunReportJson(report));
  if (!st1.ok()) fmt::print(stderr, "stallscope run: {}\n", st1.error().message);
  if (!st2.ok()) fmt::print(stderr, "stallscope run: {}\n", st2.error().message);
  if (!quiet) fmt::print(stderr, "\n{}", text);
  return 0;
}

}  // namespace

int RunRun(const RunOptions& o) {
  auto interval = ParseDurationNs(o.interval);
  if (!interval.ok())
    return fmt::print(stderr, "stallscope run: {}\n", interval.error().message), 2;
  if (*interval < sample::kMinIntervalNs)
    return fmt::print(stderr, "stallscope run: interval {} is below the 50ms minimum\n",
                      o.interval),
           2;
  if (o.command.empty())
    return fmt::print(stderr,
                      "stallscope run: no command given; usage: stallscope run -- CMD ARGS...\n"),
           2;
  BlockTerminationSignals();
  SystemClock clock;
  std::string name = o.name.empty() ? diagnose::DefaultRunName(o.command) : o.name;
  Result<diagnose::RunPaths> paths = MakeError(ErrorCode::kInternal, "unset");
  if (o.out.empty()) {
    paths = diagnose::CreateRunDir("stallscope-runs", name, clock.WallNs());
  } else {
    std::error_code ec;
    fs::create_directories(fs::path(o.out) / "phases", ec);
    paths = ec ? Result<diagnose::RunPaths>(
                     MakeError(ErrorCode::kIo, "{}: cannot create: {}", o.out, ec.message()))
               : Result<diagnose::RunPaths>(diagnose::RunPaths{o.out});
  }
  if (!paths.ok()) return fmt::print(stderr, "stallscope run: {}\n", paths.error().message), 1;

  Machine machine = OpenMachine(o.sampling, clock, *interval);
  diagnose::RunMeta meta;
  meta.tool_version = ToolVersion();
  meta.name = name;
  meta.command = o.command;
  meta.hostname = machine.header.hostname;
  meta.auto_hooks = !o.no_auto;
  meta.interval_ns = *interval;
  meta.start_wall_ns = clock.WallNs();
  meta.start_mono_ns = clock.MonotonicNs();
  auto events = phase::EventLogWriter::Open(paths->dir);
  if (!events.ok()) return fmt::print(stderr, "stallscope run: {}\n", events.error().message), 1;

  auto child = ChildProcess::Start(o.command, JobEnvironment(*paths, o));
  if (!child.ok()) {
    fmt::print(stderr, "stallscope run: {}\n", child.error().message);
    return 127;
  }
  meta.pid = child->pid();
  machine.header.command = o.command;
  machine.header.root_pid = child->pid();
  (void)diagnose::WriteRunMeta(*paths, meta);
  if (!o.quiet) fmt::print(stderr, "[stallscope] run directory {}\n", paths->dir);

  auto writer = sample::RecordingWriter::Open(paths->recording(), machine.header,
                                              sample::RecordingFormat::kJsonl);
  if (!writer.ok())
    fmt::print(stderr, "stallscope run: {} (continuing without a recording)\n",
               writer.error().message);
  host::HostSampler host_sampler(machine.fs);
  host::ProcessTracker tracker(machine.fs, child->pid());
  sample::Sampler sampler(*machine.gpus, host_sampler, &tracker, clock);
  StopFlag stop;
  std::mutex latest_mu;
  sample::Sample latest;
  std::thread sampling([&] {
    sampler.Run(*interval, stop, [&](const sample::Sample& s) {
      if (writer.ok()) (void)writer->Append(s);
      std::lock_guard<std::mutex> lock(latest_mu);
      latest = s;
      return true;
    });
  });

  phase::RingDirWatcher watcher(paths->phases_dir());
  LiveView live;
  auto drain = [&](phase::DrainMode mode) {
    auto result = watcher.Poll(
        [&](phase::PhaseReader& ring, const phase::PhaseRecord& r) {
          events->Add(ring, r);
          live.Add(ring, r);
        },
        mode);
    for (const auto& e : result.new_errors)
      fmt::print(stderr, "[stallscope] warning: {}\n", e.message);
    auto st = events->Flush();
    if (!st.ok()) fmt::print(stderr, "[stallscope] warning: {}\n", st.error().message);
  };

  int interrupts = 0;
  int64_t last_status = clock.MonotonicNs(), last_interim = last_status;
  std::optional<int> exit_code;
  while (!exit_code) {
    int sig = WaitSignal(kPollNs);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      // Forward to the job's process group; the third Ctrl-C kills it.
      child->Signal(++interrupts >= 3 ? SIGKILL : sig);
    }
    drain(phase::DrainMode::kLive);
    exit_code = child->Poll();
    int64_t now = clock.MonotonicNs();
    if (!o.quiet && now - last_status >= kStatusEveryNs) {
      std::string phases = live.TakeStatus(static_cast<double>(now - last_status) / 1e9);
      std::string machine_line;
      {
        std::lock_guard<std::mutex> lock(latest_mu);
        machine_line = report::RenderStatusLine(latest);
      }
      fmt::print(stderr, "[stallscope] {}{}\n", machine_line, phases.empty() ? "" : " | " + phases);
      last_status = now;
      std::string interim =
          live.TakeInterim(o.report_every, static_cast<double>(now - last_interim) / 1e9);
      if (!interim.empty()) {
        fmt::print(stderr, "{}", interim);
        last_interim = now;
      }
    }
  }
  // The job is gone: read what its processes left, then stop sampling.
  drain(phase::DrainMode::kFinal);
  stop.Request();
  sampling.join();
  meta.end_mono_ns = clock.MonotonicNs();
  // Overhead in CPU time, before the report costs any (README "Overhead"): the job has been
  // reaped, so its children's times are in.
  meta.monitor_cpu_s = CpuSeconds(RUSAGE_SELF);
  meta.job_cpu_s = CpuSeconds(RUSAGE_CHILDREN);
  meta.exit_code = *exit_code;
  meta.status = *exit_code > 128 ? "killed" : "exited";
  if (writer.ok()) (void)writer->Finish(*meta.end_mono_ns, exit_code);
  (void)diagnose::WriteRunMeta(*paths, meta);
  Report(*paths, o.quiet);
  return *exit_code;
}

int RunDiagnose(const DiagnoseOptions& o) {
  if (o.thresholds) {
    fmt::print("| name | value | unit | source |\n|---|---|---|---|\n");
    for (const auto& t : diagnose::ThresholdTable())
      fmt::print("| `{}` | {} | {} | {} |\n", t.name, t.value, t.unit, t.source);
    return 0;
  }
  if (o.dir.empty()) {
    fmt::print(stderr, "stallscope diagnose: give a run directory (stallscope diagnose RUN_DIR)\n");
    return 2;
  }
  auto data = diagnose::LoadRun(o.dir);
  if (!data.ok()) {
    fmt::print(stderr, "stallscope diagnose: {}\n", data.error().message);
    return 1;
  }
  auto report = diagnose::BuildRunReport(*data);
  report.verdict = diagnose::Diagnose(*data, report);
  fmt::print("{}",
             o.json ? report::RenderRunReportJson(report) : report::RenderRunReportText(report));
  return 0;
}

}  // namespace stallscope::cli
