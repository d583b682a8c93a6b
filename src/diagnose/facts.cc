// Builds the rules' facts (facts.h) from a recorded run or a profiler trace: the one place
// where percentages become fractions and report rows become numbers.
#include "diagnose/facts.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "base/json_fields.h"
#include "base/stats.h"
#include "diagnose/rule_util.h"

namespace stallscope::diagnose {
namespace {

std::optional<double> Fraction(const std::optional<double>& pct) {
  if (!pct) return std::nullopt;
  return *pct / 100.0;
}

constexpr std::string_view kHostSyncPrefix = "host_sync";  // python/stallscope/_hooks.py

/// Host-wide facts: CPUs, cgroup quota, runnable counts, I/O wait.
void HostFacts(const rundir::RunData& data, std::span<const sample::Sample> samples, Facts& c) {
  c.host_cpus = data.recording.header.cpu_count;
  RunningStats procs_running, iowait, psi_io, job_runnable;
  for (const auto& s : samples) {
    if (s.host.cpu_count > 0) c.host_cpus = s.host.cpu_count;
    if (s.host.cgroup_cpu_quota_cpus) c.cgroup_quota_cpus = s.host.cgroup_cpu_quota_cpus;
    if (s.host.cgroup_nr_throttled_delta)
      c.cgroup_nr_throttled += *s.host.cgroup_nr_throttled_delta;
    if (s.host.procs_running) procs_running.Add(*s.host.procs_running);
    if (s.host.cpu) iowait.Add(s.host.cpu->iowait_pct / 100.0);
    if (s.host.psi_io) psi_io.Add(s.host.psi_io->some_avg10_pct / 100.0);
    if (s.host.shm_total_bytes) {
      c.shm_total_bytes = s.host.shm_total_bytes;
      c.shm_used_bytes = s.host.shm_used_bytes;
    }
    if (s.has_processes && !s.processes.empty()) {
      double running = 0;
      for (const auto& p : s.processes) running += p.threads_running;
      job_runnable.Add(running);
    }
  }
  if (procs_running.count() > 0) c.host_procs_running = procs_running.mean();
  if (iowait.count() > 0) c.iowait_fraction = iowait.mean();
  if (psi_io.count() > 0) c.psi_io_fraction = psi_io.mean();
  if (job_runnable.count() > 0) c.job_runnable_threads = job_runnable.mean();

  for (const auto& t : c.torch) {
    if (t.cpu_affinity && *t.cpu_affinity > 0) {
      c.affinity_cpus = std::min(c.affinity_cpus.value_or(*t.cpu_affinity), *t.cpu_affinity);
    }
    if (c.host_cpus == 0 && t.cpu_count) c.host_cpus = static_cast<uint32_t>(*t.cpu_count);
  }
  int64_t allowed = c.host_cpus > 0 ? c.host_cpus : 1;
  if (c.cgroup_quota_cpus && *c.cgroup_quota_cpus > 0) {
    allowed = std::min(allowed, static_cast<int64_t>(std::ceil(*c.cgroup_quota_cpus - 1e-9)));
  }
  if (c.affinity_cpus) allowed = std::min(allowed, *c.affinity_cpus);
  c.allowed_cpus = std::max<int64_t>(1, allowed);
}

/// Other work on the host: per sample, the host's busy CPUs less the job tree's CPU. A sample
/// where a process of the job has no CPU rate yet (first seen) would count the job's new process
/// as other work: skipped.
void OtherCpuFacts(std::span<const sample::Sample> samples, Facts& c) {
  RunningStats other;
  for (const auto& s : samples) {
    uint32_t cpus = s.host.cpu_count > 0 ? s.host.cpu_count : c.host_cpus;
    if (!s.host.cpu || !s.has_processes || cpus == 0) continue;
    double job = 0;
    bool complete = true;
    for (const auto& p : s.processes) {
      if (!p.cpu_pct) complete = false;
      job += p.cpu_pct.value_or(0) / 100.0;
    }
    if (!complete) continue;
    double busy = s.host.cpu->busy_pct / 100.0 * static_cast<double>(cpus);
    other.Add(std::max(0.0, busy - job));
  }
  if (other.count() > 0) c.other_cpu = other.mean();
}

/// Step and phase facts pooled over ranks: the step ledger (analysis/ledger.h) and, from it,
/// the phase shares the rules read.
void StepFacts(const analysis::PhaseAnalysis& phases, Facts& c) {
  double rate_sum = 0;
  for (const auto& r : phases.ranks) {
    if (r.count <= 0) continue;
    ++c.ranks;
    c.steps += r.count;
    rate_sum += r.per_second;
  }
  if (c.ranks > 0) c.steps_per_s = rate_sum / static_cast<double>(c.ranks);
  c.ledger = analysis::BuildLedger(phases, kThresholds);
  const analysis::StepLedger& job = c.ledger.job;
  c.step_mean_s = job.step_s;
  c.lockstep = c.ledger.lockstep;
  c.phase_share = job.phase_share;
  c.compute_on_gpu = job.compute_on_gpu;
  c.gpu_busy_by_events = job.gpu_busy;
  c.host_compute_share = job.host_compute;
  c.gpu_moved_share = job.host_wait;
  if (c.steps > 0) {
    // Sum counts as integers, divide once: ten steps of 1/10 must make exactly 1 per step.
    std::map<std::string, int64_t> totals;
    int64_t all = 0;
    for (const auto& r : phases.ranks) {
      for (const auto& s : r.steps) {
        for (const auto& [name, n] : s.counters) {
          if (!std::string_view(name).starts_with(kHostSyncPrefix)) continue;
          totals[name] += n;
          all += n;
        }
      }
    }
    auto steps = static_cast<double>(c.steps);
    for (const auto& [name, n] : totals) {
      c.host_syncs_by_counter[name] = static_cast<double>(n) / steps;
    }
    c.host_syncs_per_step = static_cast<double>(all) / steps;
  }
}

/// Main-process and worker facts from the process table and the per-sample process list.
void ProcessFacts(std::span<const sample::Sample> samples, const RunReport& report, Facts& c) {
  std::vector<const ProcessRow*> mains, workers;
  std::set<int32_t> worker_pids;
  for (const ProcessRow& p : report.processes) {
    ProcessRoleKind kind = p.role.kind;
    if (kind == ProcessRoleKind::kMain || kind == ProcessRoleKind::kRank) {
      mains.push_back(&p);
      c.main_read_bytes += p.read_bytes;
    }
    if (kind == ProcessRoleKind::kDataLoaderWorker) {
      workers.push_back(&p);
      worker_pids.insert(p.pid);
      c.worker_read_bytes += p.read_bytes;
      c.worker_threads_max = std::max(c.worker_threads_max, p.threads_max);
    }
    if (kind != ProcessRoleKind::kLauncher) c.job_nvcsw_per_s += p.nonvoluntary_switches_per_s;
  }
  c.main_procs = static_cast<int64_t>(mains.size());
  c.worker_procs = static_cast<int64_t>(workers.size());
  auto mean_of = [](const std::vector<const ProcessRow*>& rows, auto field) {
    double sum = 0;
    for (const ProcessRow* p : rows) sum += field(*p);
    return rows.empty() ? 0.0 : sum / static_cast<double>(rows.size());
  };
  c.main_cpu = mean_of(mains, [](const ProcessRow& p) { return p.cpu_mean_pct; }) / 100.0;
  c.main_running_fraction = mean_of(mains, [](const ProcessRow& p) { return p.running_fraction; });
  c.main_blocked_fraction = mean_of(mains, [](const ProcessRow& p) { return p.blocked_fraction; });
  c.worker_running_fraction =
      mean_of(workers, [](const ProcessRow& p) { return p.running_fraction; });
  c.worker_blocked_fraction =
      mean_of(workers, [](const ProcessRow& p) { return p.blocked_fraction; });
  bool first = true;
  for (const ProcessRow* p : workers) {
    if (p->samples < 2) continue;  // a worker seen once has no CPU rate yet
    double cpu = p->cpu_mean_pct / 100.0;
    c.worker_cpu_min = first ? cpu : std::min(c.worker_cpu_min, cpu);
    first = false;
  }
  // Non-persistent workers are new processes every epoch: sum the CPU of the workers alive at
  // the same moment, not the per-pid means.
  RunningStats concurrent;
  for (const auto& s : samples) {
    double sum = 0;
    bool any = false;
    for (const auto& p : s.processes) {
      if (!worker_pids.count(p.pid) || !p.cpu_pct) continue;
      sum += *p.cpu_pct;
      any = true;
    }
    if (any) concurrent.Add(sum);
  }
  c.worker_cpu_sum = concurrent.count() > 0 ? concurrent.mean() / 100.0 : 0;
}

void GpuFactsOf(const rundir::RunData& data, std::span<const sample::Sample> samples,
                const RunReport& report, Facts& c) {
  const auto& statics = data.recording.header.gpus;
  for (const auto& g : report.machine.gpus) {
    if (g.samples <= 0) continue;
    GpuFacts f;
    f.index = g.index;
    f.name = g.name;
    f.samples = g.samples;
    // The driver's sub-second samples are timed to the steady window (the polled value averages
    // up to a second back, into the warm-up before it); polled when there are too few.
    constexpr int64_t kFineEnough = 3;
    f.util_mean =
        (g.util_fine_pct.count() >= kFineEnough ? g.util_fine_pct : g.util_pct).mean() / 100.0;
    const gpu::GpuStatic* st = nullptr;
    for (const auto& s : statics) {
      if (s.index == g.index) st = &s;
    }
    if (st && st->sm_clock_max_mhz && *st->sm_clock_max_mhz > 0 && g.sm_clock_mhz.count() > 0) {
      f.sm_clock_fraction = g.sm_clock_mhz.mean() / *st->sm_clock_max_mhz;
    }
    if (st && st->power_limit_mw && *st->power_limit_mw > 0 && g.power_w.count() > 0) {
      f.power_fraction = g.power_w.mean() * 1000.0 / *st->power_limit_mw;
    }
    f.memory_used_max_mib = g.memory_used_mib.max();
    f.memory_total_mib = g.memory_total_mib;
    if (!f.memory_total_mib && st && st->mem_total_bytes) {
      f.memory_total_mib = static_cast<double>(*st->mem_total_bytes) / static_cast<double>(kMiB);
    }
    if (f.memory_total_mib && *f.memory_total_mib > 0 && g.memory_used_mib.count() > 0) {
      f.memory_used_fraction = f.memory_used_max_mib / *f.memory_total_mib;
    }
    f.throttled_fraction =
        static_cast<double>(g.throttled_samples) / static_cast<double>(g.samples);
    auto fraction = [](const RunningStats& pct) -> std::optional<double> {
      if (pct.count() == 0) return std::nullopt;
      return pct.mean() / 100.0;
    };
    f.gpm_windows = g.gpm_sm_active_pct.count();
    f.sm_active = fraction(g.gpm_sm_active_pct);
    f.sm_occupancy = fraction(g.gpm_sm_occupancy_pct);
    f.tensor_active = fraction(g.gpm_tensor_active_pct);
    f.dram_active = fraction(g.gpm_dram_active_pct);
    f.fp32_active = fraction(g.gpm_fp32_active_pct);
    f.fp16_active = fraction(g.gpm_fp16_active_pct);
    c.gpus.push_back(std::move(f));
  }
  // Slowdown reasons by name (summary.cc's mask: not idle, app clocks or display clocks).
  constexpr uint64_t kSlowdown = gpu::kClockEventSwPowerCap | gpu::kClockEventHwSlowdown |
                                 gpu::kClockEventSwThermal | gpu::kClockEventHwThermal |
                                 gpu::kClockEventHwPowerBrake;
  for (GpuFacts& f : c.gpus) {
    std::map<std::string, int64_t> counts;
    for (const auto& s : samples) {
      if (f.index >= s.gpus.size() || s.gpus[f.index].lost) continue;
      const auto& mask = s.gpus[f.index].clock_event_reasons;
      if (!mask) continue;
      for (const auto& r : gpu::kClockEventReasons) {
        if ((*mask & r.bit & kSlowdown) != 0) ++counts[std::string(r.name)];
      }
    }
    f.throttle_reasons.assign(counts.begin(), counts.end());
    std::stable_sort(f.throttle_reasons.begin(), f.throttle_reasons.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
  }
  c.has_gpu = !c.gpus.empty();
}

/// Whether the job used the GPU (GpuUsage). A CUDA context (info "cuda_init"), GPU phase times or
/// the job's process in an NVML process list say it did. It did not when the hooks (which note
/// every CUDA context created after torch's import, and the backends at the first step) saw
/// none, when its torch has no CUDA, or (runs before those notes) when compute phases ran on a
/// CUDA torch without one GPU time.
void GpuUseFacts(const rundir::RunData& data, const RunReport& report, Facts& c) {
  bool spans = false, compute = false;
  for (const auto& p : report.phases.phases) {
    spans = spans || p.gpu.has_value();
    compute = compute || analysis::IsComputePhase(p.name);
  }
  std::set<int32_t> job;
  for (const auto& row : report.processes) job.insert(row.pid);
  bool listed = false;
  for (const auto& s : data.recording.samples) {
    for (const auto& g : s.gpus) {
      for (const auto& p : g.processes) listed = listed || job.count(static_cast<int32_t>(p.pid));
    }
  }
  const rundir::JobInfo& info = report.job_info;
  for (const rundir::BackendsInfo& b : info.backends) {
    if (!b.float32_matmul_precision) continue;
    c.float32_matmul_precision = b.float32_matmul_precision;
    break;
  }
  const bool context = !info.cuda_init.empty() ||
                       std::any_of(info.backends.begin(), info.backends.end(), [](const auto& b) {
                         return b.cuda_initialized.value_or(false);
                       });
  if (context || spans || listed) {
    c.gpu_use = GpuUsage::kUsed;
    return;
  }
  bool cuda_torch = false, cpu_torch = false;
  for (const auto& p : report.python) {
    for (const auto& [phase, how] : p.mechanisms) {
      if (phase != "gpu_time") continue;
      cuda_torch = cuda_torch || how == "cuda events";
      cpu_torch = cpu_torch || how.find("without CUDA") != std::string::npos;
    }
  }
  if (!info.backends.empty()) {
    c.gpu_use = GpuUsage::kNotUsed;
    c.gpu_use_why = "no process of the job created a CUDA context";
  } else if (cpu_torch && !cuda_torch) {
    c.gpu_use = GpuUsage::kNotUsed;
    c.gpu_use_why = "its torch is built without CUDA";
  } else if (cuda_torch && compute && report.phases.ranks.size() > 0) {
    c.gpu_use = GpuUsage::kNotUsed;
    c.gpu_use_why = "no compute phase ran on the GPU (no CUDA-event time)";
  }
}

/// A profiler trace has no samples: its GPUs are busy for the share its timeline shows
/// (the same "a kernel was running" meaning as NVML's utilization).
void TraceGpuFacts(const TraceFacts& trace, Facts& c) {
  for (const auto& g : trace.gpus) {
    GpuFacts f;
    f.index = static_cast<uint32_t>(g.device);
    f.name = g.name;
    f.samples = 1;
    f.util_mean = g.busy_share;
    c.gpus.push_back(std::move(f));
  }
  c.has_gpu = !c.gpus.empty();
}

void LoaderFacts(const std::vector<rundir::LoaderInfo>& loaders, Facts& c) {
  for (const auto& l : loaders) {
    if (!c.loader || l.rank < c.loader->rank) c.loader = l;
  }
}

}  // namespace

bool Facts::GpuBusyByEvents() const {
  return gpu_busy_by_events && *gpu_busy_by_events >= kThresholds.gpu_busy_by_events.value;
}

double Facts::Share(std::string_view phase) const {
  auto it = phase_share.find(std::string(phase));
  return it == phase_share.end() ? 0.0 : it->second;
}

bool Facts::HostBusy() const {
  if (!other_cpu || host_cpus == 0) return false;
  return *other_cpu >= kThresholds.busy_host_other_cpus.value &&
         *other_cpu >= kThresholds.busy_host_other_share.value * static_cast<double>(host_cpus);
}

double Facts::JobCpus(double job_threads) const {
  auto allowed = static_cast<double>(allowed_cpus);
  if (!HostBusy()) return allowed;
  auto host = static_cast<double>(host_cpus);
  double left = host - *other_cpu;
  double fair = host * job_threads / (job_threads + *other_cpu);
  return std::max(1.0, std::min(allowed, std::max(left, fair)));
}

int64_t Facts::NumWorkers() const {
  if (loader && loader->num_workers) return *loader->num_workers;
  // No loader info (hooks off): infer from the processes seen.
  return worker_procs;
}

Facts BuildRunFacts(const rundir::RunData& data, const RunReport& report) {
  Facts c;
  c.torch = data.info.torch;
  c.wall_s = report.wall_s;
  c.phases = report.phases;
  // The sampled facts over the steady window, as the report's statistics (issue 26).
  const std::span<const sample::Sample> steady = SteadySamples(data.recording, report);
  HostFacts(data, steady, c);
  OtherCpuFacts(steady, c);
  c.corrupt_records = data.implausible_events;
  c.unrecorded_processes = data.events.ring_errors;
  StepFacts(c.phases, c);
  ProcessFacts(steady, report, c);
  GpuFactsOf(data, steady, report, c);
  GpuUseFacts(data, report, c);
  if (c.gpu_use == GpuUsage::kNotUsed && !c.gpus.empty()) {
    // No GPU rule speaks for a job that ran on the CPU: its GPUs are somebody else's (or idle).
    c.idle_gpus = static_cast<int64_t>(c.gpus.size());
    c.gpus.clear();
    c.has_gpu = false;
  }
  c.util_cv = Fraction(report.machine.util_balance.cv_pct);
  c.memory_cv = Fraction(report.machine.memory_balance.cv_pct);
  LoaderFacts(report.loaders, c);
  for (const auto& s : report.sync_sites) c.sync_sites.push_back(SyncSiteText(s));
  c.sync_site_rows = report.sync_sites;
  c.stacks = report.stacks;
  c.events_damage = data.events.events_bin_damage;
  c.phases_lost = data.events.events.empty();
  c.has_steps = report.life.has_steps;
  c.steady_sure = report.life.sure;
  c.steady_s = report.life.steady_s;
  c.steady_steps = report.life.steady_steps;
  return c;
}

Facts BuildTraceFacts(const TraceFacts& trace, const analysis::PhaseAnalysis& phases,
                      const std::vector<rundir::LoaderInfo>& loaders) {
  Facts c;
  c.phases = phases;
  for (const auto& rs : phases.ranks) c.wall_s += rs.duration_s;
  StepFacts(c.phases, c);
  TraceGpuFacts(trace, c);
  c.trace = trace;
  LoaderFacts(loaders, c);
  return c;
}

}  // namespace stallscope::diagnose
