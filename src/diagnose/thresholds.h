#pragma once
// The verdict's thresholds live in base/thresholds.h (one table for every module); these names
// keep diagnose code and the CLI reading them as diagnose::kThresholds.

#include "base/thresholds.h"

namespace stallscope::diagnose {

using ::stallscope::kThresholds;
using ::stallscope::kThresholdTable;
using ::stallscope::Threshold;
using ::stallscope::ThresholdSet;
using ::stallscope::ThresholdTable;

}  // namespace stallscope::diagnose
