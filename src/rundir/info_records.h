#pragma once
// The info records the job's Python side writes into its phase ring (python/stallscope/_protocol.py
// INFO_KINDS and INFO_KEYS declare the same kinds and keys; info_records_test holds the two equal):
// every kind and its keys declared once here, every record decoded once (DecodeInfoRecords, from
// LoadRun) into the types below, malformed ones counted. The report, the facts, the life of the
// run and the experiment digests read RunData::info, never the JSON.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "phase/event_log.h"
#include "rundir/job_info.h"

namespace stallscope::rundir {

/// The kinds of info record, as the "name" of an info item in the ring.
enum class InfoKind : uint8_t {
  kTorch,
  kDataLoader,
  kDataLoaderWorkers,
  kBackends,
  kCudaInit,
  kCompile,
  kCompileTotals,
  kSyncSite,
  kSyncSites,
  kExperiment,
};

/// One kind: its name and every key its JSON object may carry.
struct InfoKindSpec {
  InfoKind kind;
  std::string_view name;
  std::span<const std::string_view> keys;
};

namespace info_keys {
inline constexpr std::string_view kTorch[] = {"torch_version",
                                              "intra_op_threads",
                                              "interop_threads",
                                              "omp_num_threads_env",
                                              "cpu_count",
                                              "cpu_affinity",
                                              "rank",
                                              "local_rank",
                                              "world_size",
                                              "pid"};
inline constexpr std::string_view kDataLoader[] = {"loader",
                                                   "num_workers",
                                                   "batch_size",
                                                   "pin_memory",
                                                   "persistent_workers",
                                                   "prefetch_factor",
                                                   "drop_last",
                                                   "dataset_len",
                                                   "dataset_type",
                                                   "sampler_type",
                                                   "multiprocessing_context",
                                                   "timeout_s",
                                                   "intra_op_threads",
                                                   "worker_pids"};
inline constexpr std::string_view kDataLoaderWorkers[] = {"loader", "worker_pids"};
inline constexpr std::string_view kBackends[] = {"cudnn_benchmark", "cudnn_deterministic",
                                                 "float32_matmul_precision", "cuda_initialized"};
inline constexpr std::string_view kCudaInit[] = {"begin_ns", "end_ns"};
inline constexpr std::string_view kCompile[] = {"begin_ns", "end_ns", "frame", "trigger"};
inline constexpr std::string_view kCompileTotals[] = {"count", "total_ns"};
inline constexpr std::string_view kSyncSite[] = {"kind",     "file",      "line",
                                                 "function", "user_file", "user_line"};
inline constexpr std::string_view kSyncSites[] = {"sites"};
inline constexpr std::string_view kExperiment[] = {"stop_after_steps",
                                                   "steps",
                                                   "stopped",
                                                   "synthetic_batches_cached",
                                                   "synthetic_batches_served",
                                                   "synthetic_not_applied",
                                                   "saves_skipped",
                                                   "eval_forwards_cached",
                                                   "eval_forwards_run",
                                                   "saves_redirected",
                                                   "saves_not_redirected",
                                                   "loader_set",
                                                   "loader_set_applied",
                                                   "loader_set_errors"};
}  // namespace info_keys

/// Every kind, in enum order.
inline constexpr InfoKindSpec kInfoKinds[] = {
    {InfoKind::kTorch, "torch", info_keys::kTorch},
    {InfoKind::kDataLoader, "dataloader", info_keys::kDataLoader},
    {InfoKind::kDataLoaderWorkers, "dataloader_workers", info_keys::kDataLoaderWorkers},
    {InfoKind::kBackends, "backends", info_keys::kBackends},
    {InfoKind::kCudaInit, "cuda_init", info_keys::kCudaInit},
    {InfoKind::kCompile, "compile", info_keys::kCompile},
    {InfoKind::kCompileTotals, "compile_totals", info_keys::kCompileTotals},
    {InfoKind::kSyncSite, "sync_site", info_keys::kSyncSite},
    {InfoKind::kSyncSites, "sync_sites", info_keys::kSyncSites},
    {InfoKind::kExperiment, "experiment", info_keys::kExperiment},
};

/// The kind of an info item's name; empty for a name no kind has (a newer Python side's).
[[nodiscard]] std::optional<InfoKind> InfoKindOf(std::string_view name);

/// `key` when kind K declares it; a compile error otherwise: a decoder reads declared keys only.
template <InfoKind K>
consteval std::string_view Key(std::string_view key) {
  for (std::string_view k : kInfoKinds[static_cast<size_t>(K)].keys) {
    if (k == key) return key;
  }
  throw "info key not declared for this kind (rundir/info_records.h info_keys)";
}

/// One process's info "torch": its threads and CPUs.
struct TorchProcess {
  int32_t pid = 0;
  int32_t rank = 0;
  std::optional<int64_t> intra_op_threads;
  std::optional<int64_t> cpu_count;
  std::optional<int64_t> cpu_affinity;  ///< len(os.sched_getaffinity(0))
  std::optional<std::string> omp_num_threads_env;
};

/// One DataLoader (info "dataloader", its workers from "dataloader_workers").
struct LoaderInfo {
  int32_t pid = 0;
  int32_t rank = 0;
  std::optional<int64_t> num_workers;
  std::optional<int64_t> batch_size;
  std::optional<bool> pin_memory;
  std::optional<bool> persistent_workers;
  std::optional<int64_t> prefetch_factor;
  std::optional<bool> drop_last;
  std::optional<int64_t> dataset_length;
  std::vector<int32_t> worker_pids;
  std::string raw_json;
};

/// A call site of host synchronisations in the job's code, as the hooks noted it (info
/// "sync_site" when first seen, "sync_sites" with the counts at exit; python/stallscope/_syncs.py).
struct SyncSite {
  int32_t pid = 0;
  int32_t rank = 0;
  std::string kind;  ///< "item", "synchronize", "copy_h2d", ... (python/stallscope/_syncs.py)
  std::string file;
  int64_t line = 0;
  std::string function;
  std::string user_file;  ///< when `file` is in an installed library: the job's own frame
  int64_t user_line = 0;
  std::optional<int64_t> count;  ///< calls counted; empty when the process did not exit normally
  int64_t first_ts_ns = 0;       ///< when it was first seen (its "sync_site" note, CLOCK_MONOTONIC)
};

/// What the job's experiment controls said they did (info "experiment",
/// python/stallscope/_experiment.py), summed over the job's processes. `present` is false for a
/// run without controls.
struct ExperimentNote {
  bool present = false;
  std::optional<int64_t> stop_after_steps;
  bool stopped = false;  ///< a process ended itself at stop_after_steps
  int64_t synthetic_batches_cached = 0;
  int64_t synthetic_batches_served = 0;
  std::string synthetic_not_applied;  ///< why a loader kept its real data, when one did
  int64_t saves_skipped = 0;
  int64_t saves_redirected = 0;
  int64_t saves_not_redirected = 0;  ///< torch.save to a file object: the job's own
  int64_t eval_forwards_cached = 0;
  int64_t eval_forwards_run = 0;
  std::string loader_set;  ///< the DataLoader settings applied, JSON
  int64_t loader_set_applied = 0;
  std::string loader_set_errors;
};

/// Every info record of a run, decoded.
struct InfoRecords {
  std::vector<TorchProcess> torch;   ///< the first per process
  std::vector<LoaderInfo> loaders;   ///< in the order they were noted
  std::vector<SyncSite> sync_sites;  ///< most calls first (sites without counts last)
  ExperimentNote experiment;
  JobInfo job;            ///< start-up and warm-up: CUDA, compiles, backends
  int64_t malformed = 0;  ///< records of a known kind that could not be decoded
  int64_t unknown = 0;    ///< records of no known kind (skipped)
};

/// Decodes every info item of `events`. Never fails: a malformed record is counted and skipped.
[[nodiscard]] InfoRecords DecodeInfoRecords(const phase::EventLog& events);

}  // namespace stallscope::rundir
