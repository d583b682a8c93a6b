#pragma once
// The life of a run, job-wide (issue 26): how long its start-up, warm-up, steady state and tail
// took, what is known of their causes, and the steady window every fact of the verdict is taken
// over. Built once by AnalyzeRun (diagnose/run_analysis.h) from the per-rank lives AnalyzePhases
// found (analysis/phases.h, analysis/life.h) and what the job noted of itself; rendered by
// report/run_render.h.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/phases.h"
#include "rundir/job_info.h"
#include "rundir/python_notes.h"
#include "rundir/run_dir.h"

namespace stallscope::diagnose {

/// What a known part of start-up, warm-up or the tail was.
enum class LifePartKind : uint8_t {
  kInterpreter,     ///< from the job's start to its Python interpreter's start (launchers, exec)
  kImportTorch,     ///< the interpreter's start to torch's import (the hooks' note)
  kSetup,           ///< the job's own set-up before its first phase: data set, model, ...
  kCudaInit,        ///< CUDA's lazy initialisation (context creation), info "cuda_init"
  kFirstBatch,      ///< the data_loading before step 1: the iterator (starts the workers) and
                    ///< the first batch; `count`: DataLoader workers started
  kPhase,           ///< time in phase `phase` (start-up, tail) or its excess over its steady
                    ///< median (warm-up)
  kCompile,         ///< torch.compile frames compiled in it; `count`: frames
  kCudnnBenchmark,  ///< torch.backends.cudnn.benchmark was on: cuDNN autotunes each new shape
  kExit,            ///< after the last phase record: interpreter exit, workers' teardown
};

/// "interpreter", "import_torch", "setup", "cuda_init", "first_batch", "phase", "compile",
/// "cudnn_benchmark", "exit": report.json's life parts' "what".
[[nodiscard]] std::string_view LifePartName(LifePartKind kind);

/// One known part; `seconds` is 0 for a flag (kCudnnBenchmark).
struct LifePart {
  LifePartKind kind = LifePartKind::kSetup;
  double seconds = 0;
  int64_t count = 0;
  std::string phase;  ///< kPhase
};

/// The life of a run, of its reference rank (rank 0, else the lowest with steps).
struct RunLife {
  bool has_steps = false;  ///< false: no step was measured, and every fact is the whole run's
  int32_t rank = 0;
  double wall_s = 0;     ///< the job's start to its end
  double startup_s = 0;  ///< the job's start to step 1's begin (its first batch in hand)
  double warmup_s = 0;
  int64_t warmup_steps = 0;
  double steady_s = 0;
  int64_t steady_steps = 0;
  double tail_s = 0;  ///< the last step's end to the job's end
  /// The job's steady window (CLOCK_MONOTONIC): while every rank was steady, or the reference
  /// rank's when the ranks' windows do not overlap. The sampled facts are taken over it.
  int64_t steady_begin_ns = 0;
  int64_t steady_end_ns = 0;
  std::vector<LifePart> startup;  ///< in the order they happened
  std::vector<LifePart> warmup;   ///< largest first
  std::vector<LifePart> tail;
  /// The steady state has at least steady_sure_steps steps and steady_sure_s seconds.
  bool sure = false;
  /// Start-up and warm-up are at least startup_most_share of the wall time: said first.
  bool mostly_startup = false;

  /// (start-up + warm-up) / wall time; 0 without a wall time.
  [[nodiscard]] double StartupShare() const;
};

/// The life of `phases`' ranks in a job that started at `meta.start_mono_ns` and ran `wall_s`:
/// the parts of its start-up from the Python notes (interpreter start, torch import), `info`
/// (CUDA context, compiles, cudnn.benchmark) and the phases before step 1; of its warm-up from
/// the warm-up steps' phases against their steady medians; of its tail from the phases after the
/// last step. `loaders` give the workers the first batch started.
[[nodiscard]] RunLife BuildRunLife(const rundir::RunMeta& meta, double wall_s,
                                   const analysis::PhaseAnalysis& phases,
                                   const std::vector<rundir::PythonProcess>& python,
                                   const rundir::JobInfo& info, int64_t workers_started);

}  // namespace stallscope::diagnose
