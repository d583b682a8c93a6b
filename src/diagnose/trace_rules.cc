#include "diagnose/trace_rules.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/units.h"
#include "diagnose/rule_util.h"
#include "trace/host_attribution.h"
#include "trace/names.h"

namespace stallscope::diagnose {

using namespace rule_util;  // NOLINT: the rules' shared vocabulary
using trace::IdleCause;

namespace {

using trace::IdlePosition;
using trace::RuntimeCallKind;

// "cudaMalloc ×120 1.2 s, cudaFree ×118 0.9 s" for the top calls of `kind` (at most 3).
std::string TopCalls(const TraceFacts& t, RuntimeCallKind kind) {
  std::string out;
  int shown = 0;
  for (const auto& c : t.top_calls) {
    if (c.kind != kind || shown == 3) continue;
    out += fmt::format("{}{} ×{} {}", out.empty() ? "" : ", ", c.name, c.count,
                       Secs(NsToSeconds(c.ns)));
    ++shown;
  }
  return out;
}

bool Shallow(const TraceFacts& t) {
  return t.queue_mean && *t.queue_mean < T.launch_queue_shallow.value;
}

// Memory calls recur in at least half the steps (steady-state churn, not warm-up).
bool Churning(const TraceFacts& t) {
  return t.steps >= 2 && static_cast<double>(t.steps_with_memory_calls) >=
                             T.allocator_churn_steps.value * static_cast<double>(t.steps);
}

// The fixes of each class, shared by its own rule and by the idle fallback (IdleFinding).
// Each sorts f's recommendations, cheapest first.

void StartupRecs(Finding& f) {
  Rec(f, 0,
      "profile after warm-up: torch.profiler.profile(schedule=torch.profiler.schedule("
      "skip_first=10, wait=1, warmup=2, active=3), on_trace_ready=...) and prof.step() every "
      "iteration; then run `stallscope trace` on the new trace");
  Rec(f, 0,
      "or start the profiler after the first steps: start-up, torch.compile and cudnn.benchmark "
      "autotuning all run there and never again");
  SortRecs(f);
}

void ChurnRecs(Finding& f) {
  Rec(f, 0,
      "remove torch.cuda.empty_cache() from the step loop: it returns the cache, so the next "
      "step cudaMallocs the same blocks again");
  Rec(f, 0,
      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow in place instead of new "
      "cudaMalloc calls when sizes vary");
  Rec(f, 1,
      "keep shapes steady (pad or bucket variable-length batches) so cached blocks fit the next "
      "step; allocate pinned host buffers once and reuse them");
  SortRecs(f);
}

void SyncRecs(Finding& f) {
  Rec(f, 1,
      "avoid .item()/.cpu()/.tolist()/print(tensor) in the step loop: accumulate on the device "
      "(loss_sum += loss.detach()) and read it once per log interval");
  Rec(f, 0,
      "remove torch.cuda.synchronize() from the step loop (keep it for timing code you turn on "
      "deliberately); copy batches with pin_memory=True and .to(device, non_blocking=True)");
  SortRecs(f);
}

void LaunchRecs(const TraceFacts& t, Finding& f) {
  Rec(f, 0,
      "a larger batch per step (fewer, longer kernels per sample) if memory allows (seed 001 "
      "T18)");
  if (t.cuda_graph_launches == 0) {
    Rec(f, 1,
        "torch.compile(model, mode=\"reduce-overhead\"): fused kernels replayed as CUDA graphs "
        "(seed 001 T15)");
  } else {
    Rec(f, 1,
        "torch.compile(model): fuse the small ops left outside the CUDA graphs (seed 001 T15)");
  }
  Rec(f, 1,
      "move Python work out of the step loop (per-step logging, metric math, list building) so "
      "the host stays ahead of the GPU");
  SortRecs(f);
}

void CommRecs(const Facts& c, Finding& f) {
  Rec(f, 0,
      "DDP: tune bucket_cap_mb and set gradient_as_bucket_view=True; FSDP: backward_prefetch and "
      "forward_prefetch (seed 001 T23)");
  Rec(f, 0, "gradient accumulation with model.no_sync() on the inner steps: all-reduce less often");
  Rec(f, 1,
      "remove per-step host syncs (.item(), prints) that serialize the comm stream (seed 001 "
      "T23)");
  if (c.ranks > 1) {
    Rec(f, 1, "look for a straggler rank: the others wait for it at every collective");
  }
  // Issue 41: the citation names a document that ships (the bundle's docs/).
  Rec(f, 2,
      "a faster interconnect, or check NCCL's transport: NCCL_DEBUG=INFO names each channel's "
      "(P2P, SHM, NET/IB, NET/Socket); `stallscope doctor` flags NCCL_P2P_DISABLE, "
      "NCCL_SHM_DISABLE and NCCL_IB_DISABLE (docs/commands/doctor.md)");
  SortRecs(f);
}

std::optional<Finding> StartupFinding(const Facts& c) {
  if (!c.trace) return std::nullopt;
  const TraceFacts& t = *c.trace;
  double setup = t.Runtime(RuntimeCallKind::kSetup);
  double memory = Churning(t) ? 0.0 : t.Runtime(RuntimeCallKind::kMemory);
  double share = std::min(1.0, setup + memory);
  if (share < T.startup_window_share.value) return std::nullopt;
  Finding f = Make(FindingClass::kStartupWindow, T.confidence_measured.value, share,
                   fmt::format("{} of the profiled window is CUDA start-up (context, streams, "
                               "modules{}), not training: profile steady state to find the "
                               "bottleneck",
                               Pct(share), memory > 0 ? ", first allocations" : ""));
  f.evidence.push_back(
      Ev(fmt::format("set-up calls take {} of the window (threshold {} with memory calls, {}){}{}",
                     Pct(setup), Pct(T.startup_window_share.value), T.startup_window_share.cite(),
                     setup > 0 ? ": " : "", TopCalls(t, RuntimeCallKind::kSetup)),
         "trace.runtime_share.setup", setup, "fraction", T.startup_window_share.value));
  if (memory > 0) {
    f.evidence.push_back(Ev(fmt::format("memory-management calls take {} of the window, in "
                                        "{} of {} steps: {}",
                                        Pct(memory), t.steps_with_memory_calls, t.steps,
                                        TopCalls(t, RuntimeCallKind::kMemory)),
                            "trace.runtime_share.memory", memory, "fraction"));
  }
  f.evidence.push_back(Ev(fmt::format("{} kernels ran in the window", t.kernels), "trace.kernels",
                          static_cast<double>(t.kernels), "kernels"));
  StartupRecs(f);
  return f;
}

std::optional<Finding> ChurnFinding(const Facts& c) {
  if (!c.trace || c.trace->gpu_devices == 0) return std::nullopt;
  const TraceFacts& t = *c.trace;
  double idle = t.Idle(IdleCause::kMemory);
  if (!Churning(t) || idle < T.allocator_churn_idle_share.value) return std::nullopt;
  double per_step = static_cast<double>(t.memory_calls_in_steps) / static_cast<double>(t.steps);
  Finding f = Make(FindingClass::kAllocatorChurn, T.confidence_strong.value, idle,
                   fmt::format("the GPU idles {} of the time while the host allocates or frees "
                               "device memory, in {} of {} steps: the caching allocator asks "
                               "the driver every step",
                               Pct(idle), t.steps_with_memory_calls, t.steps));
  f.evidence.push_back(Ev(fmt::format("GPU idle during memory-management calls {} of the window "
                                      "(threshold {}, {})",
                                      Pct(idle), Pct(T.allocator_churn_idle_share.value),
                                      T.allocator_churn_idle_share.cite()),
                          "trace.idle_share.memory", idle, "fraction",
                          T.allocator_churn_idle_share.value));
  f.evidence.push_back(
      Ev(fmt::format("memory calls in {} of {} steps, {:.1f} per step: {} "
                     "(threshold {} of steps, {})",
                     t.steps_with_memory_calls, t.steps, per_step,
                     TopCalls(t, RuntimeCallKind::kMemory), Pct(T.allocator_churn_steps.value),
                     T.allocator_churn_steps.cite()),
         "trace.memory_calls_per_step", per_step, "per step"));
  ChurnRecs(f);
  return f;
}

std::optional<Finding> SyncFinding(const Facts& c) {
  const TraceFacts& t = *c.trace;
  double during = t.Idle(IdleCause::kSync);
  double after = t.At(IdlePosition::kAfterSync);
  double cost = std::max(during, after);
  if (cost < T.trace_sync_idle_share.value) return std::nullopt;
  double per_step =
      t.steps > 0 ? static_cast<double>(t.host_syncs) / static_cast<double>(t.steps) : 0.0;
  Finding f = Make(FindingClass::kHostSyncOrLogging, T.confidence_pattern.value, cost,
                   fmt::format("the GPU idles {} of the time during host syncs or right after "
                               "one ({:.1f} per step): the queue drains, then waits for the host "
                               "to launch again",
                               Pct(cost), per_step));
  f.evidence.push_back(
      Ev(fmt::format("GPU idle while a sync ran {}, in gaps that began at a sync {} (threshold "
                     "{}, {})",
                     Pct(during), Pct(after), Pct(T.trace_sync_idle_share.value),
                     T.trace_sync_idle_share.cite()),
         "trace.idle_share.sync", cost, "fraction", T.trace_sync_idle_share.value));
  std::string calls = TopCalls(t, RuntimeCallKind::kSync);
  f.evidence.push_back(Ev(fmt::format("{} host syncs in the window{}{}", t.host_syncs,
                                      calls.empty() ? "" : ": ", calls),
                          "host_syncs_per_step", per_step, "per step"));
  if (t.queue_mean && !Shallow(t)) {
    f.evidence.push_back(Ev(fmt::format("launch queue {:.0f} kernels on average: the host runs "
                                        "ahead until a sync drains the queue",
                                        *t.queue_mean),
                            "trace.queue_mean", *t.queue_mean, "kernels",
                            T.launch_queue_shallow.value));
  }
  SyncRecs(f);
  return f;
}

std::optional<Finding> StepBoundaryFinding(const Facts& c) {
  if (!c.trace || c.trace->gpu_devices == 0 || !c.trace->queue_mean) return std::nullopt;
  const TraceFacts& t = *c.trace;
  if (Shallow(t)) return std::nullopt;  // launch-bound's case
  double start = t.At(IdlePosition::kStepStart);
  double end = t.At(IdlePosition::kStepEnd);
  double host = t.Idle(IdleCause::kLaunchOverhead) + t.Idle(IdleCause::kCpuOther) +
                t.Idle(IdleCause::kUnattributed);
  double cost = std::min(start + end, host);
  if (cost < T.step_boundary_idle_share.value) return std::nullopt;
  Finding f = Make(
      FindingClass::kHostStepBoundary, T.confidence_pattern.value, cost,
      fmt::format("the GPU idles {} of the time at step boundaries (start {}, end {}) while the "
                  "host finishes one step and prepares the next; inside the step the host stays "
                  "ahead ({:.0f} kernels queued on average)",
                  Pct(cost), Pct(start), Pct(end), *t.queue_mean));
  f.evidence.push_back(Ev(fmt::format("GPU idle at the start or end of steps {} of the window, "
                                      "with the host in launches or CPU ops (threshold {}, {})",
                                      Pct(cost), Pct(T.step_boundary_idle_share.value),
                                      T.step_boundary_idle_share.cite()),
                          "trace.idle_position.step_boundary", cost, "fraction",
                          T.step_boundary_idle_share.value));
  f.evidence.push_back(
      Ev(fmt::format("launch queue {:.0f} kernels on average (deep from {:.0f}, "
                     "{}): launching is not the limit inside the step",
                     *t.queue_mean, T.launch_queue_shallow.value, T.launch_queue_shallow.cite()),
         "trace.queue_mean", *t.queue_mean, "kernels", T.launch_queue_shallow.value));
  Rec(f, 0,
      "zero_grad(set_to_none=True) and a fused optimizer (torch.optim.AdamW(..., fused=True)): "
      "the step's end is the optimizer's many small launches");
  Rec(f, 1,
      "copy the next batch to the GPU ahead of time (pin_memory=True, .to(device, "
      "non_blocking=True) one step early) so a step does not start with a host copy");
  Rec(f, 1,
      "move per-step Python (logging, metric math, checkpoint checks) away from the step "
      "boundary, or capture the whole step with torch.compile(mode=\"reduce-overhead\")");
  SortRecs(f);
  return f;
}

std::optional<Finding> LaunchFinding(const Facts& c) {
  if (!c.trace || c.trace->gpu_devices == 0) return std::nullopt;
  const TraceFacts& t = *c.trace;
  // A deep queue says the host keeps ahead: then the idle is somewhere else (a sync, the step
  // boundary, a dependency) and the rules for those name it.
  if (t.queue_mean && !Shallow(t)) return std::nullopt;
  double launch = t.Idle(IdleCause::kLaunchOverhead);
  double cpu = t.Idle(IdleCause::kCpuOther);
  double idle = launch + cpu;
  if (idle < T.launch_bound_idle_share.value) return std::nullopt;
  Finding f = Make(FindingClass::kHostLaunchBound,
                   t.queue_mean ? T.confidence_pattern.value : T.confidence_weak.value, idle,
                   fmt::format("the GPU is idle {} of the time while the host launches kernels "
                               "({}) or runs other CPU ops ({})",
                               Pct(idle), Pct(launch), Pct(cpu)));
  f.evidence.push_back(Ev(fmt::format("GPU idle during launches/CPU ops {} of the window "
                                      "(threshold {}, {})",
                                      Pct(idle), Pct(T.launch_bound_idle_share.value),
                                      T.launch_bound_idle_share.cite()),
                          "trace.idle_share.host", idle, "fraction",
                          T.launch_bound_idle_share.value));
  if (t.queue_mean) {
    f.evidence.push_back(
        Ev(fmt::format("launch queue {:.1f} kernels on average: each kernel waits for its launch "
                       "(shallow below {:.0f}, {})",
                       *t.queue_mean, T.launch_queue_shallow.value, T.launch_queue_shallow.cite()),
           "trace.queue_mean", *t.queue_mean, "kernels", T.launch_queue_shallow.value));
  }
  if (t.kernel_mean_us) {
    f.evidence.push_back(
        Ev(fmt::format("{} kernels, {:.1f} µs each on average", t.kernels, *t.kernel_mean_us),
           "trace.kernel_mean_us", *t.kernel_mean_us, "µs"));
  }
  LaunchRecs(t, f);
  return f;
}

std::optional<Finding> CommFinding(const Facts& c) {
  if (!c.trace || c.trace->gpu_devices == 0) return std::nullopt;
  const TraceFacts& t = *c.trace;
  double waiting = t.Idle(IdleCause::kDependency);
  double exposed_comm = t.comm_share * (1.0 - t.overlap_share.value_or(0.0));
  double cost = waiting + exposed_comm;
  if (cost < T.comm_exposed_share.value) return std::nullopt;
  bool deep = t.queue_mean && *t.queue_mean >= T.launch_queue_shallow.value;
  Finding f =
      Make(FindingClass::kCommunicationBound,
           deep || t.comm_share > 0 ? T.confidence_strong.value : T.confidence_weak.value, cost,
           fmt::format("{} of the time goes to communication compute does not hide "
                       "({}) or to the GPU waiting on a dependency with work queued ({})",
                       Pct(cost), Pct(exposed_comm), Pct(waiting)));
  f.evidence.push_back(
      Ev(fmt::format("exposed communication + dependency waits {} of the window "
                     "(threshold {}, {})",
                     Pct(cost), Pct(T.comm_exposed_share.value), T.comm_exposed_share.cite()),
         "trace.comm_exposed_share", cost, "fraction", T.comm_exposed_share.value));
  if (t.comm_share > 0) {
    f.evidence.push_back(Ev(fmt::format("collectives run {} of the window, {} of it overlapped "
                                        "with compute",
                                        Pct(t.comm_share), Pct(t.overlap_share.value_or(0))),
                            "trace.comm_share", t.comm_share, "fraction"));
  }
  if (deep) {
    f.evidence.push_back(Ev(fmt::format("launch queue {:.0f} kernels on average: the host is "
                                        "ahead, the GPU waits on something else",
                                        *t.queue_mean),
                            "trace.queue_mean", *t.queue_mean, "kernels",
                            T.launch_queue_shallow.value));
  }
  CommRecs(c, f);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Issue 26: a window whose GPU idles ≥ trace_idle_share that no rule above explains (the H100
// trace: 19% idle, 53% of it while the host ran Python mid-step with 15 kernels queued on
// average, so neither launch-bound's shallow queue nor the step boundary held) is named by the
// largest attributed cause of its idle. Each class's public rule returns the fallback for its own
// class, so the verdict has it once.
// ---------------------------------------------------------------------------------------------

/// The class that names what the host did while the GPU idled; nullopt for kUnattributed (the
/// host idle or not traced: no cause to name).
std::optional<FindingClass> ClassOfCause(IdleCause cause) {
  switch (cause) {
    case IdleCause::kSync:
      return FindingClass::kHostSyncOrLogging;
    case IdleCause::kDataLoader:
      return FindingClass::kDataBoundCpu;  // a trace cannot split CPU from I/O: as data_bound's
    case IdleCause::kDependency:
      return FindingClass::kCommunicationBound;
    case IdleCause::kSetup:
      return FindingClass::kStartupWindow;
    case IdleCause::kMemory:
      return FindingClass::kAllocatorChurn;
    case IdleCause::kLaunchOverhead:
    case IdleCause::kCpuOther:
      return FindingClass::kHostLaunchBound;  // the GPU waits for the host's next launch
    case IdleCause::kUnattributed:
      return std::nullopt;
  }
  return std::nullopt;
}

/// The largest attributed cause of a window's GPU idle, grouped by the class that names it.
struct IdleCulprit {
  FindingClass cls = FindingClass::kHostLaunchBound;
  double idle = 0;                ///< all GPU idle, share of the window
  double share = 0;               ///< the group's idle, share of the window
  std::vector<IdleCause> causes;  ///< the group's causes with idle, largest first
};

std::optional<IdleCulprit> CulpritOf(const TraceFacts& t) {
  // Classes in the order their first cause claims (IdleCause priority): ties go to the first.
  std::vector<std::pair<FindingClass, double>> by_class;
  IdleCulprit out;
  for (size_t i = 0; i < trace::kIdleCauseCount; ++i) {
    out.idle += t.idle_share[i];
    auto cls = ClassOfCause(static_cast<IdleCause>(i));
    if (!cls) continue;
    auto it = std::find_if(by_class.begin(), by_class.end(),
                           [&](const auto& g) { return g.first == *cls; });
    if (it == by_class.end()) it = by_class.insert(by_class.end(), {*cls, 0.0});
    it->second += t.idle_share[i];
  }
  for (const auto& [cls, share] : by_class) {
    if (share > out.share) {
      out.cls = cls;
      out.share = share;
    }
  }
  if (out.share <= 0) return std::nullopt;
  for (size_t i = 0; i < trace::kIdleCauseCount; ++i) {
    auto cause = static_cast<IdleCause>(i);
    if (ClassOfCause(cause) == out.cls && t.idle_share[i] > 0) out.causes.push_back(cause);
  }
  std::stable_sort(out.causes.begin(), out.causes.end(),
                   [&t](IdleCause a, IdleCause b) { return t.Idle(a) > t.Idle(b); });
  return out;
}

/// A rule already names this window: a trace rule above, or data_bound from the phases (the
/// exposed DataLoader share; verdict_rules.cc DataBoundRule's gate).
bool Explained(const Facts& c) {
  if (c.steps > 0 && c.Share(kData) >= T.data_bound_share.value) return true;
  return StartupFinding(c) || ChurnFinding(c) || SyncFinding(c) || StepBoundaryFinding(c) ||
         LaunchFinding(c) || CommFinding(c);
}

std::string CauseList(const TraceFacts& t, double idle, const std::vector<IdleCause>& causes) {
  std::string out;
  for (IdleCause cause : causes) {
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", trace::IdleCauseName(cause),
                       Pct(t.Idle(cause) / idle));
  }
  return out;
}

std::vector<IdleCause> AllCauses(const TraceFacts& t) {
  std::vector<IdleCause> all;
  for (size_t i = 0; i < trace::kIdleCauseCount; ++i) {
    if (t.idle_share[i] > 0) all.push_back(static_cast<IdleCause>(i));
  }
  std::stable_sort(all.begin(), all.end(),
                   [&t](IdleCause a, IdleCause b) { return t.Idle(a) > t.Idle(b); });
  return all;
}

/// What the host was doing while the GPU waited, for the reason sentence.
std::string WhileText(const TraceFacts& t, const IdleCulprit& v) {
  switch (v.cls) {
    case FindingClass::kHostSyncOrLogging:
      return "while the host waited in synchronizing calls (.item(), .cpu(), synchronize) with "
             "nothing queued (sync)";
    case FindingClass::kDataBoundCpu:
      return "while the host was inside the DataLoader fetching the next batch (dataloader)";
    case FindingClass::kCommunicationBound:
      return "with the next kernels already queued, waiting on a collective or another stream "
             "(dependency)";
    case FindingClass::kStartupWindow:
      return "while the host ran CUDA set-up calls: context, streams, module loading, graph "
             "capture (setup)";
    case FindingClass::kAllocatorChurn:
      return "while the host allocated or freed device memory (memory)";
    default: {
      std::string out = "while the host";
      for (IdleCause cause : v.causes) {
        out += fmt::format("{} {} ({} {})", cause == v.causes.front() ? "" : " or",
                           cause == IdleCause::kCpuOther ? "ran Python and CPU ops between kernels"
                                                         : "was in launch calls",
                           trace::IdleCauseName(cause), Pct(t.Idle(cause) / v.idle));
      }
      return out;
    }
  }
}

/// The cause group as the subject of an evidence line.
std::string_view GroupWords(FindingClass cls) {
  switch (cls) {
    case FindingClass::kHostSyncOrLogging:
      return "synchronizing calls";
    case FindingClass::kDataBoundCpu:
      return "the DataLoader";
    case FindingClass::kCommunicationBound:
      return "dependency waits with work queued";
    case FindingClass::kStartupWindow:
      return "set-up calls";
    case FindingClass::kAllocatorChurn:
      return "memory calls";
    default:
      return "the host's Python, CPU ops and launches";
  }
}

std::string_view PositionWords(IdlePosition p) {
  switch (p) {
    case IdlePosition::kAfterSync:
      return "right after a host sync";
    case IdlePosition::kDataLoader:
      return "during DataLoader ranges";
    case IdlePosition::kStepStart:
      return "at the start of steps";
    case IdlePosition::kStepEnd:
      return "at the end of steps";
    case IdlePosition::kMidStep:
      return "mid-step";
    case IdlePosition::kOutsideSteps:
      return "outside the profiled steps";
  }
  return "";
}

/// "mid_step 89%, dataloader 11%": the positions with idle, largest first, shares of the idle.
std::string PositionList(const TraceFacts& t, double idle) {
  std::vector<IdlePosition> all;
  for (size_t i = 0; i < trace::kIdlePositionCount; ++i) {
    if (t.idle_position_share[i] > 0) all.push_back(static_cast<IdlePosition>(i));
  }
  std::stable_sort(all.begin(), all.end(),
                   [&t](IdlePosition a, IdlePosition b) { return t.At(a) > t.At(b); });
  std::string out;
  for (IdlePosition p : all) {
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", trace::IdlePositionName(p),
                       Pct(t.At(p) / idle));
  }
  return out;
}

IdlePosition TopPosition(const TraceFacts& t) {
  size_t top = 0;
  for (size_t i = 1; i < trace::kIdlePositionCount; ++i) {
    if (t.idle_position_share[i] > t.idle_position_share[top]) top = i;
  }
  return static_cast<IdlePosition>(top);
}

/// What the wait means, after the position.
std::string MeaningText(const TraceFacts& t, FindingClass cls) {
  switch (cls) {
    case FindingClass::kHostSyncOrLogging:
      return "the queue drains, then waits for the host to launch again";
    case FindingClass::kDataBoundCpu:
      return "the GPU starves for input";
    case FindingClass::kCommunicationBound:
      return "the GPU has work queued and waits on a dependency";
    case FindingClass::kStartupWindow:
      return "the window holds one-time set-up (lazy module loading, compile, graph capture), "
             "not only steady training";
    case FindingClass::kAllocatorChurn:
      return "the caching allocator asks the driver for memory while the GPU waits";
    default:
      if (t.queue_mean && !Shallow(t)) {
        return fmt::format(
            "the host keeps {:.0f} kernels queued on average but falls behind "
            "there, and the GPU waits for its next launch",
            *t.queue_mean);
      }
      return "the GPU waits for the host's next launch";
  }
}

/// The metric name of a cause group: its cause's name, "host" for launches + CPU ops (as
/// host_launch_bound's trace.idle_share.host).
std::string_view GroupName(const IdleCulprit& v) {
  return v.cls == FindingClass::kHostLaunchBound ? "host" : trace::IdleCauseName(v.causes.front());
}

void AddClassEvidence(const Facts& c, const IdleCulprit& v, Finding& f) {
  const TraceFacts& t = *c.trace;
  switch (v.cls) {
    case FindingClass::kHostLaunchBound:
      if (t.kernel_mean_us) {
        f.evidence.push_back(
            Ev(fmt::format("{} kernels, {:.1f} µs each on average", t.kernels, *t.kernel_mean_us),
               "trace.kernel_mean_us", *t.kernel_mean_us, "µs"));
      }
      break;
    case FindingClass::kHostSyncOrLogging:
      f.evidence.push_back(Ev(fmt::format("{} host syncs in the window", t.host_syncs),
                              "trace.host_syncs", static_cast<double>(t.host_syncs), "calls"));
      break;
    case FindingClass::kStartupWindow:
      f.evidence.push_back(Ev(fmt::format("set-up calls take {} of the window: {}",
                                          Pct(t.Runtime(RuntimeCallKind::kSetup)),
                                          TopCalls(t, RuntimeCallKind::kSetup)),
                              "trace.runtime_share.setup", t.Runtime(RuntimeCallKind::kSetup),
                              "fraction", T.startup_window_share.value));
      break;
    case FindingClass::kAllocatorChurn:
      f.evidence.push_back(
          Ev(fmt::format("memory calls in {} of {} steps: {}", t.steps_with_memory_calls, t.steps,
                         TopCalls(t, RuntimeCallKind::kMemory)),
             "trace.steps_with_memory_calls", static_cast<double>(t.steps_with_memory_calls),
             "steps"));
      break;
    case FindingClass::kCommunicationBound:
      if (t.comm_share > 0) {
        f.evidence.push_back(Ev(fmt::format("collectives run {} of the window, {} of it "
                                            "overlapped with compute",
                                            Pct(t.comm_share), Pct(t.overlap_share.value_or(0))),
                                "trace.comm_share", t.comm_share, "fraction"));
      }
      break;
    default:
      break;
  }
}

void DataRecs(const Facts& c, Finding& f) {
  if (c.loader && c.loader->num_workers == 0) {
    Rec(f, 0, "num_workers=0 → num_workers = CPU cores per rank − 1 (seed 001 T4)");
  } else {
    Rec(f, 0, "more DataLoader workers, up to CPU cores per rank − 1 (seed 001 T4)");
  }
  Rec(f, 0, "pin_memory=True with .to(device, non_blocking=True) (seed 001 T6)");
  Rec(f, 0,
      "run the job under `stallscope run` to tell CPU transforms (data_bound_cpu) from storage "
      "I/O (data_bound_io): it samples the loaders, which a trace does not");
  SortRecs(f);
}

void AddRecs(const Facts& c, const IdleCulprit& v, Finding& f) {
  const TraceFacts& t = *c.trace;
  switch (v.cls) {
    case FindingClass::kHostSyncOrLogging:
      return SyncRecs(f);
    case FindingClass::kDataBoundCpu:
      return DataRecs(c, f);
    case FindingClass::kCommunicationBound:
      return CommRecs(c, f);
    case FindingClass::kStartupWindow:
      return StartupRecs(f);
    case FindingClass::kAllocatorChurn:
      return ChurnRecs(f);
    default:
      Rec(f, 0,
          fmt::format("see what the host runs in the GPU's {} gaps: `stallscope trace "
                      "--export-perfetto merged.json`, then ui.perfetto.dev",
                      PositionWords(TopPosition(t))));
      return LaunchRecs(t, f);
  }
}

}  // namespace

std::optional<Finding> TraceIdleRule(const Facts& c) {
  if (!c.trace || c.trace->gpu_devices == 0) return std::nullopt;
  const TraceFacts& t = *c.trace;
  auto v = CulpritOf(t);
  if (!v || v->idle < T.trace_idle_share.value || Explained(c)) return std::nullopt;
  const FindingClass cls = v->cls;
  double of_idle = v->share / v->idle;
  IdlePosition where = TopPosition(t);
  double where_share = t.At(where) / v->idle;
  bool most = of_idle >= T.trace_idle_cause_most.value;
  Finding f = Make(
      cls, most ? T.confidence_fair.value : T.confidence_weak.value, v->share,
      fmt::format("the GPU is idle {} of the window; {} of that ({} of the window) "
                  "{}, {} {} ({} of the idle): {}",
                  Pct(v->idle), Pct(of_idle), Pct(v->share), WhileText(t, *v),
                  where_share >= T.trace_idle_cause_most.value ? "most of it" : "the largest part",
                  PositionWords(where), Pct(where_share), MeaningText(t, cls)));
  double unattributed = t.Idle(IdleCause::kUnattributed);
  f.evidence.push_back(Ev(fmt::format("GPU idle {} of the window (threshold {}, {}), {} of it "
                                      "attributed to what the host was doing",
                                      Pct(v->idle), Pct(T.trace_idle_share.value),
                                      T.trace_idle_share.cite(), Pct(1.0 - unattributed / v->idle)),
                          "trace.idle_share", v->idle, "fraction", T.trace_idle_share.value));
  f.evidence.push_back(
      Ev(fmt::format("{} explain {} of the idle ({} of the window), {} (threshold {}, {})",
                     GroupWords(cls), Pct(of_idle), Pct(v->share),
                     most ? "most of it: the cause" : "less than half: the likeliest of several",
                     Pct(T.trace_idle_cause_most.value), T.trace_idle_cause_most.cite()),
         fmt::format("trace.idle_cause_share.{}", GroupName(*v)), of_idle, "fraction of the idle",
         T.trace_idle_cause_most.value));
  f.evidence.push_back(
      Ev(fmt::format("GPU idle by what the host was doing: {} (unattributed: the host idle or "
                     "not traced)",
                     CauseList(t, v->idle, AllCauses(t))),
         "trace.idle_cause_share.unattributed", unattributed / v->idle, "fraction of the idle"));
  f.evidence.push_back(
      Ev(fmt::format("GPU idle by position in the step: {}", PositionList(t, v->idle)),
         fmt::format("trace.idle_position.{}", trace::IdlePositionName(where)), where_share,
         "fraction of the idle"));
  AddClassEvidence(c, *v, f);
  AddRecs(c, *v, f);
  return f;
}

std::optional<Finding> StartupRule(const Facts& c) { return StartupFinding(c); }

std::optional<Finding> AllocatorChurnRule(const Facts& c) { return ChurnFinding(c); }

std::optional<Finding> TraceSyncRule(const Facts& c) { return SyncFinding(c); }

std::optional<Finding> StepBoundaryRule(const Facts& c) { return StepBoundaryFinding(c); }

std::optional<Finding> HostLaunchRule(const Facts& c) { return LaunchFinding(c); }

std::optional<Finding> CommunicationRule(const Facts& c) { return CommFinding(c); }

}  // namespace stallscope::diagnose
