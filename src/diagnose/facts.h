#pragma once
// The one facts model of the verdict rules: what a run (a recording, phase events and the
// report built from them) or a profiler trace tells the rules, derived once. Rules are pure
// functions of Facts (verdict.h). Shares, utilizations and CPU use are fractions (0..1; CPU use
// in CPUs, so 1.0 is one busy core): percentages are converted here, once, and back only in
// rendered text. A "share" is a fraction of the steady step's wall time (of a profiled trace's
// window: its steps); every other fraction is named for what it is a fraction of (issue 39):
// `*_fraction` of samples (running, blocked, throttled) or of the host's CPU time (iowait).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analysis/ledger.h"
#include "analysis/phases.h"
#include "diagnose/run_report.h"
#include "diagnose/trace_facts.h"

namespace stallscope::diagnose {

/// What a rule needs to know about one GPU, derived once from the summary and static info.
struct GpuFacts {
  uint32_t index = 0;
  std::string name;
  int64_t samples = 0;
  double util_mean = 0;                     ///< busy fraction of the time (NVML utilization)
  std::optional<double> sm_clock_fraction;  ///< mean SM clock / max SM clock
  std::optional<double> power_fraction;     ///< mean power / enforced power limit
  double memory_used_max_mib = 0;
  std::optional<double> memory_total_mib;
  std::optional<double> memory_used_fraction;  ///< max used / total
  double throttled_fraction = 0;  ///< samples with a slowdown clock-event reason / samples
  /// Slowdown reasons ("sw_power_cap", "hw_thermal", ...) with their sample counts, most first.
  std::vector<std::pair<std::string, int64_t>> throttle_reasons;
  /// GPM hardware counters (Hopper+), fractions 0..1, means over the GPM windows inside the
  /// steady state; absent without GPM or without a whole window there.
  std::optional<double> sm_active;
  std::optional<double> sm_occupancy;
  std::optional<double> tensor_active;
  std::optional<double> dram_active;
  std::optional<double> fp32_active;
  std::optional<double> fp16_active;
  int64_t gpm_windows = 0;
};

/// Whether the job used the GPU (issue 26: a job that never initialised CUDA gets no GPU class).
enum class GpuUsage : uint8_t {
  kUnknown,  ///< nothing says either way (an old run, a job without the hooks)
  kUsed,     ///< a CUDA context, GPU phase times, or the job's process in an NVML process list
  kNotUsed,  ///< the hooks saw no CUDA context, or torch has no CUDA
};

/// Everything the rules read. Pure data, built by BuildRunFacts or BuildTraceFacts.
struct Facts {
  // --- host CPUs ------------------------------------------------------------------------------
  /// min(host CPUs, ceil(cgroup quota), torch CPU affinity); ≥ 1.
  int64_t allowed_cpus = 1;
  uint32_t host_cpus = 0;  ///< 0: unknown (a trace)
  std::optional<double> cgroup_quota_cpus;
  std::optional<int64_t> affinity_cpus;
  uint64_t cgroup_nr_throttled = 0;  ///< sum of cpu.stat nr_throttled deltas
  double wall_s = 0;
  /// CPUs used by processes outside the job's tree (host busy CPUs − the job's CPU), mean over
  /// the samples that have both; empty for a trace or a recording without them.
  std::optional<double> other_cpu;
  /// Phase records of events.bin that cannot be this run's (corrupt bytes), skipped on load.
  int64_t corrupt_records = 0;
  /// Processes that recorded no phase because their ring could not be created (disk full), one
  /// message each (phase::EventLog::ring_errors): their steps and phases are missing.
  std::vector<std::string> unrecorded_processes;

  // --- steps and phases -----------------------------------------------------------------------
  int64_t ranks = 0;  ///< ranks with steps
  int64_t steps = 0;  ///< over all ranks
  double step_mean_s = 0;
  double steps_per_s = 0;  ///< per rank (mean of ranks)
  /// Per-rank step series and per-phase statistics (the periodic, loader-stall and straggler
  /// rules read the steps themselves).
  analysis::PhaseAnalysis phases;
  /// Where the steady step goes, per rank and for the job (analysis/ledger.h): what the verdict
  /// ranks its principal finding by. phase_share and the CUDA-event facts below are its job's.
  analysis::Ledger ledger;
  /// Share of step time per phase, all ranks pooled; includes "other". In lockstep (every rank
  /// has a measured comm_wait: DDP) the share every rank spends (the minimum over ranks): what
  /// one rank does beyond the others is the straggler rule's, not a job-wide cost.
  std::map<std::string, double> phase_share;
  bool lockstep = false;  ///< every rank with steps has a comm_wait phase
  /// The compute phases' shares in phase_share are GPU time (CUDA events) where it exceeds the
  /// host time; what they took from other phases' shares is in gpu_moved_share.
  bool compute_on_gpu = false;
  /// With compute_on_gpu: the compute phases' GPU time over the steady step time (pooled as the
  /// shares; at most 1): how busy CUDA events say the GPU was. They outrank NVML's averages.
  std::optional<double> gpu_busy_by_events;
  double host_compute_share = 0;  ///< the compute phases' host share before that
  double gpu_moved_share = 0;
  /// The job's host-sync call sites, most frequent first: "train.py:560 (item, 20×)", and the
  /// same sites as the hooks noted them (rank, first seen: periodic side work names its own).
  std::vector<std::string> sync_sites;
  std::vector<rundir::SyncSite> sync_site_rows;
  double host_syncs_per_step = 0;
  std::map<std::string, double> host_syncs_by_counter;  ///< per step

