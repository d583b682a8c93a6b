// RunJob: `stallscope run`'s job under the monitor, without the report (cli/run_job.h).

#include "cli/run_job.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <variant>

#include <fmt/format.h>

#include "analysis/live_stats.h"
#include "base/units.h"
#include "cli/machine.h"
#include "cli/top_tui.h"
#include "diagnose/suspicion.h"
#include "diagnose/thresholds.h"
#include "monitor/session.h"
#include "report/render.h"
#include "report/top_screen.h"
#include "rundir/run_follower.h"
#include "stacks/stack_sampler.h"

namespace stallscope::cli {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kPollNs = 100'000'000;            // ring drain period
constexpr int64_t kStatusEveryNs = 10'000'000'000;  // issue 3: a status line every 10 s
constexpr int64_t kKillGraceNs = 10'000'000'000;    // --duration: SIGTERM, then SIGKILL

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

/// The status line's phase part: "12.34 steps/s | data_loading 41% | forward_pass 20% | ...",
/// the three largest phases and the current suspicion (the full verdict comes with the report).
std::string StatusPhases(const analysis::LiveWindow& w) {
  std::string out = fmt::format("{:.2f} steps/s", w.steps_per_s);
  for (size_t i = 0; i < w.phases.size() && i < 3; ++i) {
    out += fmt::format(" | {} {:.0f}%", EscapeControl(w.phases[i].name), w.phases[i].share * 100);
  }
  std::string_view suspicion = diagnose::SuspicionText(diagnose::Suspect(w));
  if (!suspicion.empty()) out += fmt::format(" | {}", suspicion);
  return out;
}

/// Seed 000-style interim report of the busiest process over its last steps.
std::string InterimReport(const analysis::LiveWindow& w) {
  std::string_view suspicion = diagnose::SuspicionText(diagnose::Suspect(w));
  std::string out =
      fmt::format("[stallscope] profile, last {} steps ({:.2f} steps/s){}:\n", w.steps,
                  w.steps_per_s, suspicion.empty() ? "" : fmt::format(", {}", suspicion));
  for (const auto& p : w.phases) {
    out += fmt::format("[stallscope]   {:<20} {:5.1f}%  {:>9.2f} ms/step\n", EscapeControl(p.name),
                       p.share * 100,
                       static_cast<double>(p.total_ns) / 1e6 / static_cast<double>(w.steps));
  }
  return out;
}

std::vector<std::string> JobEnvironment(const rundir::RunPaths& paths, const RunOptions& o) {
  std::vector<std::string> env = {"STALLSCOPE_RUN_DIR=" + fs::absolute(paths.dir).string(),
                                  std::string("STALLSCOPE_AUTO=") + (o.no_auto ? "0" : "1")};
  std::string py = FindPythonDir();
  if (!py.empty()) {
    const char* old = std::getenv("PYTHONPATH");
    env.push_back("PYTHONPATH=" + py +
                  (old != nullptr && *old != '\0' ? std::string(":") + old : ""));
  }
  if (o.stop_after_steps > 0)
    env.push_back(fmt::format("STALLSCOPE_STOP_AFTER_STEPS={}", o.stop_after_steps));
  env.insert(env.end(), o.env.begin(), o.env.end());
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

/// Makes `dir` ready for a new run: created when missing; when a previous run's files are there,
/// refused unless --force, which then removes them (and only them: anything else in `dir` is a
/// reason to refuse, as are leftovers of an interrupted atomic write, "*.tmp.<pid>").
Status PrepareOutDir(const std::string& dir, bool force) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    return MakeError(ErrorCode::kInvalidArgument, "--out {}: exists and is not a directory", dir);
  }
  std::vector<fs::path> ours;
  std::string others;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool known =
        std::find(std::begin(rundir::kRunDirEntries), std::end(rundir::kRunDirEntries), name) !=
            std::end(rundir::kRunDirEntries) ||
        name.find(".tmp.") != std::string::npos;
    if (known) {
      ours.push_back(entry.path());
    } else {
      others += (others.empty() ? "" : ", ") + name;
    }
  }
  if (!others.empty()) {
    return MakeError(
        ErrorCode::kInvalidArgument,
        "--out {}: not empty and not a run directory ({}); give an empty or new folder", dir,
        others);
  }
  if (!ours.empty() && !force) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--out {}: holds a previous run; give --force to replace it, or another --out",
                     dir);
  }
  for (const fs::path& p : ours) {
    fs::remove_all(p, ec);
    if (ec) return MakeError(ErrorCode::kIo, "{}: cannot remove: {}", p.string(), ec.message());
  }
  fs::create_directories(fs::path(dir) / "phases", ec);
  if (ec) return MakeError(ErrorCode::kIo, "{}: cannot create: {}", dir, ec.message());
  return OkStatus();
}

