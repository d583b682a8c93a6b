#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "analysis/summary.h"
#include "diagnose/run_report.h"
#include "diagnose/trace_report.h"
#include "sample/recording.h"

namespace stallscope::report {

/// The data an HTML report embeds (html_render.h draws it): one JSON object, schema_version 1.
///   kind            "run" | "trace" | "recording"
///   title           what the page is about (run name, trace path, recording path)
///   verdict         the "verdict" object of report.json (run_render.h WriteVerdictJson), or null
///   job             {command, status, exit_code, wall_s, host} (run), or null
///   life            {text, sure, stages: [{stage, b, e}]} (run with steps: start-up, warm-up,
///                   steady, tail in seconds since the job started), or null
///   timeline        {series: [{name, unit, t: [s], v: []}], bands: [{rank, phase, b: [s], e:
///   [s]}]}
///                   t in seconds since the job (or recording) started; series reduced to min/max
///                   envelopes (EnvelopeSeries: every peak kept); bands: the main process's
///                   data_loading / compute / side-work phases, merged below the drawing
///                   resolution; series names as diagnose::RawMachineSeries (gpuN.sm_active_pct,
///                   gpuN.tensor_active_pct, gpuN.dram_active_pct only where GPM was recorded)
///   steps           [{rank, per_s, mean_ms, variation, t: [end s], ms: [duration], outliers:
///                   [index], period (steps, or null)}]
///   step_phases     [{rank, names: [phase], ms: [[per step, per name]]}]: the stacked bars
///   phase_shares    [{rank, phases: [{name, share, mean_ms, count}]}]
///   gpus            [{index, name, util_mean, util_max, mem_used_mib, mem_total_mib, power_w,
///                   sm_active_mean, tensor_active_mean, dram_active_mean}] (GPM: the mean of
///                   the GPU's GPM windows in the summary's window, %; null without GPM)
///   balance         {util_cv_pct, util_class, memory_cv_pct, memory_class}
///   processes       report.json's "processes" (run_render.h WriteProcessesJson)
///   dataloaders     report.json's "dataloaders" (WriteLoadersJson)
///   stacks          report.json's "stacks" (stacks_render.h WriteStacksJson; runs only, else
///                   absent)
///   kernels         [{rank, name, count, total_ms, mean_us, share}] (traces: top 20 per rank)
///   idle            [{rank, device, window_ms, busy_ms, causes: {name: ms}}] (traces)
///   warnings        [string]
/// Every string is the job's or the trace's own: the page inserts them as text, never as HTML.
struct PageLimits {
  /// Envelope buckets per series, shared: a page with many series gets fewer per series, so
  /// that a one-hour 8-GPU run stays within ~2 MB.
  size_t total_points = 120'000;
  size_t max_buckets_per_series = 2'000;
  size_t max_bands_per_phase = 3'000;
  size_t max_steps = 20'000;  ///< per rank, evenly thinned beyond (outliers always kept)
  size_t top_kernels = 20;
};

/// Reduces `points` (by time) to at most `buckets` equal-time buckets, each giving its minimum
/// and its maximum point in time order (one when they are the same point): a spike or a dip
/// survives any zoom-out. Shorter inputs come back unchanged.
[[nodiscard]] std::vector<diagnose::SeriesPoint> EnvelopeSeries(
    const std::vector<diagnose::SeriesPoint>& points, size_t buckets);

/// The page data of a run directory (data: what LoadRun read; report: analysed and diagnosed).
[[nodiscard]] std::string RunPageData(const rundir::RunData& data,
                                      const diagnose::RunReport& report,
                                      const PageLimits& limits = {});

/// The page data of a recording (`record` output) and its summary.
[[nodiscard]] std::string RecordingPageData(const std::string& path,
                                            const sample::Recording& recording,
                                            const analysis::RecordingSummary& summary,
                                            const PageLimits& limits = {});

/// The page data of profiler traces (`stallscope trace`), one or many ranks.
[[nodiscard]] std::string TracePageData(const std::string& title,
                                        const diagnose::TraceReport& report,
                                        const PageLimits& limits = {});

}  // namespace stallscope::report
