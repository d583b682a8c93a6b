#include "doctor/env_checks.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <string>

#include <fmt/format.h>

#include "doctor/host_checks.h"

namespace stallscope::doctor {
namespace {

using S = CheckStatus;

/// A variable whose value slows training, with why (source) and what to do.
struct EnvRule {
  std::string_view var;
  /// The values that trigger it; "*" = any value other than "" and "0".
  std::array<std::string_view, 3> values;
  CheckStatus status;
  std::string_view why;
  std::string_view fix;
};

// Sources: CUDA C++ Programming Guide (CUDA environment variables), NCCL documentation
// (environment variables), PyTorch documentation (torch.distributed, CUDA semantics,
// CUDA sanitizer), NVIDIA's TF32 announcement (NVIDIA_TF32_OVERRIDE), Python's documentation
// (PYTHONDEVMODE, PYTHONMALLOC, PYTHONTRACEMALLOC).
constexpr std::array<EnvRule, 13> kRules{{
    {"CUDA_LAUNCH_BLOCKING",
     {"1"},
     S::kFail,
     "every kernel launch waits for the kernel to finish, so the host can no longer queue work "
     "ahead of the GPU (a debugging setting)",
     "unset CUDA_LAUNCH_BLOCKING"},
    {"NCCL_DEBUG",
     {"TRACE", "trace"},
     S::kWarn,
     "NCCL logs every collective call on every rank",
     "unset NCCL_DEBUG (or NCCL_DEBUG=WARN)"},
    {"NCCL_P2P_DISABLE",
     {"1"},
     S::kWarn,
     "NCCL moves GPU-to-GPU traffic through host memory instead of NVLink or PCIe peer-to-peer",
     "unset it unless it works around a known hang (then fix the cause: ACS/IOMMU settings)"},
    {"NCCL_SHM_DISABLE",
     {"1"},
     S::kWarn,
     "NCCL does not use shared memory between the ranks of a node and falls back to the network",
     "unset NCCL_SHM_DISABLE"},
    {"NCCL_IB_DISABLE",
     {"1"},
     S::kWarn,
     "NCCL does not use InfiniBand/RoCE and sends inter-node traffic over TCP sockets",
     "unset NCCL_IB_DISABLE on an InfiniBand or RoCE cluster"},
    {"TORCH_NCCL_BLOCKING_WAIT",
     {"1"},
     S::kWarn,
     "the host blocks on every collective until it completes (PyTorch: async error handling "
     "catches hangs with less overhead)",
     "unset it; TORCH_NCCL_ASYNC_ERROR_HANDLING=1 with a timeout covers hangs"},
    {"NCCL_BLOCKING_WAIT",
     {"1"},
     S::kWarn,
     "the host blocks on every collective until it completes (the pre-2.2 name of "
     "TORCH_NCCL_BLOCKING_WAIT)",
     "unset it; TORCH_NCCL_ASYNC_ERROR_HANDLING=1 with a timeout covers hangs"},
    {"TORCH_DISTRIBUTED_DEBUG",
     {"DETAIL", "detail"},
     S::kWarn,
     "DETAIL checks every collective's consistency across ranks (PyTorch: it costs performance)",
     "unset it, or TORCH_DISTRIBUTED_DEBUG=INFO"},
    {"PYTORCH_NO_CUDA_MEMORY_CACHING",
     {"1"},
     S::kWarn,
     "PyTorch's caching allocator is off: every tensor allocation and free calls cudaMalloc / "
     "cudaFree, which synchronize",
     "unset it (a debugging setting for memory checkers)"},
    {"TORCH_CUDA_SANITIZER",
     {"*"},
     S::kWarn,
     "the CUDA sanitizer (CSAN) checks the streams of every kernel launch",
     "unset TORCH_CUDA_SANITIZER"},
    {"NVIDIA_TF32_OVERRIDE",
     {"0"},
     S::kWarn,
     "TF32 is off for the whole process: float32 matmuls and convolutions skip the Tensor Cores "
     "(Ampere and later)",
     "unset it, unless the job needs full float32 accuracy"},
    {"CUDA_CACHE_DISABLE",
     {"1"},
     S::kWarn,
     "the CUDA JIT cache is off: kernels shipped as PTX are compiled again at every start",
     "unset CUDA_CACHE_DISABLE"},
    {"PYTHONDEVMODE",
     {"*"},
     S::kWarn,
     "Python's development mode installs debug hooks on every memory allocation",
     "unset PYTHONDEVMODE"},
}};

// Python's own debug switches that take several values.
constexpr std::array<std::string_view, 3> kDebugMalloc{"debug", "malloc_debug", "pymalloc_debug"};

bool Matches(const EnvRule& rule, std::string_view value) {
  for (std::string_view v : rule.values) {
    if (v.empty()) continue;
    if (v == "*" ? !value.empty() && value != "0" : value == v) return true;
  }
  return false;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::optional<int64_t> ParseThreads(std::string_view value) {
  // OMP_NUM_THREADS may be a list per nesting level ("4,2"): the first is the outer level.
  value = value.substr(0, value.find(','));
  int64_t n = 0;
  const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || p != value.data() + value.size() || n <= 0) return std::nullopt;
  return n;
}

Check OmpCheck(const Facts& f) {
  const std::string id = "env.omp_num_threads";
  const std::string title = "intra-op threads";
  const uint32_t usable = UsableCpus(f.host);
  const int64_t workers = f.workers.value_or(0);
  const auto it = f.env.find("OMP_NUM_THREADS");
  if (it != f.env.end()) {
    const std::optional<int64_t> n = ParseThreads(it->second);
    if (!n) {
      return MakeCheck(id, title, S::kWarn,
                       fmt::format("OMP_NUM_THREADS='{}' is not a thread count", it->second),
                       fmt::format("export OMP_NUM_THREADS={}", usable));
    }
    if (*n > static_cast<int64_t>(usable)) {
      return MakeCheck(id, title, S::kWarn,
                       fmt::format("OMP_NUM_THREADS={} on {} usable CPUs: threads thrash the "
                                   "cores (seed 001 T3/U40)",
                                   *n, usable),
                       fmt::format("export OMP_NUM_THREADS={}", usable));
    }
    return MakeCheck(id, title, S::kOk,
                     fmt::format("OMP_NUM_THREADS={} on {} usable CPUs", *n, usable));
  }
  // Unset: torch starts one intra-op thread per CPU of its affinity mask, whatever the quota.
  const int64_t threads = f.python.torch_threads.value_or(
      f.host.allowed_cpus.empty() ? f.host.online_cpus
                                  : static_cast<int64_t>(f.host.allowed_cpus.size()));
  // DataLoader workers run one thread each (torch.utils.data: set_num_threads(1) in a worker).
  if (threads + workers > static_cast<int64_t>(usable) && threads > 1) {
    const int64_t advice = std::max<int64_t>(1, static_cast<int64_t>(usable) - workers);
    return MakeCheck(
        id, title, S::kWarn,
        fmt::format("OMP_NUM_THREADS is not set: torch runs {} intra-op threads{} on {} usable "
                    "CPUs, so CPU work thrashes the cores (seed 001 T3/U40)",
                    threads,
                    workers > 0 ? fmt::format(" next to {} DataLoader worker{}", workers,
                                              workers == 1 ? "" : "s")
                                : "",
                    usable),
        fmt::format("export OMP_NUM_THREADS={}", advice));
  }
  return MakeCheck(id, title, S::kOk,
                   fmt::format("OMP_NUM_THREADS is not set: torch runs {} intra-op thread{} on {} "
                               "usable CPUs",
                               threads, threads == 1 ? "" : "s", usable));
}

std::optional<Check> NcclInfoCheck(const Facts& f) {
  const auto debug = f.env.find("NCCL_DEBUG");
  const auto subsys = f.env.find("NCCL_DEBUG_SUBSYS");
  if (debug == f.env.end() || Lower(debug->second) != "info" || subsys == f.env.end()) {
    return std::nullopt;
  }
  const std::string s = Lower(subsys->second);
  if (s.find("coll") == std::string::npos && s.find("all") == std::string::npos) {
    return std::nullopt;
  }
  return MakeCheck("env.nccl_debug", "NCCL_DEBUG", S::kWarn,
                   fmt::format("NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS={}: NCCL logs every "
                               "collective call on every rank",
                               subsys->second),
                   "unset NCCL_DEBUG_SUBSYS (INFO alone logs only at setup)");
}

}  // namespace

std::vector<std::string_view> JudgedVariables() {
  std::vector<std::string_view> names;
  for (const EnvRule& rule : kRules) names.push_back(rule.var);
  names.push_back("PYTHONMALLOC");
  names.push_back("PYTHONTRACEMALLOC");
  return names;
}

std::vector<Check> EnvChecks(const Facts& f) {
  std::vector<Check> out{OmpCheck(f)};
  const size_t before = out.size();
  for (const EnvRule& rule : kRules) {
    const auto it = f.env.find(std::string(rule.var));
    if (it == f.env.end() || !Matches(rule, it->second)) continue;
    out.push_back(MakeCheck(fmt::format("env.{}", Lower(rule.var)), std::string(rule.var),
                            rule.status, fmt::format("{}={}: {}", rule.var, it->second, rule.why),
                            std::string(rule.fix)));
  }
  if (auto info = NcclInfoCheck(f)) out.push_back(std::move(*info));
  if (const auto it = f.env.find("PYTHONMALLOC");
      it != f.env.end() &&
      std::find(kDebugMalloc.begin(), kDebugMalloc.end(), it->second) != kDebugMalloc.end()) {
    out.push_back(MakeCheck("env.pythonmalloc", "PYTHONMALLOC", S::kWarn,
                            fmt::format("PYTHONMALLOC={}: Python's debug allocator checks every "
                                        "allocation",
                                        it->second),
                            "unset PYTHONMALLOC"));
  }
  if (const auto it = f.env.find("PYTHONTRACEMALLOC");
      it != f.env.end() && !it->second.empty() && it->second != "0") {
    out.push_back(MakeCheck("env.pythontracemalloc", "PYTHONTRACEMALLOC", S::kWarn,
                            fmt::format("PYTHONTRACEMALLOC={}: tracemalloc records a traceback "
                                        "for every allocation",
                                        it->second),
                            "unset PYTHONTRACEMALLOC"));
  }
  if (out.size() == before) {
    out.push_back(MakeCheck("env.variables", "environment", S::kOk,
                            fmt::format("none of the {} variables known to slow training is set "
                                        "(CUDA_LAUNCH_BLOCKING, NCCL_*, debug modes, ...)",
                                        JudgedVariables().size())));
  }
  return out;
}

}  // namespace stallscope::doctor
