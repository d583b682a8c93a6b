#include <signal.h>
#include <unistd.h>

#include <functional>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "analysis/summary.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/top_tui.h"
#include "diagnose/suspicion.h"
#include "monitor/session.h"
#include "phase/phase_reader.h"
#include "report/render.h"
#include "report/top_screen.h"
#include "rundir/run_follower.h"

namespace stallscope::cli {
namespace {

/// `--run DIR`: the run follower (read-only) and the clock it is polled with.
struct RunWatch {
  std::string dir;
  rundir::RunFollower follower;
  const Clock* clock;
  /// Termination signals end top during a poll (their default action), not only between
  /// samples: off for the full screen, which must restore the terminal on the way out.
  bool interruptible = true;
  report::TopRunStatus last;

  report::TopRunStatus Poll() {
    // Issue 27 B14: top blocks SIGINT/SIGTERM/SIGHUP to take them in WaitSignal, so a read of
    // the run directory that never returned (a FIFO, a hung file system) made it ignore them.
    // A signal already pending is left to the caller's loop (a clean exit).
    sigset_t term, pending, old;
    sigemptyset(&term);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&term, sig);
    sigpending(&pending);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      if (sigismember(&pending, sig) == 1) return last;
    }
    if (interruptible) pthread_sigmask(SIG_UNBLOCK, &term, &old);
    const rundir::RunFollowStatus& s = follower.Poll(clock->MonotonicNs());
    if (interruptible) pthread_sigmask(SIG_SETMASK, &old, nullptr);
    last = report::TopRunStatus{dir, s.window, std::string(diagnose::WindowSuspicionText(s.window)),
                                s.note};
    return last;
  }
};

/// Follows the job's process tree (run.json's pid) unless --pid names another.
RunWatch StartRunWatch(const TopOptions& o, monitor::Session& session, const Clock& clock,
                       rundir::RunFollower follower) {
  const int32_t pid = follower.meta().pid;
  // A finished job's pid may be gone (or reused by now: run.json then says it finished).
  if (o.pid == 0 && pid > 0 && follower.meta().status == rundir::RunStatus::kRunning &&
      phase::ProcessExists(pid))
    (void)session.FollowPid(pid);  // it may exit in between: the screen then shows none
  return RunWatch{o.run_dir, std::move(follower), &clock, true, {o.run_dir, {}, "", ""}};
}

/// The full screen: the session samples on this thread, once per interval (issue 14).
int RunTopFullScreen(monitor::Session& session, const sample::RecordingHeader& header,
                     int64_t interval_ns, RunWatch* run) {
  report::TopModel model(header);
  model.interval_ns = interval_ns;
  session.SampleNow();  // prime the rate counters
  TopTuiHooks hooks;
  hooks.refresh = [&](report::TopModel& m) {
    m.Add(session.SampleNow());
    if (run != nullptr) m.run = run->Poll();
  };
  hooks.stop_requested = [] {
    int sig = monitor::WaitSignal(1);
    return sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
  };
  return RunTopTui(model, interval_ns, hooks);
}

/// The line-by-line top (not a terminal, --status, --plain, --count, --json): one sample every
/// interval until a signal or --count.
int RunTopLines(const TopOptions& o, monitor::Session& session,
                const sample::RecordingHeader& header, int64_t interval_ns, SystemClock& clock,
                const std::function<void()>& print_run) {
  const bool tty = isatty(STDOUT_FILENO) != 0;
  analysis::LowUtilWatch watch;

  int64_t shown = 0;
  session.SampleNow();  // prime the rate counters
  int64_t next = clock.MonotonicNs() + interval_ns;
  for (;;) {
    int sig = monitor::WaitSignal(std::max<int64_t>(next - clock.MonotonicNs(), 1));
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) break;
    if (clock.MonotonicNs() < next) continue;
    next += interval_ns;
    const sample::Sample& s = session.SampleNow();
    if (o.status) {
      fmt::print("{}\n", report::RenderStatusLine(s));
      auto agg = sample::Aggregate(s.gpus);
      if (agg.average_utilization_pct) {
        watch.Add(*agg.average_utilization_pct);
        if (watch.Low())
          fmt::print("{}", report::RenderLowUtilWarning(watch.WindowMean(),
                                                        analysis::LowUtilWatch::kDefaultWindow));
      }
    } else {
      if (tty) fmt::print("\033[H\033[J");
      fmt::print("{}",
                 o.json ? report::RenderTopJson(header, s) : report::RenderTopText(header, s));
    }
    print_run();
    std::fflush(stdout);
    if (o.count > 0 && ++shown >= o.count) break;
  }

  return 0;
}

}  // namespace

