#include <signal.h>
#include <unistd.h>

#include <atomic>

#include <fmt/format.h>

#include "analysis/summary.h"
#include "base/units.h"
#include "cli/child_process.h"
#include "cli/commands.h"
#include "report/render.h"
#include "sample/sampler.h"

namespace stallscope::cli {

int RunTop(const TopOptions& o) {
  auto interval = ParseDurationNs(o.interval);
  if (!interval.ok())
    return fmt::print(stderr, "stallscope top: {}\n", interval.error().message), 2;
  if (*interval < sample::kMinIntervalNs) {
    fmt::print(stderr, "stallscope top: interval {} is below the 50ms minimum\n", o.interval);
    return 2;
  }
  BlockTerminationSignals();
  SystemClock clock;
  Machine machine = OpenMachine(o.sampling, clock, *interval);
  host::HostSampler host_sampler(machine.fs);
  sample::Sampler sampler(*machine.gpus, host_sampler, nullptr, clock);
  sample::Sample s;

  if (o.once) {
    // CPU shares and rates need two readings: take one, wait a short while, take the real one.
    sampler.SampleOnce(s);
    clock.SleepUntil(clock.MonotonicNs() + 250'000'000);
    sampler.SampleOnce(s);
    std::string out = o.json ? report::RenderTopJson(machine.header, s)
                             : report::RenderTopText(machine.header, s);
    fmt::print("{}", out);
    return 0;
  }

  analysis::LowUtilWatch watch;
  bool tty = isatty(STDOUT_FILENO) != 0;

  int64_t shown = 0;
  sampler.SampleOnce(s);  // prime the rate counters
  int64_t next = clock.MonotonicNs() + *interval;
  for (;;) {
    int sig = WaitSignal(std::max<int64_t>(next - clock.MonotonicNs(), 1));
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) break;
    if (clock.MonotonicNs() < next) continue;
    next += *interval;
    sampler.SampleOnce(s);
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
      fmt::print("{}", o.json ? report::RenderTopJson(machine.header, s)
                              : report::RenderTopText(machine.header, s));
    }
    std::fflush(stdout);
    if (o.count > 0 && ++shown >= o.count) break;
  }

  return 0;
}

int RunSummary(const SummaryOptions& o) {
  auto rec = sample::ReadRecording(o.path);
  if (!rec.ok()) {
    fmt::print(stderr, "stallscope summary: {}\n", rec.error().message);
    return 1;
  }
  auto summary = analysis::Summarize(*rec);
  if (o.json) {
    for (const auto& w : rec->warnings) fmt::print(stderr, "warning: {}\n", w);
    fmt::print("{}", report::RenderSummaryJson(summary));
  } else {
    fmt::print("{}", report::RenderSummaryText(summary));
  }
  return 0;
}

}  // namespace stallscope::cli
