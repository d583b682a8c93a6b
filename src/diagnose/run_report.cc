#include "diagnose/run_report.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/file_read.h"
#include "base/json_fields.h"
#include "base/units.h"
#include "rundir/job_info.h"

namespace stallscope::diagnose {
namespace {

struct ProcAccumulator {
  ProcessRow row;
  double cpu_sum = 0;
  int64_t cpu_n = 0;
  int64_t running = 0, sleeping = 0, blocked = 0;
  std::optional<uint64_t> first_read, last_read, first_write, last_write;
  std::optional<uint64_t> first_nvcsw, last_nvcsw;
  int64_t first_ns = 0, last_ns = 0;
};

ProcessRole RoleOf(int32_t pid, int32_t root, const std::set<int32_t>& workers,
                   const std::map<int32_t, int32_t>& rank_of_main,
                   const std::set<int32_t>& launchers, int32_t world) {
  using enum ProcessRoleKind;
  if (workers.count(pid)) return {kDataLoaderWorker};
  if (auto it = rank_of_main.find(pid); it != rank_of_main.end()) {
    return world > 1 ? ProcessRole{kRank, it->second} : ProcessRole{kMain};
  }
  if (launchers.count(pid)) return {kLauncher};
  if (pid == root) return {rank_of_main.empty() ? kMain : kLauncher};
  return {kChild};
}

/// Processes that started (directly or through others) the processes that mark the ranks' steps:
/// torchrun, `accelerate launch`, a shell script, examples/launch.py.
std::set<int32_t> Launchers(const std::map<int32_t, int32_t>& parent_of,
                            const std::map<int32_t, int32_t>& rank_of_main) {
  std::set<int32_t> out;
  for (const auto& [main, rank] : rank_of_main) {
    int32_t pid = main;
    for (size_t depth = 0; depth < 64; ++depth) {  // bounded: a cycle in stale data ends here
      auto it = parent_of.find(pid);
      if (it == parent_of.end() || it->second <= 1) break;
      pid = it->second;
      if (!rank_of_main.count(pid)) out.insert(pid);
    }
  }
  return out;
}

std::vector<ProcessRow> Processes(const rundir::RunData& d, std::span<const sample::Sample> samples,
                                  const analysis::PhaseAnalysis& phases,
                                  const std::vector<rundir::LoaderInfo>& loaders) {
  std::set<int32_t> workers;
  for (const auto& l : loaders) workers.insert(l.worker_pids.begin(), l.worker_pids.end());
  std::map<int32_t, int32_t> rank_of_main;
  int32_t world = 1;
  for (const auto& r : phases.ranks) rank_of_main[r.pid] = r.rank;
  for (const auto& p : d.events.processes) world = std::max(world, p.world_size);
  int32_t root = d.recording.header.root_pid.value_or(d.meta.pid);

  std::map<int32_t, ProcAccumulator> acc;
  std::vector<int32_t> order;
  for (const auto& s : samples) {
    for (const auto& p : s.processes) {
      auto [it, fresh] = acc.try_emplace(p.pid);
      ProcAccumulator& a = it->second;
      if (fresh) {
        order.push_back(p.pid);
        a.row.pid = p.pid;
        a.first_ns = s.mono_ns;
        a.first_read = p.read_bytes;
        a.first_write = p.write_bytes;
        a.first_nvcsw = p.nonvoluntary_ctxt_switches;
      }
      a.row.ppid = p.ppid;
      a.row.comm = p.comm;
      if (!p.cmdline.empty()) a.row.cmdline = p.cmdline;
      ++a.row.samples;
      if (p.cpu_pct) {
        a.cpu_sum += *p.cpu_pct;
        ++a.cpu_n;
        a.row.cpu_max_pct = std::max(a.row.cpu_max_pct, *p.cpu_pct);
      }
      a.running += p.state == 'R';
      a.sleeping += p.state == 'S' || p.state == 'I';
      a.blocked += p.state == 'D';
      a.row.threads_max = std::max(a.row.threads_max, p.threads);
      if (p.read_bytes) a.last_read = p.read_bytes;
      if (p.write_bytes) a.last_write = p.write_bytes;
      if (p.nonvoluntary_ctxt_switches) a.last_nvcsw = p.nonvoluntary_ctxt_switches;
      a.last_ns = s.mono_ns;
    }
  }
  std::map<int32_t, int32_t> parent_of;
  for (const auto& [pid, a] : acc) parent_of[pid] = a.row.ppid;
  const std::set<int32_t> launchers = Launchers(parent_of, rank_of_main);
  std::vector<ProcessRow> rows;
  for (int32_t pid : order) {
    ProcAccumulator& a = acc[pid];
    ProcessRow r = a.row;
    r.role = RoleOf(pid, root, workers, rank_of_main, launchers, world);
    r.cpu_mean_pct = a.cpu_n > 0 ? a.cpu_sum / static_cast<double>(a.cpu_n) : 0;
    double n = static_cast<double>(std::max<int64_t>(r.samples, 1));
    r.running_fraction = static_cast<double>(a.running) / n;
    r.sleeping_fraction = static_cast<double>(a.sleeping) / n;
    r.blocked_fraction = static_cast<double>(a.blocked) / n;
    if (a.first_read && a.last_read)
      r.read_bytes = *a.last_read - std::min(*a.first_read, *a.last_read);
    if (a.first_write && a.last_write)
      r.write_bytes = *a.last_write - std::min(*a.first_write, *a.last_write);
    double span_s = NsToSeconds(a.last_ns - a.first_ns);
    if (a.first_nvcsw && a.last_nvcsw && span_s > 0) {
      r.nonvoluntary_switches_per_s =
          static_cast<double>(*a.last_nvcsw - std::min(*a.first_nvcsw, *a.last_nvcsw)) / span_s;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

/// Averages `raw` into at most kMaxSeriesPoints buckets of equal time.
Series Downsample(std::string name, std::string unit, std::vector<SeriesPoint> raw) {
  Series s{std::move(name), std::move(unit), {}};
  if (raw.size() <= kMaxSeriesPoints) {
    s.points = std::move(raw);
    return s;
  }
  double t0 = raw.front().t_s, t1 = raw.back().t_s;
  double width = (t1 - t0) / static_cast<double>(kMaxSeriesPoints);
  size_t i = 0;
  for (size_t b = 0; b < kMaxSeriesPoints && i < raw.size(); ++b) {
    double end = b + 1 == kMaxSeriesPoints ? t1 + 1 : t0 + width * static_cast<double>(b + 1);
    double sum = 0, tsum = 0;
    size_t n = 0;
    for (; i < raw.size() && raw[i].t_s < end; ++i, ++n) {
      sum += raw[i].value;
      tsum += raw[i].t_s;
    }
    if (n > 0) s.points.push_back({tsum / static_cast<double>(n), sum / static_cast<double>(n)});
  }
  return s;
}

std::vector<Series> MachineSeries(const rundir::RunData& d) {
  const auto& samples = d.recording.samples;
  int64_t t0 =
      d.meta.start_mono_ns != 0 ? d.meta.start_mono_ns : (samples.empty() ? 0 : samples[0].mono_ns);
  std::vector<Series> out = RawMachineSeries(d.recording, t0);
  for (Series& s : out) s = Downsample(std::move(s.name), std::move(s.unit), std::move(s.points));
  return out;
}

constexpr size_t kCmdlineBytes = 80;  // a command line quoted in a one-line cause

std::string Interpreter(const rundir::PythonProcess& p) {
  return fmt::format("Python {} ({})", p.version.empty() ? "?" : p.version,
                     p.executable.empty() ? "?" : p.executable);
}

/// No notes at all: the startup hook never ran. Which Pythons did the process table see?
std::vector<std::string> ExplainWithoutNotes(const RunReport& r) {
  const ProcessRow* python = nullptr;
  for (const auto& p : r.processes) {
    if (!rundir::LooksLikePython(p.comm, p.cmdline)) continue;
    if (auto flag = rundir::PythonFlagIgnoringStartup(p.cmdline)) {
      const bool site = *flag == 'S';
      return {fmt::format("the job's Python ran with -{} ({}), so stallscope's startup hook never "
                          "ran in it: pid {}: {}",
                          *flag, site ? "no site import" : "PYTHONPATH ignored", p.pid,
                          Elide(p.cmdline, kCmdlineBytes)),
              "drop the flag, or `pip install` stallscope into that Python (docs/install.md) and "
              "`import stallscope` in the job: it then records on its own"};
    }
    if (python == nullptr) python = &p;
  }
  if (python != nullptr) {
    return {fmt::format("Python ran (pid {}: {}) but stallscope's startup hook did not: "
                        "PYTHONPATH or STALLSCOPE_RUN_DIR did not reach it",
                        python->pid, Elide(python->cmdline, kCmdlineBytes)),
            "a launcher, sudo or a container that resets the environment drops them: pass "
            "both through (e.g. `env PYTHONPATH=... STALLSCOPE_RUN_DIR=...`)"};
  }
  return {
      fmt::format("no Python process was seen in the job ({}): there was nothing to time "
                  "from inside; the GPU and host samples above are all there is",
                  Elide(fmt::format("{}", fmt::join(r.meta.command, " ")), kCmdlineBytes))};
}

/// Why a run has no phases: the most specific cause first (README "When a job reports no
/// phases"). Empty when phases were recorded.
std::vector<std::string> ExplainNoPhases(const RunReport& r) {
  if (!r.phases.ranks.empty() || !r.phases.phases.empty()) return {};
  if (!r.meta.auto_hooks) {
    return {
        "--no-auto was given and the job marks no phases itself (stallscope.phase, "
        "stallscope.step)"};
  }
  if (r.python.empty()) return ExplainWithoutNotes(r);
  const rundir::PythonProcess* failed = nullptr;
  const rundir::PythonProcess* hooked = nullptr;
  bool any_recording = false;
  for (const auto& p : r.python) {
    any_recording = any_recording || p.recording;
    if (!p.recording && p.backend_error && failed == nullptr) failed = &p;
    if (p.hooks_noted && (hooked == nullptr || p.hooks_error)) hooked = &p;
  }
  if (!any_recording && failed != nullptr) {
    return {fmt::format("stallscope's recorder could not load in {}: {}", Interpreter(*failed),
                        *failed->backend_error),
            "rebuild (`make build`) or reinstall the package next to the binary; "
            "STALLSCOPE_BACKEND=native forces the ctypes recorder"};
  }
  if (!any_recording) {
    return {
        fmt::format("the recorder was off in every Python process ({} of them)", r.python.size())};
  }
  if (hooked == nullptr) {
    return {fmt::format("no process imported torch, and none called stallscope.phase(): nothing "
                        "to time ({} Python process{} ran with the recorder on)",
                        r.python.size(), r.python.size() == 1 ? "" : "es"),
            "mark the loop's phases with `with stallscope.phase(\"name\"):` and "
            "`stallscope.step()`"};
  }
  if (hooked->hooks_error) {
    return {fmt::format("the zero-code hooks failed to install in torch {}: {}",
                        hooked->torch_version.value_or("?"), *hooked->hooks_error)};
  }
  return {
      fmt::format("torch {} was imported and the hooks installed, but no DataLoader "
                  "iteration, module call or optimizer step ran: no training loop",
                  hooked->torch_version.value_or("?"))};
}

/// The DataLoader workers the reference rank's first loader started (0 without workers).
int64_t WorkersOf(const analysis::PhaseAnalysis& phases,
                  const std::vector<rundir::LoaderInfo>& loaders) {
  const analysis::RankSteps* ref = nullptr;
  for (const auto& r : phases.ranks) {
    if ((!r.steps.empty() || !r.warmup.empty()) && (ref == nullptr || r.rank < ref->rank)) ref = &r;
  }
  for (const auto& l : loaders) {
    if (ref != nullptr && l.pid == ref->pid) return l.num_workers.value_or(0);
  }
  return 0;
}

RunOverhead Overhead(const rundir::RunData& d, const analysis::PhaseAnalysis& phases) {
  RunOverhead o;
  o.monitor_cpu_s = d.meta.monitor_cpu_s;
  o.job_cpu_s = d.meta.job_cpu_s;
  if (o.monitor_cpu_s && o.job_cpu_s && *o.job_cpu_s > 0) {
    o.monitor_share = *o.monitor_cpu_s / *o.job_cpu_s;
  }
  o.records = d.events.events.size();
  int64_t steps = 0;  // every step the records were written over, warm-up included
  for (const auto& rank : phases.ranks)
    steps += rank.count + static_cast<int64_t>(rank.warmup.size());
  if (steps > 0) o.records_per_step = static_cast<double>(o.records) / static_cast<double>(steps);
  return o;
}

}  // namespace

std::string SyncSiteText(const rundir::SyncSite& s) {
  std::string where = fmt::format("{}:{}", s.file, s.line);
  if (!s.user_file.empty()) where += fmt::format(" via {}:{}", s.user_file, s.user_line);
  return s.count ? fmt::format("{} ({}, {}×)", where, s.kind, *s.count)
                 : fmt::format("{} ({})", where, s.kind);
}

RunReport BuildRunReport(const rundir::RunData& d) {
  RunReport r;
  r.meta = d.meta;
  r.dir = d.paths.dir;
  r.warnings = d.warnings;
  if (d.meta.end_mono_ns) {
    r.wall_s = NsToSeconds(*d.meta.end_mono_ns - d.meta.start_mono_ns);
  } else if (!d.recording.samples.empty()) {
    r.wall_s = NsToSeconds(d.recording.samples.back().mono_ns - d.meta.start_mono_ns);
  }
  r.phases = analysis::AnalyzePhases(d.events, kThresholds);
  for (const auto& w : r.phases.warnings) r.warnings.push_back(w);
  r.loaders = d.info.loaders;
  r.sync_sites = d.info.sync_sites;
  r.job_info = d.info.job;
  r.life = BuildRunLife(d.meta, r.wall_s, r.phases, d.python.processes, r.job_info,
                        WorkersOf(r.phases, r.loaders));
  r.steady_first = 0;
  r.steady_last = d.recording.samples.size();
  int64_t fine_begin = std::numeric_limits<int64_t>::min();
  int64_t fine_end = std::numeric_limits<int64_t>::max();
  if (r.life.has_steps) {
    const int64_t interval =
        d.meta.interval_ns > 0 ? d.meta.interval_ns : d.recording.header.interval_ns;
    std::tie(r.steady_first, r.steady_last) = SamplesInWindow(
        d.recording.samples, r.life.steady_begin_ns, r.life.steady_end_ns, interval);
    fine_begin = r.life.steady_begin_ns;
    fine_end = r.life.steady_end_ns;
  }
  const std::span<const sample::Sample> steady = SteadySamples(d.recording, r);
  r.processes = Processes(d, steady, r.phases, r.loaders);
  // Samples after the steady window still carry its last utilization-buffer entries and GPM
  // windows (read every few seconds): their buffered fields count, filtered by time.
  const auto& all = d.recording.samples;
  const size_t after_first = std::min(r.steady_last, all.size());
  const std::span<const sample::Sample> after =
      r.life.has_steps ? std::span<const sample::Sample>(all).subspan(after_first)
                       : std::span<const sample::Sample>();
  r.machine = analysis::SummarizeWindow(d.recording.header, steady, fine_begin, fine_end,
                                        kThresholds, after);
  r.machine.exit_code = d.recording.exit_code;
  r.machine.warnings = d.recording.warnings;
  r.series = MachineSeries(d);
  r.python = d.python.processes;
  r.no_phases = ExplainNoPhases(r);
  // Issue 27 B20: a ring that could not be created (disk full) explains the silence; "no
  // training loop" would be a guess from missing data.
  if (!r.no_phases.empty() && !d.events.ring_errors.empty()) {
    r.no_phases = {
        fmt::format("phases were not recorded: the phase ring could not be created in {}",
                    fmt::join(d.events.ring_errors, "; ")),
        "free space on the run directory's disk (or pass --out on another one), or make its "
        "phases/ folder writable, and run again"};
  }
  r.overhead = Overhead(d, r.phases);
  return r;
}

std::span<const sample::Sample> SteadySamples(const sample::Recording& recording,
                                              const RunReport& report) {
  const size_t n = recording.samples.size();
  const size_t first = std::min(report.steady_first, n);
  const size_t last = std::clamp(report.steady_last, first, n);
  return std::span<const sample::Sample>(recording.samples).subspan(first, last - first);
}

std::pair<size_t, size_t> SamplesInWindow(const std::vector<sample::Sample>& samples,
                                          int64_t begin_ns, int64_t end_ns, int64_t interval_ns) {
  auto at_or_after = [&](int64_t t) {
    return static_cast<size_t>(
        std::lower_bound(samples.begin(), samples.end(), t,
                         [](const sample::Sample& s, int64_t v) { return s.mono_ns < v; }) -
        samples.begin());
  };
  auto after = [&](int64_t t) {
    return static_cast<size_t>(
        std::upper_bound(samples.begin(), samples.end(), t,
                         [](int64_t v, const sample::Sample& s) { return v < s.mono_ns; }) -
        samples.begin());
  };
  const int64_t half = std::max<int64_t>(0, interval_ns) / 2;
  const size_t first = at_or_after(begin_ns + half);
  const size_t last = std::max(first, after(end_ns + half));
  if (first < last) return {first, last};
  const size_t next = at_or_after(begin_ns);
  if (next < samples.size() && samples[next].mono_ns <= end_ns + std::max<int64_t>(0, interval_ns))
    return {next, next + 1};
  return {next, next};
}

std::vector<Series> RawMachineSeries(const sample::Recording& recording, int64_t t0_ns) {
  const auto& samples = recording.samples;
  auto t = [&](int64_t mono) { return NsToSeconds(mono - t0_ns); };
  std::vector<Series> out;
  size_t gpus = recording.header.gpus.size();
  for (size_t g = 0; g < gpus; ++g) {
    std::vector<SeriesPoint> util, fine, mem, power, clock, sm_active, tensor, dram;
    for (const auto& s : samples) {
      if (g >= s.gpus.size() || s.gpus[g].lost) continue;
      const auto& x = s.gpus[g];
      if (x.util_gpu_pct) util.push_back({t(s.mono_ns), static_cast<double>(*x.util_gpu_pct)});
      for (size_t k = 0; k < x.util_sample_count; ++k) {
        fine.push_back({t(s.DriverMonoNs(x.util_samples[k].ts_us)),
                        static_cast<double>(x.util_samples[k].util_pct)});
      }
      if (x.mem_used_bytes)
        mem.push_back(
            {t(s.mono_ns), static_cast<double>(*x.mem_used_bytes) / static_cast<double>(kMiB)});
      if (x.power_mw) power.push_back({t(s.mono_ns), *x.power_mw / 1000.0});
      if (x.sm_clock_mhz) clock.push_back({t(s.mono_ns), static_cast<double>(*x.sm_clock_mhz)});
      if (x.gpm) {
        // A GPM value is the average of the window that ends at this sample.
        if (x.gpm->sm_active_pct) sm_active.push_back({t(s.mono_ns), *x.gpm->sm_active_pct});
        if (x.gpm->tensor_active_pct) tensor.push_back({t(s.mono_ns), *x.gpm->tensor_active_pct});
        if (x.gpm->dram_active_pct) dram.push_back({t(s.mono_ns), *x.gpm->dram_active_pct});
      }
    }
    std::string p = fmt::format("gpu{}.", g);
    out.push_back({p + "utilization_pct", "%", std::move(util)});
    if (!fine.empty()) out.push_back({p + "utilization_fine_pct", "%", std::move(fine)});
    out.push_back({p + "memory_used_mib", "MiB", std::move(mem)});
    if (!power.empty()) out.push_back({p + "power_w", "W", std::move(power)});
    if (!clock.empty()) out.push_back({p + "sm_clock_mhz", "MHz", std::move(clock)});
    if (!sm_active.empty()) out.push_back({p + "sm_active_pct", "%", std::move(sm_active)});
    if (!tensor.empty()) out.push_back({p + "tensor_active_pct", "%", std::move(tensor)});
    if (!dram.empty()) out.push_back({p + "dram_active_pct", "%", std::move(dram)});
  }
  std::vector<SeriesPoint> busy, iowait, psi_io;
  for (const auto& s : samples) {
    if (s.host.cpu) {
      busy.push_back({t(s.mono_ns), s.host.cpu->busy_pct});
      iowait.push_back({t(s.mono_ns), s.host.cpu->iowait_pct});
    }
    if (s.host.psi_io) psi_io.push_back({t(s.mono_ns), s.host.psi_io->some_avg10_pct});
  }
  out.push_back({"host.cpu_busy_pct", "%", std::move(busy)});
  out.push_back({"host.cpu_iowait_pct", "%", std::move(iowait)});
  if (!psi_io.empty()) out.push_back({"host.psi_io_some_avg10_pct", "%", std::move(psi_io)});
  return out;
}

}  // namespace stallscope::diagnose
