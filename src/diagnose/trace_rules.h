#pragma once
// Rules that need a GPU timeline (RunData::trace, from `stallscope trace`). They return nullopt
// for live runs, which carry no timeline. Private to src/diagnose; listed in Rules().

#include <optional>

#include "diagnose/verdict.h"

namespace stallscope::diagnose {

/// host_launch_bound: the GPU idles while the host launches kernels or runs CPU ops, with a
/// shallow launch queue (the host cannot stay ahead of the GPU).
[[nodiscard]] std::optional<Finding> HostLaunchRule(const Facts& facts);

/// communication_bound: GPU time lost to collectives that compute does not hide, or to waiting on
/// dependencies while the next kernels are already queued (a deep launch queue).
[[nodiscard]] std::optional<Finding> CommunicationRule(const Facts& facts);

}  // namespace stallscope::diagnose
