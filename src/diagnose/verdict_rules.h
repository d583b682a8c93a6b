#pragma once
// The input-pipeline and thread rules (verdict_rules.cc, which also lists every rule: Rules()).
// Private to src/diagnose.

#include <optional>

#include "diagnose/verdict.h"

namespace stallscope::diagnose {

/// data_bound_cpu / data_bound_io at any share of data_loading (the ledger's data part when it is
/// principal: issue 39); the data_bound rule's finding, which speaks from half its threshold on.
/// Its confidence grows with the share's margin over data_bound_share. nullopt without steps or
/// without data_loading.
[[nodiscard]] std::optional<Finding> DataBoundFinding(const Facts& facts);

}  // namespace stallscope::diagnose