int RunTop(const TopOptions& o) {
  auto interval = monitor::ParseIntervalNs(o.interval);
  if (auto st = CheckSamplingOptions(o.sampling); !st.ok())
    return fmt::print(stderr, "stallscope top: {}\n", st.error().message), 2;
  if (!interval.ok())
    return fmt::print(stderr, "stallscope top: {}\n", EscapeControl(interval.error().message)), 2;
  monitor::BlockTerminationSignals();
  SystemClock clock;
  // --run DIR first: a wrong DIR is one line, before anything else is opened or said.
  std::optional<rundir::RunFollower> follower;
  if (!o.run_dir.empty()) {
    if (o.json)
      return fmt::print(stderr, "stallscope top: --run has no JSON output; drop --json\n"), 2;
    auto f = rundir::RunFollower::Open(o.run_dir);
    if (!f.ok())
      return fmt::print(stderr, "stallscope top: {}\n", EscapeControl(f.error().message)), 1;
    follower.emplace(std::move(*f));
  }
  auto machine_or = OpenMachine(o.sampling, clock, *interval);
  if (!machine_or.ok())
    return fmt::print(stderr, "stallscope top: {}\n", machine_or.error().message), 2;
  Machine machine = std::move(machine_or).value();
  // No thread and no recording: top samples on its own schedule, on this thread.
  monitor::SessionOptions options;
  options.interval_ns = *interval;
  monitor::Session session(*machine.gpus, machine.fs, clock, machine.header, std::move(options));
  if (o.pid > 0) {
    if (auto st = session.FollowPid(o.pid); !st.ok())
      return fmt::print(stderr, "stallscope top: {}\n", EscapeControl(st.error().message)), 1;
  }
  std::optional<RunWatch> run;
  if (follower) run = StartRunWatch(o, session, clock, std::move(*follower));
  auto print_run = [&] {
    if (run) fmt::print("{}", report::RenderTopRunLine(run->Poll()));
  };

  if (o.once) {
    // CPU shares and rates need two readings: take one, wait a short while, take the real one.
    session.SampleNow();
    clock.SleepUntil(clock.MonotonicNs() + 250'000'000);
    const sample::Sample& s = session.SampleNow();
    std::string out = o.json ? report::RenderTopJson(machine.header, s)
                             : report::RenderTopText(machine.header, s);
    fmt::print("{}", out);
    print_run();
    return 0;
  }

  bool tty = isatty(STDOUT_FILENO) != 0;
  if (tty && isatty(STDIN_FILENO) != 0 && !o.json && !o.status && !o.plain && o.count == 0) {
    if (run) run->interruptible = false;
    return RunTopFullScreen(session, session.header(), *interval, run ? &*run : nullptr);
  }

  return RunTopLines(o, session, machine.header, *interval, clock, print_run);
}

int RunSummary(const SummaryOptions& o) {
  // Streamed: memory is one sample plus per-GPU statistics, whatever the recording's size.
  auto summary = analysis::SummarizeFile(o.path);
  if (!summary.ok()) {
    fmt::print(stderr, "stallscope summary: {}\n", EscapeControl(summary.error().message));
    return 1;
  }
  if (o.json) {
    for (const auto& w : summary->warnings) fmt::print(stderr, "warning: {}\n", EscapeControl(w));
    fmt::print("{}", report::RenderSummaryJson(*summary));
  } else {
    fmt::print("{}", report::RenderSummaryText(*summary));
  }
  return 0;
}

}  // namespace stallscope::cli
