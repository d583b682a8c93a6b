#pragma once
// The words the modules share: phase names and process roles. Each has one table here; code
// compares against these constants and enums, and turns them into text only when rendering.
// (What the host did while a GPU was idle is trace::IdleCause, trace/host_attribution.h: the
// trace module assigns it, and trace::IdleCauseName is its one name table.)

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stallscope {

/// Phase names. A phase reaches us from the job as a string (the ring's interned names,
/// src/phase/README.md), so a phase stays a string id; these are the names some code knows by
/// meaning. The Python hooks (python/stallscope/_hooks.py) write the first five; a profiler trace's
/// step breakdown (diagnose/trace_report.cc) writes the trace-derived ones; analysis writes
/// "other". Never rename one: recordings and reports carry them.
namespace phase_name {
inline constexpr std::string_view kDataLoading = "data_loading";
inline constexpr std::string_view kForward = "forward_pass";
inline constexpr std::string_view kBackward = "backward_pass";
inline constexpr std::string_view kOptimizer = "optimizer_step";
/// The exposed all-reduce wait of a DDP backward (python/stallscope/_hooks.py): from the moment the
/// last gradient was ready until backward() returned. Not compute: time a rank waits for others.
inline constexpr std::string_view kCommWait = "comm_wait";
/// A forward pass under torch.no_grad() outside training (eval, sampling): side work.
inline constexpr std::string_view kEvalForward = "eval_forward";
/// torch.save inside the training loop.
inline constexpr std::string_view kCheckpointing = "checkpointing";
/// Step time covered by no phase (analysis/phases.cc), and in a trace the host's sync waits.
inline constexpr std::string_view kOther = "other";
// Derived from a profiler trace's step breakdown (diagnose/trace_report.cc).
inline constexpr std::string_view kGpuCompute = "gpu_compute";  ///< kernels, copies, memsets
inline constexpr std::string_view kCpuExec = "cpu_exec";        ///< a CPU-only trace's host work
inline constexpr std::string_view kCommunication = "communication";     ///< collective kernels
inline constexpr std::string_view kLaunchOverhead = "launch_overhead";  ///< runtime calls
inline constexpr std::string_view kCpuOps = "cpu_ops";                  ///< host ops, GPU idle

/// The phases that are the model's own work.
inline constexpr std::array<std::string_view, 5> kCompute = {kForward, kBackward, kOptimizer,
                                                             kGpuCompute, kCpuExec};
/// Every phase the Python side's hooks record (python/stallscope/_protocol.py PHASES; a contract
/// test in rundir holds the two equal).
inline constexpr std::array<std::string_view, 7> kRecorded = {
    kDataLoading, kForward, kEvalForward, kBackward, kCommWait, kOptimizer, kCheckpointing};
}  // namespace phase_name

/// True for the phases that are the model's own work (phase_name::kCompute): forward_pass,
/// backward_pass, optimizer_step (the Python hooks), and gpu_compute / cpu_exec (a profiler
/// trace). The verdict's compute share, the live status line and the periodic-side-work
/// detector all ask this one question.
[[nodiscard]] constexpr bool IsComputePhase(std::string_view name) {
  for (std::string_view c : phase_name::kCompute) {
    if (name == c) return true;
  }
  return false;
}

/// What a process of the job is, decided once (diagnose/run_report.cc) from the process tree, the
/// ranks' step markers and the DataLoader hooks' worker pids.
enum class ProcessRoleKind : uint8_t {
  kMain,              ///< the training process of a single-process job
  kRank,              ///< the training process of one rank of a distributed job
  kDataLoaderWorker,  ///< a DataLoader worker
  kLauncher,          ///< started the ranks (torchrun, a shell script, a launcher script)
  kChild,             ///< any other process of the tree
};

/// A role; `rank` is meaningful for kRank only.
struct ProcessRole {
  ProcessRoleKind kind = ProcessRoleKind::kChild;
  int32_t rank = 0;

  friend bool operator==(const ProcessRole&, const ProcessRole&) = default;
};

/// "main", "rank 3", "dataloader worker", "launcher", "child": the text of the run report's
/// ROLE column and its JSON "role" field.
[[nodiscard]] std::string ToString(ProcessRole role);

/// The inverse of ToString; empty for any other text ("rank -1" and "rank x" included).
[[nodiscard]] std::optional<ProcessRole> ProcessRoleFromString(std::string_view text);

}  // namespace stallscope
