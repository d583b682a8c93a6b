#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "experiment/experiment.h"

namespace stallscope::experiment {

/// One `--set KEY=V1,V2,...`.
struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
};

/// Parses the `--set` texts: KEY=V1,V2,... with a key of letters, digits and '_', at least one
/// value, no key twice. A DataLoader key's values are checked (num_workers ≥ 0, batch_size ≥ 1,
/// prefetch_factor ≥ 1, pin_memory / persistent_workers true|false).
[[nodiscard]] Result<std::vector<SweepAxis>> ParseSweepSets(const std::vector<std::string>& sets);

/// True for the DataLoader settings the hooks can override (STALLSCOPE_LOADER_SET).
[[nodiscard]] bool IsLoaderKey(const std::string& key);

/// One combination to run.
struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> setting;  ///< in --set order
  std::string label;                                         ///< "num_workers=2 batch_size=64"
  std::vector<std::string> command;  ///< with {KEY} substituted and the --arg words appended
  std::vector<std::string> env;      ///< STALLSCOPE_LOADER_SET=... when a loader key is hooked
};

/// Every combination (the first axis varies slowest), at most `max_points`. A key that appears
/// as {KEY} in a command word or an --arg is substituted there (no shell); a DataLoader key
/// that does not is set through the hooks; any other key is an error.
[[nodiscard]] Result<std::vector<SweepPoint>> PlanSweep(const std::vector<SweepAxis>& axes,
                                                        const std::vector<std::string>& command,
                                                        const std::vector<std::string>& args,
                                                        size_t max_points = 64);

/// A combination as it ran.
struct SweepRow {
  SweepPoint point;
  std::optional<RunDigest> run;
  /// "failed: exit 1", "failed: killed by signal 9 (out of memory?)", ...: not ranked, even
  /// with the steps it made before it failed.
  std::string failure;
};

/// The verdict's predicted steps/s for its first fix, against the sweep's measurement of it.
struct PredictionCheck {
  size_t from = 0;  ///< the row whose verdict predicted
  size_t to = 0;    ///< the row that ran the predicted setting
  std::string setting;
  double predicted = 0;
  double measured = 0;
  double error = 0;  ///< measured / predicted − 1
};

struct SweepSummary {
  std::vector<size_t> order;  ///< rows with a rate, fastest first; then the failed ones
  std::optional<size_t> best;
  /// The cheapest row (least job CPU, then least peak RSS) within
  /// thresholds.sweep_recommend_within of the best.
  std::optional<size_t> recommended;
  std::vector<PredictionCheck> predictions;
};

[[nodiscard]] SweepSummary SummarizeSweep(const std::vector<SweepRow>& rows);

/// What `stallscope sweep` prints and writes (sweep.txt, sweep.json).
struct SweepReport {
  std::string dir;  ///< holds one run directory per combination
  std::vector<std::string> command;
  std::string bound;
  std::vector<SweepRow> rows;
  SweepSummary summary;
};

}  // namespace stallscope::experiment
