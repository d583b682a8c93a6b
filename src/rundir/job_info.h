#pragma once
// What the hooks noted about the job's start-up and warm-up as info records
// (python/stallscope/auto.py: "cuda_init", "compile", "compile_totals", "backends"): decoded once
// here for the life of the run (diagnose/life.h) and the GPU-use facts. Times are
// CLOCK_MONOTONIC ns, the clock of every phase record.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "phase/event_log.h"

namespace stallscope::rundir {

/// A timed event of one process: CUDA's lazy initialisation, or one torch.compile frame.
struct TimedInfo {
  int32_t pid = 0;
  int32_t rank = 0;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  std::string what;  ///< compile: "file.py:LINE function"; cuda_init: ""
  [[nodiscard]] double seconds() const { return static_cast<double>(end_ns - begin_ns) / 1e9; }
};

/// torch's backend settings as one process had them at its first step (info "backends").
struct BackendsInfo {
  int32_t pid = 0;
  int32_t rank = 0;
  std::optional<bool> cudnn_benchmark;
  std::optional<bool> cudnn_deterministic;
  std::optional<std::string> float32_matmul_precision;
  std::optional<bool> cuda_initialized;
};

/// A process's compile totals at exit (info "compile_totals"): every compiled frame, listed or
/// not (the hooks list the first 64).
struct CompileTotals {
  int32_t pid = 0;
  int64_t count = 0;
  double total_s = 0;
};

struct JobInfo {
  std::vector<TimedInfo> cuda_init;  ///< one per process that created a CUDA context
  std::vector<TimedInfo> compiles;   ///< in record order
  std::vector<CompileTotals> compile_totals;
  std::vector<BackendsInfo> backends;
};

}  // namespace stallscope::rundir
