#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "diagnose/facts.h"
#include "diagnose/findings.h"
#include "diagnose/run_report.h"
#include "diagnose/thresholds.h"

namespace stallscope::diagnose {

/// A rule: one finding class (or a family deciding between two), nullopt when it does not apply.
using Rule = std::optional<Finding> (*)(const Facts&);
struct NamedRule {
  std::string_view name;
  Rule fn = nullptr;
};
/// Every rule, in evaluation order (verdict_rules.cc).
[[nodiscard]] std::span<const NamedRule> Rules();

/// Principal = largest cost_fraction × confidence, gpu_bound only when no other finding costs
/// ≥ kThresholds.min_cost; the rest are secondaries by cost, descending.
[[nodiscard]] Verdict RankFindings(std::vector<Finding> findings);

/// Runs every rule over the facts and picks the principal finding: the one with the largest
/// cost_fraction × confidence, with gpu_bound only when nothing else costs ≥ 5% of wall time.
[[nodiscard]] Verdict Diagnose(const Facts& facts);

}  // namespace stallscope::diagnose
