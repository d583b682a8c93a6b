#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analysis/step_rate.h"
#include "experiment/experiment.h"

namespace stallscope::experiment {

/// The passes, in the order they run.
enum class PassId : uint8_t {
  kA,   ///< "A": the baseline, the job as it is
  kB,   ///< "B": side work off
  kC,   ///< "C": synthetic data
  kA2,  ///< "A2": the baseline again, last (how far the machine's speed drifted between passes)
};
/// Every pass with its name: passes.txt, passes.json's "id" and "recovering", the progress
/// lines and the pass's run directory (`<dir>/A2/`). In enum order.
inline constexpr std::pair<PassId, std::string_view> kPassIdNames[] = {
    {PassId::kA, "A"},
    {PassId::kB, "B"},
    {PassId::kC, "C"},
    {PassId::kA2, "A2"},
};
[[nodiscard]] std::string_view PassIdName(PassId id);

/// One controlled pass of seed 000's method: the job with one suspect removed through the
/// hooks' experiment controls (python/stallscope/_experiment.py).
struct PassSpec {
  PassId id = PassId::kA;
  std::string name;     ///< "baseline", "side work off", "synthetic data", "baseline again"
  std::string removes;  ///< what the pass takes away, for people
  std::vector<std::string> env;  ///< NAME=VALUE controls for the job
};

/// A baseline, B side work off (torch.save skipped, eval forwards served from a cache), C
/// synthetic data (each DataLoader yields copies of its first `synthetic_batches` batches), A2
/// the baseline again (the machine's drift between passes). Every pass sends the job's
/// torch.save paths to `scratch_dir`.
[[nodiscard]] std::vector<PassSpec> StandardPasses(const std::string& scratch_dir,
                                                   int synthetic_batches = 4);

/// A pass as it ran.
struct PassResult {
  PassSpec spec;
  std::optional<RunDigest> run;  ///< empty when the run directory could not be read
  std::string failure;           ///< why the pass gave no rate ("exit 1", "no steps"), or ""
  std::optional<analysis::RateChange> vs_baseline;  ///< steps/s against pass A
  /// The pass's controls found nothing to remove in this run (B: no torch.save, no eval forward;
  /// C: no batch served from the cache): its difference from A is the machine's, not evidence.
  bool removed_nothing = false;
};

/// Which pass a verdict class predicts recovers the loss: C for the input pipeline's classes,
/// B for periodic side work, empty for the classes no pass removes (the model's own work, syncs,
/// threads, the GPU).
[[nodiscard]] std::optional<PassId> PassForClass(diagnose::FindingClass c);

/// The decision table's conclusion.
struct PassesConclusion {
  std::optional<PassId> recovering;  ///< B, C or empty (none recovers pass_recovery_min)
  std::string text;                  ///< one sentence
  std::optional<bool> agrees;        ///< with pass A's verdict; empty when A has no verdict
  std::string verdict_class;         ///< pass A's principal class, "" when none
  /// The speed-up a pass must clear: pass_recovery_min × the drift between A and A2.
  double required_ratio = 1;
  /// What limits the conclusion, one sentence each (a pass that removed nothing yet ran at
  /// another speed than A: the machine's speed changed between passes).
  std::vector<std::string> caveats;
};

/// Fills each pass's `vs_baseline` and concludes: a pass recovers the loss when it is
/// significantly faster than the baseline (A pooled with A2) by at least required_ratio
/// (thresholds.pass_recovery_min, times how far A2 drifted from A); the larger recovery names the
/// bottleneck, which is checked against pass A's verdict.
[[nodiscard]] PassesConclusion ConcludePasses(std::vector<PassResult>& passes);

/// What `stallscope passes` prints and writes (passes.txt, passes.json).
struct PassesReport {
  std::string dir;  ///< holds one run directory per pass (A/, B/, C/, A2/)
  std::vector<std::string> command;
  std::string bound;  ///< "40 steps", "60s"
  std::vector<PassResult> passes;
  PassesConclusion conclusion;
};

}  // namespace stallscope::experiment