/// The run directory: --out, else a fresh stallscope-runs/<date>-<time>-<name>.
Result<rundir::RunPaths> MakeRunPaths(const RunOptions& o, const std::string& name,
                                      int64_t wall_ns) {
  if (o.out.empty()) return rundir::CreateRunDir("stallscope-runs", name, wall_ns);
  TRY_STATUS(PrepareOutDir(o.out, o.force));
  return rundir::RunPaths{o.out};
}

/// Why `name` cannot name a run (it becomes part of a folder name), if it cannot.
std::optional<std::string> BadRunName(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return "a run name cannot be empty, . or ..";
  for (char c : name) {
    if (c == '/') return "a run name cannot contain '/' (it names a folder)";
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return "a run name cannot contain control characters";
  }
  return std::nullopt;
}

/// run.json as the job starts.
rundir::RunMeta StartMeta(const RunOptions& o, const std::string& name,
                          const sample::RecordingHeader& header, const Clock& clock,
                          const std::vector<std::string>& job_env) {
  rundir::RunMeta meta;
  meta.tool_version = ToolVersion();
  meta.name = name;
  meta.command = o.command;
  meta.hostname = header.hostname;
  meta.auto_hooks = !o.no_auto;
  meta.interval_ns = header.interval_ns;
  meta.start_wall_ns = clock.WallNs();
  meta.start_mono_ns = clock.MonotonicNs();
  meta.env = rundir::PerformanceEnvironment(environ, job_env);
  return meta;
}

/// Whether the run directory is still there: a job may remove it (RunRun says so once, at the
/// end, instead of a warning per file it could not write).
bool RunDirExists(const rundir::RunPaths& paths) {
  std::error_code ec;
  return fs::is_directory(paths.dir, ec);
}

/// Writes run.json. A failure is a warning, not an end: the job runs on (the report then says
/// what it could not read).
void WriteMeta(const rundir::RunPaths& paths, const rundir::RunMeta& meta) {
  if (auto st = rundir::WriteRunMeta(paths, meta); !st.ok() && RunDirExists(paths)) {
    fmt::print(stderr, "[stallscope] warning: {}\n", EscapeControl(st.error().message));
  }
}

/// The job under supervision: what the monitor does every poll, with or without the screen.
struct Supervisor {
  Supervisor(monitor::Session& s, const RunOptions& options, const Clock& c,
             std::optional<int64_t> stop_after, bool& stopped_flag)
      : session(s), o(options), clock(c), stop_after_ns(stop_after), stopped(stopped_flag) {}

  monitor::Session& session;
  const RunOptions& o;
  const Clock& clock;
  std::optional<int64_t> stop_after_ns;
  bool& stopped;
  bool hold_warnings = false;  ///< --tui: warnings wait for the screen to close
  std::vector<std::string> held;
  int interrupts = 0;
  int64_t start = clock.MonotonicNs();
  std::optional<int> exit_code;

  void Warn(const std::string& w) {
    if (hold_warnings) return held.push_back(w);
    fmt::print(stderr, "[stallscope] warning: {}\n", EscapeControl(w));
  }

