#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "diagnose/findings.h"
#include "diagnose/run_report.h"
#include "diagnose/thresholds.h"

namespace stallscope::diagnose {

/// What a rule needs to know about one GPU, derived once from the summary and static info.
struct GpuFacts {
  uint32_t index = 0;
  std::string name;
  int64_t samples = 0;
  double util_mean_pct = 0;
  std::optional<double> sm_clock_fraction;  ///< mean SM clock / max SM clock
  std::optional<double> power_fraction;     ///< mean power / enforced power limit
  double memory_used_max_mib = 0;
  std::optional<double> memory_total_mib;
  std::optional<double> memory_used_fraction;  ///< max used / total
  double throttled_share = 0;  ///< samples with a slowdown clock-event reason / samples
  /// Slowdown reasons ("sw_power_cap", "hw_thermal", ...) with their sample counts, most first.
  std::vector<std::pair<std::string, int64_t>> throttle_reasons;
};

/// One process's info("torch") item (python/stallscope/auto.py).
struct TorchProcess {
  int32_t pid = 0;
  int32_t rank = 0;
  std::optional<int64_t> intra_op_threads;
  std::optional<int64_t> cpu_count;
  std::optional<int64_t> cpu_affinity;  ///< len(os.sched_getaffinity(0))
  std::optional<std::string> omp_num_threads_env;
};

/// Facts derived once from a run and shared by every rule. Pure data; indices point into
/// RunReport::processes.
struct RuleContext {
  /// min(host CPUs, ceil(cgroup quota), torch CPU affinity); ≥ 1.
  int64_t allowed_cpus = 1;
  uint32_t host_cpus = 0;
  std::optional<double> cgroup_quota_cpus;
  std::optional<int64_t> affinity_cpus;
  uint64_t cgroup_nr_throttled = 0;  ///< sum of cpu.stat nr_throttled deltas

  int64_t ranks = 0;  ///< ranks with steps
  int64_t steps = 0;  ///< over all ranks
  double step_mean_s = 0;
  double steps_per_s = 0;  ///< per rank (mean of ranks)
  /// Share of step time per phase, all ranks pooled; includes "other". In lockstep (every rank
  /// has a measured comm_wait: DDP) the share every rank spends (the minimum over ranks): what
  /// one rank does beyond the others is the straggler rule's, not a job-wide cost.
  std::map<std::string, double> phase_share;
  bool lockstep = false;  ///< every rank with steps has a comm_wait phase
  /// The compute phases' shares in phase_share are GPU time (CUDA events) where it exceeds the
  /// host time; what they took from other phases' shares is in gpu_moved_share.
  bool compute_on_gpu = false;
  double host_compute_share = 0;  ///< the compute phases' host share before that
  double gpu_moved_share = 0;
  /// The job's host-sync call sites, most frequent first: "train.py:560 (item, 20×)".
  std::vector<std::string> sync_sites;
  double host_syncs_per_step = 0;
  std::map<std::string, double> host_syncs_by_counter;  ///< per step

  std::vector<size_t> main_rows;    ///< "main" / "rank N"
  std::vector<size_t> worker_rows;  ///< "dataloader worker"
  double main_cpu_pct = 0;          ///< mean over main rows (100 = one core)
  double main_running_share = 0;
  double main_blocked_share = 0;
  double worker_cpu_sum_pct = 0;  ///< concurrent workers' CPU summed, mean over samples
  double worker_cpu_min_pct = 0;  ///< the least busy worker's mean
  double worker_blocked_share = 0;
  std::optional<double> job_runnable_threads;  ///< sum of threads_running, mean over samples
  std::optional<double> host_procs_running;    ///< /proc/loadavg, mean
  double job_nvcsw_per_s = 0;                  ///< involuntary switches of the job's processes
  std::optional<double> iowait_pct;            ///< host mean
  std::optional<double> psi_io_pct;            ///< PSI io some avg10, mean
  std::optional<uint64_t> shm_total_bytes;     ///< /dev/shm, last sample
  std::optional<uint64_t> shm_used_bytes;

  std::vector<TorchProcess> torch;
  std::optional<LoaderInfo> loader;  ///< the training loader: the first one of the lowest rank

  bool has_gpu = false;
  std::vector<GpuFacts> gpus;

  [[nodiscard]] double Share(const std::string& phase) const;
  /// Loader num_workers (0 when unknown and no worker process was seen).
  [[nodiscard]] int64_t NumWorkers() const;
};

[[nodiscard]] RuleContext BuildRuleContext(const RunData& data, const RunReport& report);

/// A rule: one finding class (or a family deciding between two), nullopt when it does not apply.
using Rule = std::optional<Finding> (*)(const RunData&, const RunReport&, const RuleContext&);
struct NamedRule {
  std::string_view name;
  Rule fn = nullptr;
};
/// Every rule, in evaluation order (verdict_rules.cc).
[[nodiscard]] std::span<const NamedRule> Rules();

/// Principal = largest cost_fraction × confidence, gpu_bound only when no other finding costs
/// ≥ kThresholds.min_cost; the rest are secondaries by cost, descending.
[[nodiscard]] Verdict RankFindings(std::vector<Finding> findings);

/// Runs every rule over the run and picks the principal finding: the one with the largest
/// cost_fraction × confidence, with gpu_bound only when nothing else costs ≥ 5% of wall time.
[[nodiscard]] Verdict Diagnose(const RunData& data, const RunReport& report);

}  // namespace stallscope::diagnose
