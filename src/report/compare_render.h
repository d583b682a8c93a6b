#pragma once

#include <string>

#include "experiment/compare.h"

namespace stallscope::report {

/// `stallscope compare A B`: the conclusion first, then steps/s with 95% intervals, the verdict of
/// each run, the per-phase table (ms per step and share), what differed, and what to do next.
/// Every string from a run (directories, commands, environment values, phase names) is escaped.
[[nodiscard]] std::string RenderCompareText(const experiment::CompareReport& report);

/// Version of the `compare --json` object below; bumped when a key changes meaning or goes.
inline constexpr int kCompareSchemaVersion = 1;

/// `stallscope compare A B --json`: one object, keys in this order, fixed float formats.
///   schema_version  kCompareSchemaVersion
///   conclusion      the one-line conclusion of the text output
///   change          {outcome: "faster" | "slower" | "no_change" | "too_few_steps" | "no_steps",
///                    ratio: B/A of steps/s, lo, hi: its 95% interval (block bootstrap; lo == hi
///                    without one), significant: the interval excludes 1, a_busy_host,
///                    b_busy_host: that run shared the host with other work (its speed then
///                    varies between runs more than its interval says)}; ratio..hi null for
///                    "no_steps"
///   a, b            each run: dir, name, steps (steady steps counted), steps_per_s, lo, hi (its
///                   95% interval), samples_per_s, data_share, gpu_util_pct, peak_rss_bytes,
///                   job_cpus (CPU time / wall time), other_cpus (CPUs other processes on the
///                   host used), wall_s, verdict ({class, confidence, cost_fraction} of the
///                   principal finding, or null), caveats (of the
///                   verdict: a busy host, corrupt records), warnings; a value the run did not
///                   measure is null
///   phases          [{name, a_ms_per_step, b_ms_per_step (null where that run has no such
///                   phase), delta_ms_per_step (B − A), a_share, b_share}], largest first
///   differences     [{name, a, b}]: only what differs; a value is null where that run did not
///                   record it. Names: command, exit, dataloader.{num_workers, batch_size,
///                   pin_memory, persistent_workers, prefetch_factor}, env.NAME, allowed_cpus,
///                   gpus, driver, hostname, tool_version
[[nodiscard]] std::string RenderCompareJson(const experiment::CompareReport& report);

}  // namespace stallscope::report
