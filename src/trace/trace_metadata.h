#pragma once
// The top-level values of a trace other than its events: distributedInfo (rank, world size,
// backend), deviceProperties (the GPUs) and baseTimeNanoseconds, applied to the rank's trace.

#include <vector>

#include <simdjson.h>

#include "trace/json_scan.h"
#include "trace/trace_model.h"

namespace stallscope::trace {

/// Applies `values` (as the scanner captured them) to `out`; one unreadable is a warning in
/// out->warnings naming the file and the key, never an error.
void ApplyTopLevelValues(simdjson::ondemand::parser& parser,
                         const std::vector<TopLevelValue>& values, RankTrace* out);

}  // namespace stallscope::trace