  /// Forwards `sig` to the job's process group (the third Ctrl-C kills it), drains the phase
  /// rings, polls the job and applies --duration. True once the job has exited.
  bool Tick(int sig) {
    monitor::ChildProcess& child = *session.child();
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
      child.Signal(++interrupts >= 3 ? SIGKILL : sig);
    for (const auto& w : session.DrainPhases(phase::DrainMode::kLive)) Warn(w);
    exit_code = child.Poll();
    const int64_t now = clock.MonotonicNs();
    if (!exit_code && stop_after_ns &&
        now - start >= *stop_after_ns + (stopped ? kKillGraceNs : 0)) {
      // --duration: SIGTERM first (Python dies at once, its rings stay readable), SIGKILL when
      // it is still there after the grace period.
      if (!o.quiet && !stopped && !hold_warnings)
        fmt::print(stderr, "[stallscope] --duration {} reached: stopping the job\n", o.stop_after);
      child.Signal(stopped ? SIGKILL : SIGTERM);
      if (stopped) stop_after_ns.reset();
      stopped = true;
    }
    return exit_code.has_value();
  }

  /// The job is gone: reads what its processes left. Returns its exit code.
  int Finish() {
    for (const auto& w : session.DrainPhases(phase::DrainMode::kFinal)) Warn(w);
    return *exit_code;
  }
};

/// Supervises the job until it exits, with a status line every 10 s and the interim report
/// (unless --quiet). Returns its exit code.
int SuperviseJob(Supervisor& sup) {
  int64_t last_status = sup.clock.MonotonicNs(), last_interim = last_status;
  sample::Sample latest;
  while (!sup.Tick(monitor::WaitSignal(kPollNs))) {
    const int64_t now = sup.clock.MonotonicNs();
    if (sup.o.quiet || now - last_status < kStatusEveryNs) continue;
    auto window = sup.session.TakeLiveWindow(now - last_status);
    sup.session.CopyLatest(latest);
    fmt::print(stderr, "[stallscope] {}{}\n", report::RenderStatusLine(latest),
               window ? " | " + StatusPhases(*window) : "");
    last_status = now;
    if (auto interim = sup.session.TakeLiveInterim(sup.o.report_every, now - last_interim)) {
      fmt::print(stderr, "{}", InterimReport(*interim));
      last_interim = now;
    }
  }
  return sup.Finish();
}

/// --tui: the full-screen top while the job runs, its run row read from the run directory as
/// `top --run` reads it (rundir::RunFollower). Closing the screen (q) leaves the job running
/// under SuperviseJob; a signal goes to the job, and the screen closes when it exits.
int SuperviseJobTui(Supervisor& sup, const std::string& dir, int64_t interval_ns) {
  report::TopModel model(sup.session.header());
  model.interval_ns = interval_ns;
  auto follower = rundir::RunFollower::Open(dir);
  sample::Sample latest;
  TopTuiHooks hooks;
  hooks.refresh = [&](report::TopModel& m) {
    if (sup.session.CopyLatest(latest)) m.Add(latest);
    if (!follower.ok()) return;
    const rundir::RunFollowStatus& s = follower->Poll(sup.clock.MonotonicNs());
    m.run = report::TopRunStatus{dir, s.window,
                                 std::string(diagnose::WindowSuspicionText(s.window)), s.note};
  };
  hooks.stop_requested = [&] { return sup.Tick(monitor::WaitSignal(1)); };
  sup.hold_warnings = true;
  const int tui = RunTopTui(model, interval_ns, hooks);
  sup.hold_warnings = false;
  for (const auto& w : sup.held) sup.Warn(w);
  if (tui != 0 || !sup.exit_code)
    fmt::print(stderr, "[stallscope] the screen is closed; the job goes on (output: {}/job.log)\n",
               EscapeControl(dir));
  return sup.exit_code ? sup.Finish() : SuperviseJob(sup);
}

