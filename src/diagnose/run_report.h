#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "analysis/ledger.h"
#include "analysis/phases.h"
#include "analysis/summary.h"
#include "base/vocabulary.h"
#include "diagnose/findings.h"
#include "diagnose/life.h"
#include "diagnose/stack_attribution.h"
#include "diagnose/trace_facts.h"
#include "phase/event_log.h"
#include "rundir/info_records.h"
#include "rundir/python_notes.h"
#include "rundir/run_data.h"
#include "rundir/run_dir.h"
#include "sample/recording.h"

namespace stallscope::diagnose {

/// One process of the job over the run, from the sampler's process tree.
struct ProcessRow {
  int32_t pid = 0;
  int32_t ppid = 0;
  ProcessRole role;  ///< decided once here; text only when rendered (base/vocabulary.h)
  std::string comm;
  std::string cmdline;
  int64_t samples = 0;
  double cpu_mean_pct = 0;  ///< 100 = one core
  double cpu_max_pct = 0;
  double running_fraction = 0;   ///< fraction of samples in state R
  double sleeping_fraction = 0;  ///< S or I
  double blocked_fraction = 0;   ///< D (uninterruptible: usually I/O)
  uint32_t threads_max = 0;
  uint64_t read_bytes = 0;  ///< growth over the run
  uint64_t write_bytes = 0;
  double nonvoluntary_switches_per_s = 0;
};

/// DataLoader settings as the hooks reported them (info "dataloader").
/// "train.py:560 (item, 20×)", or "lightning/.../module.py:40 via train.py:88 (item)".
[[nodiscard]] std::string SyncSiteText(const rundir::SyncSite& s);

/// A series point aligned on the phase clock: seconds since the job started.
struct SeriesPoint {
  double t_s = 0;
  double value = 0;
};

/// A named series of the sampler (downsampled to at most kMaxSeriesPoints).
struct Series {
  std::string name;  ///< "gpu0.utilization_pct", "host.cpu_busy_pct", ...
  std::string unit;
  std::vector<SeriesPoint> points;
};
inline constexpr size_t kMaxSeriesPoints = 600;

/// Every sample of a recording as series (gpuN.utilization_pct, gpuN.utilization_fine_pct: the
/// driver's sub-second samples, gpuN.memory_used_mib, gpuN.power_w, gpuN.sm_clock_mhz,
/// host.cpu_busy_pct, host.cpu_iowait_pct, host.psi_io_some_avg10_pct), t in seconds since
/// `t0_ns` (monotonic); not downsampled (RunReport::series is, to kMaxSeriesPoints).
[[nodiscard]] std::vector<Series> RawMachineSeries(const sample::Recording& recording,
                                                   int64_t t0_ns);

/// What stallscope itself cost the job, measured in CPU time (wall-clock comparisons drown in
/// this kind of machine's noise): the monitor's own CPU time against the job's, and the phase
/// records the job wrote per step (each costs the job well under a microsecond; bench/ has the
/// per-interpreter figure).
struct RunOverhead {
  std::optional<double> monitor_cpu_s;
  std::optional<double> job_cpu_s;
  std::optional<double> monitor_share;     ///< monitor_cpu_s / job_cpu_s
  uint64_t records = 0;                    ///< phase records of all processes
  std::optional<double> records_per_step;  ///< per step of the busiest rank
};

/// The measured breakdown of a run: what report.txt and report.json show. Every statistic is
/// the steady state's (RunLife, issue 26) when steps were measured; the series are the whole run.
struct RunReport {
  rundir::RunMeta meta;
  std::string dir;
  double wall_s = 0;                  ///< job start to end (or the last sample)
  analysis::PhaseAnalysis phases;     ///< steps and phase statistics of the steady steps
  RunLife life;                       ///< start-up, warm-up, steady state, tail
  rundir::JobInfo job_info;           ///< CUDA context, compiles, backends, as the hooks noted them
  std::vector<ProcessRow> processes;  ///< over the steady window's samples
  std::vector<rundir::LoaderInfo> loaders;
  std::vector<rundir::SyncSite> sync_sites;  ///< most calls first (unknown counts last)
  analysis::RecordingSummary machine;        ///< per-GPU and host statistics over the steady window
  /// The recording's samples of the steady window: samples[steady_first, steady_last)
  /// (SteadySamples; `steady_last` past the end means to the end); every sample when no step
  /// was measured, and by default.
  size_t steady_first = 0;
  size_t steady_last = std::numeric_limits<size_t>::max();
  std::vector<Series> series;
  std::vector<rundir::PythonProcess>
      python;  ///< the job's Python interpreters, as they noted themselves
  /// When no phase was recorded: the cause that applies (first line) and what supports it.
  std::vector<std::string> no_phases;
  RunOverhead overhead;
  StackReport stacks;       ///< where the Python was (stacks.jsonl); filled by AnalyzeRun
  analysis::Ledger ledger;  ///< where the steady step goes (Facts::ledger); filled by AnalyzeRun
  std::vector<std::string> warnings;
  Verdict verdict;  ///< filled by Diagnose() (verdict.h); empty from BuildRunReport alone
};

/// Builds the report from loaded data. Pure: no I/O. Commands call AnalyzeRun
/// (diagnose/run_analysis.h), which adds the facts and the verdict.
[[nodiscard]] RunReport BuildRunReport(const rundir::RunData& data);

/// The samples of `recording` that `report`'s steady window holds (its [steady_first,
/// steady_last)).
[[nodiscard]] std::span<const sample::Sample> SteadySamples(const sample::Recording& recording,
                                                            const RunReport& report);

/// Which samples a window [begin_ns, end_ns] holds: a sample at t covers the interval since the
/// one before (`interval_ns`), so it counts when the middle of that interval lies in the window;
/// when none does (a window shorter than the interval), the first sample after its begin, if it
/// is taken within an interval of its end. [first, last) indices, ascending samples assumed.
[[nodiscard]] std::pair<size_t, size_t> SamplesInWindow(const std::vector<sample::Sample>& samples,
                                                        int64_t begin_ns, int64_t end_ns,
                                                        int64_t interval_ns);

}  // namespace stallscope::diagnose
