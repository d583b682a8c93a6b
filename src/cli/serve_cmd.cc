// `stallscope serve`: GPUs + host as Prometheus metrics (docs/commands/serve.md); and StartServe,
// the `--serve ADDR` of `run` and `record` (the same exporter, plus the job while it runs).

#include <signal.h>

#include <atomic>

#include <fmt/format.h>

#include "base/units.h"
#include "cli/commands.h"
#include "export/exporter.h"
#include "monitor/session.h"

namespace stallscope::cli {
namespace {

/// The window behind stallscope_steps_per_second, data_wait_ratio and the verdict: the run's
/// status-line period (run_cmd.cc kStatusEveryNs), so the metrics say what the status line says.
constexpr int64_t kWindowSpanNs = 10'000'000'000;

}  // namespace

std::optional<std::string> BadListenAddress(const std::string& listen) {
  auto parsed = exporter::ParseListenAddress(listen);
  if (parsed.ok()) return std::nullopt;
  return parsed.error().message;
}

std::optional<std::string> CannotListen(const std::string& listen) {
  auto parsed = exporter::ParseListenAddress(listen);
  if (!parsed.ok()) return parsed.error().message;
  if (auto st = exporter::CheckListen(*parsed); !st.ok()) return st.error().message;
  return std::nullopt;
}

Result<std::shared_ptr<void>> StartServe(monitor::Session& session, const std::string& listen,
                                         int64_t interval_ns) {
  TRY(exporter::ListenAddress address, exporter::ParseListenAddress(listen));
  session.TrackProcessTotals();
  // The header is complete once the followed tree is known (StartCommand / FollowPid come
  // first), and not written after: the publisher may copy it.
  const sample::RecordingHeader header = session.header();
  auto clock = std::make_shared<SystemClock>();
  auto tracker = std::make_shared<exporter::WindowTracker>(kWindowSpanNs);
  TRY(std::unique_ptr<exporter::Exporter> e,
      exporter::Exporter::Start(
          address,
          [&session, header, clock, tracker](exporter::Snapshot& out) {
            if (out.header.gpus.empty() && out.header.hostname.empty()) out.header = header;
            out.have_sample = session.CopyLatest(out.sample);
            out.processes = session.LiveProcessTotals();
            out.window = tracker->Update(clock->MonotonicNs(), out.processes);
          },
          interval_ns));
  address.port = e->port();  // the chosen one, for port 0
  fmt::print(stderr, "stallscope: serving http://{}/metrics\n", address.ToString());
  // Issue 27 B18: 0.0.0.0 was taken without a word; the default is loopback (issue 15).
  if (auto warning = exporter::ExposureWarning(address))
    fmt::print(stderr, "stallscope: {}\n", *warning);
  return std::shared_ptr<void>(std::move(e));
}

int RunServe(const ServeOptions& o) {
  auto interval = monitor::ParseIntervalNs(o.interval);
  if (auto st = CheckSamplingOptions(o.sampling); !st.ok())
    return fmt::print(stderr, "stallscope serve: {}\n", st.error().message), 2;
  if (!interval.ok())
    return fmt::print(stderr, "stallscope serve: {}\n", interval.error().message), 2;
  if (auto bad = BadListenAddress(o.listen))
    return fmt::print(stderr, "stallscope serve: --listen {}\n", *bad), 2;
  int64_t duration_ns = 0;
  if (!o.duration.empty()) {
    auto d = ParseDurationNs(o.duration);
    if (!d.ok() || *d <= 0)
      return fmt::print(stderr, "stallscope serve: --duration {}: {}\n", o.duration,
                        d.ok() ? "must be more than 0" : d.error().message),
             2;
    duration_ns = *d;
  }
  monitor::BlockTerminationSignals();  // before any thread starts, so all inherit the mask
  SystemClock clock;
  auto machine_or = OpenMachine(o.sampling, clock, *interval);
  if (!machine_or.ok())
    return fmt::print(stderr, "stallscope serve: {}\n", machine_or.error().message), 2;
  Machine machine = std::move(machine_or).value();
  monitor::SessionOptions options;
  options.interval_ns = *interval;
  monitor::Session session(*machine.gpus, machine.fs, clock, machine.header, std::move(options));
  auto serving = StartServe(session, o.listen, *interval);
  if (!serving.ok())
    return fmt::print(stderr, "stallscope serve: {}\n", serving.error().message), 1;
  session.StartSampling();
  const int64_t start = clock.MonotonicNs();
  for (;;) {
    const int sig = monitor::WaitSignal(kNsPerSec / 4);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) break;
    if (duration_ns > 0 && clock.MonotonicNs() - start >= duration_ns) break;
  }
  serving->reset();  // stop serving before the session goes
  (void)session.Finish(std::nullopt);
  return 0;
}

}  // namespace stallscope::cli