/// --duration and --steps: the duration in ns (stop_after_ns), or the exit code of a usage error
/// after saying it.
std::optional<int> CheckBounds(const RunOptions& o, std::optional<int64_t>& stop_after_ns) {
  if (!o.stop_after.empty()) {
    auto d = ParseDurationNs(o.stop_after);
    if (!d.ok() || *d <= 0) {
      fmt::print(stderr, "stallscope run: --duration {}: {}\n", EscapeControl(o.stop_after),
                 d.ok() ? "must be more than 0" : EscapeControl(d.error().message));
      return 2;
    }
    stop_after_ns = *d;
  }
  if (o.stop_after_steps > 0 && o.no_auto) {
    fmt::print(stderr,
               "stallscope run: --steps needs the PyTorch hooks, which --no-auto turns off; use "
               "--duration\n");
    return 2;
  }
  if (o.tui && (isatty(STDIN_FILENO) == 0 || isatty(STDOUT_FILENO) == 0)) {
    fmt::print(stderr, "stallscope run: --tui needs a terminal (stdin and stdout)\n");
    return 2;
  }
  if (o.stop_after_steps < 0) {
    fmt::print(stderr, "stallscope run: --steps {}: must be 1 or more\n", o.stop_after_steps);
    return 2;
  }
  return std::nullopt;
}

/// --serve: starts the exporter beside the job's session. When it cannot listen (the port is
/// taken), says so, stops the job (it has just started) and returns false.
bool ServeJob(monitor::Session& session, const std::string& listen, int64_t interval_ns,
              std::shared_ptr<void>& serving) {
  auto started = StartServe(session, listen, interval_ns);
  if (started.ok()) {
    serving = std::move(*started);
    return true;
  }
  fmt::print(stderr, "stallscope run: {}\n", EscapeControl(started.error().message));
  session.child()->Signal(SIGTERM);
  (void)session.child()->Wait();
  return false;
}

/// Issue 27 B19: a start that failed after the run directory was made (--serve could not listen,
/// the command could not start) left events.bin and phases/ there, and the next `run --out`
/// with the same folder was refused ("holds a previous run"). Removes what the start made: the
/// names of kRunDirEntries (PrepareOutDir left none of them, so they are this start's), and the
/// folder itself when this start created it and it is empty then. Nothing else is touched.
/// Declared before the session, so it runs after the session is gone (it writes those files).
struct UndoFailedStart {
  std::string dir;
  bool created_dir = false;
  bool armed = false;
  ~UndoFailedStart() {
    if (!armed) return;
    std::error_code ec;
    for (const char* name : rundir::kRunDirEntries) fs::remove_all(fs::path(dir) / name, ec);
    if (created_dir) fs::remove(dir, ec);  // fails, harmlessly, when something else is there
  }
};

/// Why the run must not start, said on stderr, as its exit code (2: usage; 1: --serve's port
/// cannot be listened on); nullopt when it may. Sets `stop_after_ns` from --duration.
std::optional<int> RefuseRun(const RunOptions& o, const std::string& name,
                             std::optional<int64_t>& stop_after_ns) {
  if (auto bad = CheckBounds(o, stop_after_ns)) return *bad;
  if (o.command.empty())
    return fmt::print(stderr,
                      "stallscope run: no command given; usage: stallscope run -- CMD ARGS...\n"),
           2;
  if (auto bad = BadRunName(name)) {
    return fmt::print(stderr, "stallscope run: --name {}: {}\n", EscapeControl(name), *bad), 2;
  }
  // Issue 27 B19: a port that cannot be listened on is found before any file is made or the
  // job started (StartServe below may still fail: UndoFailedStart then cleans up).
  if (!o.serve.empty()) {
    if (auto cannot = CannotListen(o.serve))
      return fmt::print(stderr, "stallscope run: {}\n", EscapeControl(*cannot)), 1;
  }
  return std::nullopt;
}

