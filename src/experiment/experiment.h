#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "analysis/detect.h"
#include "analysis/step_rate.h"
#include "base/result.h"
#include "diagnose/run_analysis.h"
#include "diagnose/run_report.h"

namespace stallscope::experiment {

/// One phase of the measured rank, per step.
struct PhasePerStep {
  std::string name;
  double ms_per_step = 0;
  double share = 0;
};

/// One rank of a run: its steady steps and the phases it recorded (passes --ranks).
struct RankDigest {
  int32_t rank = 0;
  int64_t steps = 0;  ///< steady steps
  double median_step_s = 0;
  double variation_ratio = 0;  ///< std/mean of the steady steps (seed 003)
  /// Every phase the rank recorded over the run: name, count, total seconds; largest first.
  std::vector<std::tuple<std::string, int64_t, double>> phases;
  /// Each phase's median seconds per steady step (0 for a step without it), by name: what the
  /// rank spends at an ordinary step, its slow steps left out.
  std::map<std::string, double> median_phase_s;
};

/// One GPU the job used (an NVML process list named one of the job's processes; every GPU when
/// the driver names none): its mean utilization over the run.
struct GpuUse {
  uint32_t index = 0;
  double util_pct = 0;
};

/// One run reduced to what experiments compare (`compare`, `passes`, `sweep`).
struct RunDigest {
  std::string dir;
  rundir::RunMeta meta;
  double wall_s = 0;
  /// Steady-state step durations (analysis::StepSeconds) of rank 0, else the rank with the most
  /// steps: start-up and warm-up (diagnose::RunLife) are left out of every number below.
  std::vector<double> step_s;
  int64_t warmup_steps = 0;  ///< that rank's steps left out before them (warm-up, skipped)
  diagnose::RunLife life;
  std::optional<analysis::RateEstimate> rate;
  std::optional<int64_t> batch_size;  ///< of the main DataLoader (the one of the measured rank)
  std::optional<double> samples_per_s;
  std::vector<PhasePerStep> phases;               ///< largest first, "other" included
  std::optional<double> data_share;               ///< data_loading's share of the step
  double host_syncs_per_step = 0;                 ///< host_sync.* counters over the steady steps
  std::optional<double> gpu_util_pct;             ///< mean over GPUs and samples
  std::vector<GpuUse> job_gpus;                   ///< by index
  std::vector<RankDigest> ranks;                  ///< every rank that marked steps, by rank
  std::vector<analysis::PeriodicPhase> periodic;  ///< analysis::FindPeriodicPhases, every rank
  analysis::Ledger ledger;                        ///< where the steady step goes (the job's)
  std::optional<uint64_t> peak_rss_bytes;         ///< the job's process tree, at its largest sample
  std::optional<double> job_cpus;                 ///< job CPU time / wall time
  /// CPUs other processes on the host used during the run (diagnose::Facts::other_cpu): a run
  /// beside other work is slower for it, and the step intervals do not show that.
  std::optional<double> other_cpus;
  int64_t allowed_cpus = 0;
  std::string gpus;    ///< "2× NVIDIA H100 80GB HBM3", "" without GPUs
  std::string driver;  ///< GPU driver version
  std::optional<rundir::LoaderInfo> loader;
  std::optional<diagnose::Finding> principal;
  std::vector<std::string> caveats;
  bool busy_host = false;  ///< diagnose::Verdict::busy_host: other work took CPUs (a caveat says)
  rundir::ExperimentNote experiment;
  std::vector<std::string> warnings;
};

/// The digest of a run and its analysis (diagnose::AnalyzeRun): steady-state rates and phase
/// shares. `skip_through_step` > 0 also leaves out the steady steps numbered up to it
/// (StepRecord::index: pass C's real batches), unless fewer than 3 steps would be left.
[[nodiscard]] RunDigest DigestRun(const rundir::RunData& data,
                                  const diagnose::RunAnalysis& analysis,
                                  int64_t skip_through_step = 0);

/// diagnose::LoadAndAnalyzeRun + DigestRun.
[[nodiscard]] Result<RunDigest> LoadDigest(const std::string& dir, int64_t skip_through_step = 0);

}  // namespace stallscope::experiment
