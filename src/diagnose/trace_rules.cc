#include "diagnose/trace_rules.h"

#include <algorithm>
#include <string>

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

}  // namespace

std::optional<Finding> StartupRule(const Facts& c) {
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
  Rec(f, 0,
      "profile after warm-up: torch.profiler.profile(schedule=torch.profiler.schedule("
      "skip_first=10, wait=1, warmup=2, active=3), on_trace_ready=...) and prof.step() every "
      "iteration; then run `stallscope trace` on the new trace");
  Rec(f, 0,
      "or start the profiler after the first steps: start-up, torch.compile and cudnn.benchmark "
      "autotuning all run there and never again");
  SortRecs(f);
  return f;
}

std::optional<Finding> AllocatorChurnRule(const Facts& c) {
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
  return f;
}

std::optional<Finding> TraceSyncRule(const Facts& c) {
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
  Rec(f, 1,
      "avoid .item()/.cpu()/.tolist()/print(tensor) in the step loop: accumulate on the device "
      "(loss_sum += loss.detach()) and read it once per log interval");
  Rec(f, 0,
      "remove torch.cuda.synchronize() from the step loop (keep it for timing code you turn on "
      "deliberately); copy batches with pin_memory=True and .to(device, non_blocking=True)");
  SortRecs(f);
  return f;
}

std::optional<Finding> StepBoundaryRule(const Facts& c) {
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

std::optional<Finding> HostLaunchRule(const Facts& c) {
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
  return f;
}

std::optional<Finding> CommunicationRule(const Facts& c) {
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
  Rec(f, 2, "a faster interconnect, or check NCCL's transport (references/multinode.md)");
  SortRecs(f);
  return f;
}

}  // namespace stallscope::diagnose