/// --stacks: the Python stacks of the processes whose phase rings the session reads (every
/// process the hooks run in), into stacks.jsonl. Null (said once) when the file cannot be made:
/// the job goes on without stacks.
std::unique_ptr<stacks::StackSampler> StartStacks(const RunOptions& o,
                                                  const rundir::RunPaths& paths,
                                                  monitor::Session& session) {
  stacks::StackSamplerOptions options;
  options.main_hz = o.stacks_hz;
  options.worker_hz = std::max(1, o.stacks_hz / 5);
  options.all_threads_hz = o.stacks_threads == "all" ? options.worker_hz : 0;
  // Our own package and shim on the job's PYTHONPATH: their frames are never the job's line.
  if (const std::string py = FindPythonDir(); !py.empty()) {
    options.own_files = {py + "/stallscope/", py + "/sitecustomize.py"};
  }
  // The processes whose rings the session reads (the hooks ran in them), then every other
  // process of the job's tree (the session's latest sample): a Python process without a
  // training loop is sampled too, and one that is no Python is named with the reason.
  auto sampler = stacks::StackSampler::Start(
      paths.dir + "/" + std::string(stacks::kStacksFile), options,
      [&session, latest = sample::Sample{}]() mutable {
        std::vector<stacks::StackTarget> targets;
        for (const phase::RingInfo& r : session.LiveRings())
          targets.push_back({r.pid, r.rank, r.forked_from != 0, r.forked_from, false});
        if (session.CopyLatest(latest)) {
          for (const host::ProcessSample& p : latest.processes) {
            const bool ring = std::any_of(targets.begin(), targets.end(),
                                          [&](const auto& t) { return t.pid == p.pid; });
            if (!ring && p.state != 'Z') targets.push_back({p.pid, 0, false, p.ppid, true});
          }
        }
        return targets;
      });
  if (!sampler.ok()) {
    fmt::print(stderr, "[stallscope] warning: {}; no Python stacks for this run\n",
               EscapeControl(sampler.error().message));
    return nullptr;
  }
  return std::move(sampler).value();
}

/// The job started under a session: run.json written, sampling on. Fails (said on stderr) with
/// stallscope's exit code.
struct StartedJob {
  Machine machine;
  rundir::RunMeta meta;
  std::unique_ptr<monitor::Session> session;
  std::shared_ptr<void> serving;
  std::unique_ptr<stacks::StackSampler> stacks;  ///< --stacks (null with --no-stacks)
  double monitor_cpu_before = 0;
  double job_cpu_before = 0;
};

/// Opens the machine, starts the session and the job, writes run.json and opens the recording.
/// `undo` is armed when a start fails after the run directory was made.
std::variant<StartedJob, int> StartJob(const RunOptions& o, const std::string& name,
                                       const rundir::RunPaths& paths, int64_t interval_ns,
                                       Clock& clock, UndoFailedStart& undo) {
  StartedJob s;
  s.monitor_cpu_before = CpuSeconds(RUSAGE_SELF);
  s.job_cpu_before = CpuSeconds(RUSAGE_CHILDREN);
  auto machine_or = OpenMachine(o.sampling, clock, interval_ns);
  if (!machine_or.ok())
    return fmt::print(stderr, "stallscope run: {}\n", machine_or.error().message), 2;
  s.machine = std::move(machine_or).value();
  const std::vector<std::string> job_env = JobEnvironment(paths, o);
  s.meta = StartMeta(o, name, s.machine.header, clock, job_env);
  // A write error stops the recording, never the job (the user's training must not die because
  // our recording failed): warned once when it happens, and said again after the report.
  monitor::SessionOptions options;
  options.interval_ns = interval_ns;
  options.on_write_error = monitor::OnWriteError::kContinue;
  options.on_first_write_error = [](const Error& e) {
    fmt::print(stderr, "[stallscope] warning: {}; the recording stops here, the job goes on\n",
               EscapeControl(e.message));
  };
  s.session = std::make_unique<monitor::Session>(*s.machine.gpus, s.machine.fs, clock,
                                                 s.machine.header, std::move(options));
  monitor::Session& session = *s.session;
  if (auto st = session.WatchPhases(paths.dir); !st.ok()) {
    undo.armed = true;
    return fmt::print(stderr, "stallscope run: {}\n", EscapeControl(st.error().message)), 1;
  }
  if (auto st = session.StartCommand(o.command, job_env,
                                     o.job_log || o.tui ? paths.dir + "/job.log" : std::string());
      !st.ok()) {
    undo.armed = true;
    return fmt::print(stderr, "stallscope run: {}\n", EscapeControl(st.error().message)), 127;
  }
  if (!o.serve.empty() && !ServeJob(session, o.serve, interval_ns, s.serving)) {
    undo.armed = true;
    return 1;
  }
  s.meta.pid = session.child()->pid();
  WriteMeta(paths, s.meta);
  if (!o.quiet) fmt::print(stderr, "[stallscope] run directory {}\n", EscapeControl(paths.dir));
  // stacks.jsonl before recording.jsonl: the recording stays the last file a run makes at start
  // (a job that waits for it and removes the run directory raced a stacks.jsonl made after it:
  // "rm: ... Directory not empty", 5 runs in 87 beside the e2e tier).
  if (!o.no_stacks) s.stacks = StartStacks(o, paths, session);
  if (auto st = session.OpenRecording(paths.recording(), sample::RecordingFormat::kJsonl);
      !st.ok() && RunDirExists(paths)) {
    fmt::print(stderr, "stallscope run: {} (continuing without a recording)\n",
               EscapeControl(st.error().message));
  }
  session.StartSampling();
  return s;
}

}  // namespace

