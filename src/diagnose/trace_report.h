#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "analysis/detect.h"
#include "analysis/phases.h"
#include "base/result.h"
#include "diagnose/findings.h"
#include "diagnose/trace_facts.h"
#include "trace/cross_rank.h"
#include "trace/gpu_metrics.h"
#include "trace/host_attribution.h"
#include "trace/kernels.h"
#include "trace/step_breakdown.h"
#include "trace/timeline.h"
#include "trace/trace_reader.h"

namespace stallscope::diagnose {

/// Everything `stallscope trace` reports about one rank. The rank's events are not kept: a rank
/// is read, analysed and dropped, so memory holds one rank's events per reading thread.
struct TraceRankReport {
  int32_t rank = 0;
  std::string path;
  trace::RankSource rank_source = trace::RankSource::kDefault;
  trace::Dialect dialect = trace::Dialect::kKineto;
  std::optional<int32_t> world_size;
  std::string backend;
  std::vector<trace::DeviceProps> devices;
  trace::ReadStats stats;
  std::vector<std::string> warnings;
  trace::Timeline timeline;
  trace::GpuMetrics gpu;
  trace::StepBreakdown steps;
  trace::HostAttribution idle;
  trace::KernelReport kernels;
  trace::StepSeries series;
  trace::CrossRankInput cross_input;
  /// DataLoader iterator seen in the trace: "_SingleProcessDataLoaderIter" (num_workers=0),
  /// "_MultiProcessingDataLoaderIter", or "".
  std::string loader_iterator;
  /// Seed 003 detection on the per-step series (analysis/detect.h, as `run` uses).
  analysis::Outliers step_outliers;
  std::optional<analysis::Period> step_period;
  bool has_gpu() const { return !idle.devices.empty(); }
};

/// The whole job: ranks by rank number, cross-rank comparison, and the verdict of the shared
/// rules engine (diagnose/verdict.h) over phases derived from the timelines.
struct TraceReport {
  trace::AnalysisOptions options;
  std::vector<TraceRankReport> ranks;
  std::optional<trace::CrossRankReport> cross;
  TraceFacts facts;
  analysis::PhaseAnalysis phases;  ///< per-step phases for the rules (README "Trace → phases")
  Verdict verdict;
  std::vector<std::string> warnings;
};

/// Prepares and analyses one rank (consumes its events). `parallel`: run the independent
/// analyses on two threads (when a core is spare). `cross_rank`: also extract what the
/// cross-rank comparison needs (only useful with ≥ 2 ranks).
[[nodiscard]] TraceRankReport AnalyzeRank(trace::RankTrace trace,
                                          const trace::AnalysisOptions& options,
                                          bool parallel = false, bool cross_rank = true);

/// Per-step phases of a rank (windows, phase seconds, sync counters; analysis::PhasesFromSteps
/// adds the statistics), from its TensorBoard-category breakdown: GPU traces give gpu_compute
/// (Kernel+Memcpy+Memset), communication, launch_overhead (Runtime but the synchronizing calls),
/// data_loading (exposed DataLoader), cpu_ops (CPU Exec) and other (Other plus the synchronizing
/// part of Runtime, as a run counts syncs outside its phases); CPU-only traces give
/// data_loading, cpu_exec (everything else traced) and other. The parts of each step sum to its
/// wall time.
[[nodiscard]] analysis::RankSteps TracePhaseSteps(const TraceRankReport& rank);

/// Cross-rank analysis, facts, phases and the verdict over analysed ranks (sorted by rank here).
[[nodiscard]] TraceReport BuildTraceReport(std::vector<TraceRankReport> ranks,
                                           const trace::AnalysisOptions& options);

/// Sees every rank's events, all read, before the analysis consumes them (e.g. the Perfetto
/// export of `trace --export-perfetto`); an error fails the analysis.
using TracesHook = std::function<Status(const std::vector<trace::RankTrace>& traces)>;

/// Reads PATHs (files or directories), analyses each rank on up to `threads` threads (0 = all
/// cores) and builds the report. Fails only when a path cannot be read or is not a trace, or when
/// the paths hold no trace file. With `before_analysis`, all ranks are read first and held at
/// once (memory: every rank's events) so the hook sees them together.
[[nodiscard]] Result<TraceReport> AnalyzeTraceFiles(const std::vector<std::string>& paths,
                                                    const trace::ReadOptions& read,
                                                    const trace::AnalysisOptions& options,
                                                    unsigned threads = 0,
                                                    const TracesHook& before_analysis = {});

}  // namespace stallscope::diagnose