  // --- processes ------------------------------------------------------------------------------
  int64_t main_procs = 0;    ///< kMain / kRank processes seen
  int64_t worker_procs = 0;  ///< kDataLoaderWorker processes seen
  double main_cpu = 0;       ///< mean over main processes, CPUs (1 = one core)
  double main_running_fraction = 0;
  double main_blocked_fraction = 0;
  double worker_cpu_sum = 0;  ///< concurrent workers' CPU summed, mean over samples, CPUs
  double worker_cpu_min = 0;  ///< the least busy worker's mean, CPUs
  double worker_running_fraction = 0;
  double worker_blocked_fraction = 0;
  uint32_t worker_threads_max = 0;             ///< the most threads any worker ran
  uint64_t main_read_bytes = 0;                ///< storage reads of the main processes
  uint64_t worker_read_bytes = 0;              ///< storage reads of the workers
  std::optional<double> job_runnable_threads;  ///< sum of threads_running, mean over samples
  std::optional<double> host_procs_running;    ///< /proc/loadavg, mean
  double job_nvcsw_per_s = 0;                  ///< involuntary switches of the job's processes
  std::optional<double> iowait_fraction;       ///< host CPU time in iowait, mean
  std::optional<double> psi_io_fraction;       ///< PSI io some avg10, mean
  std::optional<uint64_t> shm_total_bytes;     ///< /dev/shm, last sample
  std::optional<uint64_t> shm_used_bytes;

  std::vector<rundir::TorchProcess> torch;
  std::optional<rundir::LoaderInfo>
      loader;  ///< the training loader: the first one of the lowest rank

  // --- GPUs -----------------------------------------------------------------------------------
  bool has_gpu = false;  ///< GPUs were sampled and the job did not go without them (gpu_use)
  GpuUsage gpu_use = GpuUsage::kUnknown;
  std::string gpu_use_why;  ///< what decided gpu_use, for people ("no CUDA context was created")
  /// torch.get_float32_matmul_precision() of the job ("highest": FP32 matmuls without TF32).
  std::optional<std::string> float32_matmul_precision;
  int64_t idle_gpus = 0;          ///< kNotUsed: the GPUs sampled and left out of `gpus`
  std::vector<GpuFacts> gpus;     ///< util_mean from the driver's sub-second samples when recorded
  std::optional<double> util_cv;  ///< utilization CV across GPUs (std/mean, seed 002)
  std::optional<double> memory_cv;  ///< memory-use CV across GPUs
  /// The GPU timeline of a profiler trace; empty for a live run.
  std::optional<TraceFacts> trace;

  // --- what the verdict's evidence and caveats read (issue 39: nothing edits a verdict after
  // Diagnose) ---------------------------------------------------------------------------------
  /// Where the ranks' Python was (stacks.jsonl placed in phases: AttributeStacks).
  StackReport stacks;
  /// events.bin could not be read whole: why (rundir::EventLog::events_bin_damage); empty when
  /// sound. `phases_lost`: no ring in phases/ held the phases either.
  std::string events_damage;
  bool phases_lost = false;
  /// The steady state (RunLife): steps were measured, and whether they are enough for a sure
  /// verdict (steady_sure_s and steady_sure_steps), with how long and how many they were.
  bool has_steps = false;
  bool steady_sure = true;
  double steady_s = 0;
  int64_t steady_steps = 0;

  [[nodiscard]] double Share(std::string_view phase) const;
  /// CUDA events say the GPU was busy for most of the steady step (gpu_busy_by_events).
  [[nodiscard]] bool GpuBusyByEvents() const;
  /// Other work used ≥ busy_host_other_share of the host's CPUs (and ≥ busy_host_other_cpus).
  [[nodiscard]] bool HostBusy() const;
  /// The CPUs `job_threads` CPU-bound threads of the job would get: allowed_cpus on a quiet
  /// host. On a busy host (other work taken as other_cpu CPU-bound threads) what the other work
  /// leaves, or when job and others want more CPUs than the host has, the job's fair share of
  /// them (the scheduler splits CPU time between runnable threads): min(allowed, max(host −
  /// other, host × job / (job + other))); at least 1. What a fix can count on.
  [[nodiscard]] double JobCpus(double job_threads) const;
  /// Loader num_workers (0 when unknown and no worker process was seen).
  [[nodiscard]] int64_t NumWorkers() const;
};

/// The facts of a recorded run.
[[nodiscard]] Facts BuildRunFacts(const rundir::RunData& data, const RunReport& report);

/// The facts of a profiler trace: its timeline, the per-step phases derived from it, and the
/// loaders its DataLoader iterators name. Host CPUs and processes stay unknown.
[[nodiscard]] Facts BuildTraceFacts(const TraceFacts& trace, const analysis::PhaseAnalysis& phases,
                                    const std::vector<rundir::LoaderInfo>& loaders);

}  // namespace stallscope::diagnose