JobOutcome RunJob(const RunOptions& o) {
  JobOutcome out;
  auto refuse = [&](int code) {
    out.exit_code = code;
    return out;
  };
  auto interval = monitor::ParseIntervalNs(o.interval);
  if (auto st = CheckSamplingOptions(o.sampling); !st.ok())
    return fmt::print(stderr, "stallscope run: {}\n", st.error().message), refuse(2);
  if (!interval.ok())
    return fmt::print(stderr, "stallscope run: {}\n", EscapeControl(interval.error().message)),
           refuse(2);
  std::optional<int64_t> stop_after_ns;
  const std::string name = o.name.empty() ? rundir::DefaultRunName(o.command) : o.name;
  if (auto refused = RefuseRun(o, name, stop_after_ns)) return refuse(*refused);
  monitor::BlockTerminationSignals();
  SystemClock clock;
  std::error_code out_ec;
  const bool out_existed = !o.out.empty() && fs::exists(fs::symlink_status(o.out, out_ec));
  auto paths = MakeRunPaths(o, name, clock.WallNs());
  if (!paths.ok()) {
    const bool usage = paths.error().code == ErrorCode::kInvalidArgument;
    return fmt::print(stderr, "stallscope run: {}\n", EscapeControl(paths.error().message)),
           refuse(usage ? 2 : 1);
  }
  out.paths = *paths;
  UndoFailedStart undo{paths->dir, !out_existed};  // declared before the session it outlives
  auto started = StartJob(o, name, *paths, *interval, clock, undo);
  if (const int* code = std::get_if<int>(&started)) return refuse(*code);
  StartedJob& job = std::get<StartedJob>(started);
  out.started = true;

  bool stopped = false;
  Supervisor sup(*job.session, o, clock, stop_after_ns, stopped);
  out.exit_code = o.tui ? SuperviseJobTui(sup, paths->dir, *interval) : SuperviseJob(sup);
  out.interrupts = sup.interrupts;
  job.serving.reset();  // the exporter reads the session: stop it first
  if (job.stacks) {
    if (auto st = job.stacks->Stop(); !st.ok() && !out.dir_removed)
      fmt::print(stderr, "[stallscope] warning: {}\n", EscapeControl(st.error().message));
    job.stacks.reset();
  }
  out.recorded = job.session->Finish(out.exit_code);  // stops sampling
  rundir::RunMeta& meta = job.meta;
  meta.end_mono_ns = job.session->end_mono_ns();
  // Overhead in CPU time, before the report costs any (README "Overhead"): the job has been
  // reaped, so its children's times are in. Differences: `passes` and `sweep` run several jobs in
  // this process, and both counters add up.
  meta.monitor_cpu_s = CpuSeconds(RUSAGE_SELF) - job.monitor_cpu_before;
  meta.job_cpu_s = CpuSeconds(RUSAGE_CHILDREN) - job.job_cpu_before;
  meta.exit_code = out.exit_code;
  // Stopped: ended by --duration (--steps ends it from inside, with exit code 0: exited).
  meta.status = stopped               ? rundir::RunStatus::kStopped
                : out.exit_code > 128 ? rundir::RunStatus::kKilled
                                      : rundir::RunStatus::kExited;
  out.status = meta.status;
  out.dir_removed = !RunDirExists(*paths);
  if (!out.dir_removed) WriteMeta(*paths, meta);
  return out;
}

}  // namespace stallscope::cli
