#include <signal.h>

#include <cerrno>

#include <algorithm>

#include <fmt/format.h>

#include "base/units.h"
#include "cli/commands.h"
#include "cli/output_path.h"
#include "monitor/session.h"

namespace stallscope::cli {
namespace {

std::string DefaultOutputName(int64_t wall_ns) {
  std::string iso = FormatIsoUtc(wall_ns);  // 2026-11-21T18:30:00.123Z
  std::string compact;
  for (char c : iso.substr(0, 19)) {
    if (c != '-' && c != ':') compact.push_back(c == 'T' ? '-' : c);
  }
  return "stallscope-record-" + compact + ".jsonl";
}

/// --duration in ns, 0 when not given; a malformed or non-positive value is an error.
Result<int64_t> RecordDurationNs(const std::string& text) {
  if (text.empty()) return int64_t{0};
  TRY(int64_t ns, ParseDurationNs(text));
  if (ns <= 0) {
    return MakeError(ErrorCode::kInvalidArgument, "--duration {}: must be more than 0", text);
  }
  return ns;
}

struct Deadlines {
  int64_t start_ns = 0;
  int64_t duration_ns = 0;  ///< 0 = none
};

/// Waits in the main thread for the end of the recording: the command's exit, the duration, the
/// followed PID's exit, the session's own stop (a write error), or a signal (forwarded to the
/// command when there is one).
std::optional<int> WaitForEnd(monitor::Session& session, int32_t pid, const Deadlines& d,
                              const Clock& clock) {
  monitor::ChildProcess* child = session.child();
  for (;;) {
    // SIGCHLD and termination signals end the wait at once; otherwise wake once a second (to
    // notice a --pid exit) or at the end of --duration.
    int64_t timeout = kNsPerSec;
    if (d.duration_ns > 0 && !session.stop_requested()) {
      timeout = std::clamp<int64_t>(d.start_ns + d.duration_ns - clock.MonotonicNs(), 1, kNsPerSec);
    }
    int sig = monitor::WaitSignal(timeout);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (child == nullptr) return std::nullopt;  // Ctrl-C ends a plain recording normally
      child->Signal(sig);                         // the command decides; we record its end
    }
    if (child != nullptr) {
      if (auto code = child->Poll()) return code;
    } else if (session.stop_requested() || (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)) {
      return std::nullopt;
    }
    if (d.duration_ns > 0 && clock.MonotonicNs() - d.start_ns >= d.duration_ns) {
      if (child == nullptr) return std::nullopt;
      // The recording ends; the command keeps running and its exit code is still returned.
      session.RequestStop();
    }
  }
}

}  // namespace

namespace {

/// --csv / --format as a RecordingFormat; nullopt (after printing why) when they are bad.
std::optional<sample::RecordingFormat> RecordFormat(const RecordOptions& o) {
  using sample::RecordingFormat;
  std::optional<RecordingFormat> f;
  if (o.format.empty() || o.format == "jsonl") f = RecordingFormat::kJsonl;
  if (o.format == "csv") f = RecordingFormat::kCsv;
  if (o.format == "seed") f = RecordingFormat::kSeed;
  if (!f) {
    fmt::print(stderr, "stallscope record: --format {}: give jsonl, csv or seed\n",
               EscapeControl(o.format));
    return std::nullopt;
  }
  if (o.csv && !o.format.empty() && *f != RecordingFormat::kCsv) {
    fmt::print(stderr, "stallscope record: --csv and --format {} disagree\n",
               EscapeControl(o.format));
    return std::nullopt;
  }
  return o.csv ? RecordingFormat::kCsv : *f;
}

}  // namespace

