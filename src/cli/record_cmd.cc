#include <signal.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <thread>

#include <fmt/format.h>

#include "base/units.h"
#include "cli/child_process.h"
#include "cli/commands.h"
#include "sample/recording.h"
#include "sample/sampler.h"

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

struct Deadlines {
  int64_t start_ns = 0;
  int64_t duration_ns = 0;  ///< 0 = none
};

/// Waits in the main thread for the end of the recording: the command's exit, the duration, the
/// followed PID's exit, or a signal (forwarded to the command when there is one).
std::optional<int> WaitForEnd(ChildProcess* child, int32_t pid, const Deadlines& d,
                              const Clock& clock, StopFlag& stop) {
  for (;;) {
    // SIGCHLD and termination signals end the wait at once; otherwise wake once a second (to
    // notice a --pid exit) or at the end of --duration.
    int64_t timeout = kNsPerSec;
    if (d.duration_ns > 0 && !stop.requested()) {
      timeout = std::clamp<int64_t>(d.start_ns + d.duration_ns - clock.MonotonicNs(), 1, kNsPerSec);
    }
    int sig = WaitSignal(timeout);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (child == nullptr) return std::nullopt;  // Ctrl-C ends a plain recording normally
      child->Signal(sig);                         // the command decides; we record its end
    }
    if (child != nullptr) {
      if (auto code = child->Poll()) return code;
    } else if (stop.requested() || (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)) {
      return std::nullopt;
    }
    if (d.duration_ns > 0 && clock.MonotonicNs() - d.start_ns >= d.duration_ns) {
      if (child == nullptr) return std::nullopt;
      // The recording ends; the command keeps running and its exit code is still returned.
      stop.Request();
    }
  }
}

}  // namespace

int RunRecord(const RecordOptions& o) {
  auto interval = ParseDurationNs(o.interval);
  if (!interval.ok())
    return fmt::print(stderr, "stallscope record: {}\n", interval.error().message), 2;
  if (*interval < sample::kMinIntervalNs) {
    fmt::print(stderr, "stallscope record: interval {} is below the 50ms minimum\n", o.interval);
    return 2;
  }
  Deadlines deadlines;
  if (!o.duration.empty()) {
    auto d = ParseDurationNs(o.duration);
    if (!d.ok()) return fmt::print(stderr, "stallscope record: {}\n", d.error().message), 2;
    deadlines.duration_ns = *d;
  }
  if (o.pid > 0 && !o.command.empty()) {
    fmt::print(stderr, "stallscope record: give either --pid or a command after --, not both\n");
    return 2;
  }
  BlockTerminationSignals();  // before any thread starts, so all inherit the mask
  SystemClock clock;
  Machine machine = OpenMachine(o.sampling, clock, *interval);
  std::string path = o.output.empty() ? DefaultOutputName(clock.WallNs()) : o.output;

  std::optional<ChildProcess> child;
  int32_t root = o.pid;
  if (!o.command.empty()) {
    auto started = ChildProcess::Start(o.command);
    if (!started.ok())
      return fmt::print(stderr, "stallscope record: {}\n", started.error().message), 127;
    child.emplace(std::move(started.value()));
    root = child->pid();
    machine.header.command = o.command;
  } else if (root > 0 && kill(root, 0) != 0 && errno == ESRCH) {
    fmt::print(stderr, "stallscope record: no process with pid {}\n", root);
    return 2;
  }
  if (root > 0) machine.header.root_pid = root;

  auto writer = sample::RecordingWriter::Open(
      path, machine.header,
      o.csv ? sample::RecordingFormat::kCsv : sample::RecordingFormat::kJsonl);
  if (!writer.ok()) {
    fmt::print(stderr, "stallscope record: {}\n", writer.error().message);
    if (child) child->Signal(SIGTERM), child->Wait();
    return 1;
  }
  if (path != "-")
    fmt::print(stderr, "stallscope: recording to {} every {}\n", path, FormatDurationNs(*interval));

  host::HostSampler host_sampler(machine.fs);
  std::optional<host::ProcessTracker> tracker;
  if (root > 0) tracker.emplace(machine.fs, root);
  sample::Sampler sampler(*machine.gpus, host_sampler, tracker ? &*tracker : nullptr, clock);
  StopFlag stop;
  std::string write_error;
  std::vector<bool> was_lost(machine.gpus->DeviceCount(), false);
  std::thread sampling([&] {
    sampler.Run(*interval, stop, [&](const sample::Sample& s) {
      for (size_t i = 0; i < s.gpus.size() && i < was_lost.size(); ++i) {
        if (s.gpus[i].lost && !was_lost[i]) {
          was_lost[i] = true;
          (void)writer->AppendEvent("gpu_lost", s.mono_ns,
                                    fmt::format("GPU {} stopped answering", i));
        }
      }
      auto st = writer->Append(s);
      if (!st.ok()) write_error = st.error().message;
      return st.ok();
    });
    stop.Request();
  });
  deadlines.start_ns = clock.MonotonicNs();
  std::optional<int> exit_code =
      WaitForEnd(child ? &*child : nullptr, o.pid, deadlines, clock, stop);
  stop.Request();
  sampling.join();
  if (!write_error.empty()) {
    fmt::print(stderr, "stallscope record: {}\n", write_error);
  }
  (void)writer->Finish(clock.MonotonicNs(), exit_code);
  if (path != "-") {
    fmt::print(stderr, "stallscope: {} samples in {}. Next: stallscope summary {}\n",
               writer->samples_written(), path, path);
  }
  if (!write_error.empty()) return 1;
  return exit_code.value_or(0);
}

}  // namespace stallscope::cli
