#pragma once
// The step ledger (issue 39): where every second of the steady step goes, per rank and for the
// job, in parts that add up to 1. The same idea as HTA's temporal breakdown (compute, non-compute,
// idle of a GPU's timeline), for a whole run measured from the job's phases instead of a profiled
// window. Measures only: the verdict (diagnose) judges it.
//
// "Share", here and wherever the analysis and the verdict say it, is a fraction of the steady
// step's wall time (0..1). Fractions of anything else are named for it: a fraction of samples
// (`throttled_samples_fraction`), of a profiled window (`window_share`), of a CPU (`cpu`).

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analysis/phases.h"
#include "base/thresholds.h"

namespace stallscope::analysis {

/// The ledger's parts (report.json ledger.*.parts[].part; never renumber: code indexes by them).
enum class LedgerPart : uint8_t {
  /// "compute": the model's own work — forward, backward, optimizer (a trace's kernels). Where
  /// CUDA events timed the compute phases, the GPU's busy time (whatever the host did meanwhile:
  /// it waited in a sync, loaded the next batch, or ran the optimizer's Python); else the host's.
  kCompute,
  kData,         ///< "data": waiting for the next batch, not hidden behind GPU work
  kComm,         ///< "communication": waiting in collectives, as long on every rank (comm_wait)
  kRankWait,     ///< "rank_wait": waiting for a slower rank (lockstep: beyond the least-waiting)
  kSideWork,     ///< "side_work": checkpoint saves and eval/sampling forwards inside the steps
  kHostWork,     ///< "host_work": the host's own work while nothing above ran (`other`, its named
                 ///< phases, and its time in a compute phase beyond the GPU's: launch overhead)
  kUnaccounted,  ///< "unaccounted": what no phase record explains (records lost or cut)
};
inline constexpr size_t kLedgerParts = 7;
/// Every part with its report.json name, in enum order.
inline constexpr std::pair<LedgerPart, std::string_view> kLedgerPartNames[] = {
    {LedgerPart::kCompute, "compute"},         {LedgerPart::kData, "data"},
    {LedgerPart::kComm, "communication"},      {LedgerPart::kRankWait, "rank_wait"},
    {LedgerPart::kSideWork, "side_work"},      {LedgerPart::kHostWork, "host_work"},
    {LedgerPart::kUnaccounted, "unaccounted"},
};
static_assert(std::size(kLedgerPartNames) == kLedgerParts);

[[nodiscard]] std::string_view LedgerPartName(LedgerPart p);
/// For people: "GPU compute", "waiting for data", ...; `on_gpu`: compute is the GPU's time.
[[nodiscard]] std::string_view LedgerPartLabel(LedgerPart p, bool on_gpu);
/// The part a phase's time belongs to: the compute phases (base/vocabulary.h IsComputePhase),
/// data_loading, comm_wait (and a trace's communication), checkpointing and eval_forward; every
/// other name (`other`, a phase the job named itself, a trace's launch_overhead and cpu_ops) is
/// the host's own work.
[[nodiscard]] LedgerPart LedgerPartOfPhase(std::string_view phase);

/// One rank's steady step (or the job's, ranks pooled), split.
struct StepLedger {
  int32_t rank = -1;  ///< -1: the job
  int64_t steps = 0;  ///< steady steps (all ranks' for the job)
  double step_s = 0;  ///< mean steady step, seconds
  /// Per part, shares of the steady step: they add up to 1 (to rounding) when steps > 0.
  std::array<double, kLedgerParts> parts{};
  /// What each part is made of: phase → its share in that part (the part of a phase is
  /// LedgerPartOfPhase, but for "launch:<phase>", the host's time in a compute phase while the
  /// GPU idled, in host_work). Shares of the steady step.
  std::map<std::string, double> members;
  /// Per phase, shares as the verdict's rules read them (diagnose::Facts::phase_share): host
  /// time, but a compute phase's is max(host, GPU) where CUDA events timed it, and what that
  /// adds came out of `other`, then data_loading, then the largest others. Their sum exceeds 1
  /// by what the GPU ran while the host was in another compute phase.
  std::map<std::string, double> phase_share;
  /// CUDA events timed the compute phases (every rank, enough of their instances).
  bool compute_on_gpu = false;
  /// With compute_on_gpu: the compute phases' GPU time (≤ 1 of the step), the host's time in
  /// them, and the host's time elsewhere while the GPU still ran the step's work (in a sync,
  /// .item(), a blocking copy, or loading the next batch: inside `compute`).
  std::optional<double> gpu_busy;
  double host_compute = 0;
  double host_wait = 0;

  [[nodiscard]] double Share(LedgerPart p) const { return parts[static_cast<size_t>(p)]; }
};

/// The ledgers of a run: one per rank with steady steps, and the job's.
struct Ledger {
  /// The job: one rank's ledger when there is one; ranks pooled by their steady time; in
  /// lockstep (every rank waits in comm_wait: DDP) each part is the least any rank spends, and
  /// rank_wait what one rank does beyond the others (their wait for it).
  StepLedger job;
  std::vector<StepLedger> ranks;
  bool lockstep = false;  ///< every rank with steps has a comm_wait phase (and ≥ 2 ranks)

  [[nodiscard]] bool empty() const { return job.steps == 0; }
};

/// The ledgers of `phases`' steady steps. A compute phase's GPU time counts where CUDA events
/// timed at least t.gpu_time_coverage of its instances on every rank. Pure.
[[nodiscard]] Ledger BuildLedger(const PhaseAnalysis& phases, const ThresholdSet& t = kThresholds);

}  // namespace stallscope::analysis