int RunRecord(const RecordOptions& o, const ServeHook& serve) {
  auto interval = monitor::ParseIntervalNs(o.interval);
  if (auto st = CheckSamplingOptions(o.sampling); !st.ok())
    return fmt::print(stderr, "stallscope record: {}\n", st.error().message), 2;
  if (!interval.ok())
    return fmt::print(stderr, "stallscope record: {}\n", interval.error().message), 2;
  Deadlines deadlines;
  auto duration = RecordDurationNs(o.duration);
  if (!duration.ok())
    return fmt::print(stderr, "stallscope record: {}\n", duration.error().message), 2;
  deadlines.duration_ns = *duration;
  if (o.pid > 0 && !o.command.empty()) {
    fmt::print(stderr, "stallscope record: give either --pid or a command after --, not both\n");
    return 2;
  }
  auto format = RecordFormat(o);
  if (!format) return 2;
  SystemClock clock;
  std::string path = o.output.empty() ? DefaultOutputName(clock.WallNs()) : o.output;
  if (!o.serve.empty() && !serve)
    return fmt::print(stderr, "stallscope record: --serve needs stallscope-full\n"), 2;
  if (auto refused = RefuseOutputPath("-o", path, o.force, OutputWrite::kInPlace)) {
    return fmt::print(stderr, "stallscope record: {}\n", *refused), 2;
  }
  monitor::BlockTerminationSignals();  // before any thread starts, so all inherit the mask
  auto machine_or = OpenMachine(o.sampling, clock, *interval);
  if (!machine_or.ok())
    return fmt::print(stderr, "stallscope record: {}\n", machine_or.error().message), 2;
  Machine machine = std::move(machine_or).value();

  // A write error ends the recording (it is the product): the sampler stops, the error is
  // printed at the end and the exit code is 1 (a followed command still runs to its end).
  monitor::SessionOptions options;
  options.interval_ns = *interval;
  options.on_write_error = monitor::OnWriteError::kStop;
  options.keep_latest = !o.serve.empty();  // no status line to feed; --serve reads it
  monitor::Session session(*machine.gpus, machine.fs, clock, machine.header, std::move(options));
  if (!o.command.empty()) {
    if (auto st = session.StartCommand(o.command); !st.ok())
      return fmt::print(stderr, "stallscope record: {}\n", st.error().message), 127;
  } else if (o.pid > 0) {
    if (auto st = session.FollowPid(o.pid); !st.ok())
      return fmt::print(stderr, "stallscope record: {}\n", st.error().message), 2;
  }
  // --serve before the output file is made: a start that fails leaves no file behind to be
  // refused by the next `record -o` (issue 27 B19; cli.cc checked the port before the command
  // started, StartServe may still find it taken).
  std::shared_ptr<void> serving;
  if (!o.serve.empty()) {
    auto started = serve(session, o.serve, *interval);
    if (!started.ok()) {
      fmt::print(stderr, "stallscope record: {}\n", started.error().message);
      if (auto* child = session.child()) child->Signal(SIGTERM), child->Wait();
      return started.error().code == ErrorCode::kInvalidArgument ? 2 : 1;
    }
    serving = std::move(*started);
  }
  auto opened = session.OpenRecording(path, *format);
  if (!opened.ok()) {
    fmt::print(stderr, "stallscope record: {}\n", opened.error().message);
    if (auto* child = session.child()) child->Signal(SIGTERM), child->Wait();
    return 1;
  }
  if (path != "-")
    fmt::print(stderr, "stallscope: recording to {} every {}\n", path, FormatDurationNs(*interval));

  session.StartSampling();
  deadlines.start_ns = clock.MonotonicNs();
  std::optional<int> exit_code = WaitForEnd(session, o.pid, deadlines, clock);
  serving.reset();  // the exporter reads the session: stop it first
  Status finished = session.Finish(exit_code);
  if (!finished.ok()) fmt::print(stderr, "stallscope record: {}\n", finished.error().message);
  if (path != "-") {
    fmt::print(stderr, "stallscope: {} samples in {}. Next: stallscope summary {}\n",
               session.samples_written(), path, path);
  }
  if (!finished.ok()) return 1;
  return exit_code.value_or(0);
}

}  // namespace stallscope::cli
