#include "diagnose/trace_rules.h"

#include <fmt/format.h>

#include "diagnose/rule_util.h"
#include "trace/host_attribution.h"

namespace stallscope::diagnose {

using namespace rule_util;  // NOLINT: the rules' shared vocabulary
using trace::IdleCause;

std::optional<Finding> HostLaunchRule(const Facts& c) {
  if (!c.trace || c.trace->gpu_devices == 0) return std::nullopt;
  const TraceFacts& t = *c.trace;
  double launch = t.Idle(IdleCause::kLaunchOverhead);
  double cpu = t.Idle(IdleCause::kCpuOther);
  double idle = launch + cpu;
  if (idle < T.launch_bound_idle_share.value) return std::nullopt;
  bool shallow = t.queue_mean && *t.queue_mean < T.launch_queue_shallow.value;
  Finding f = Make(FindingClass::kHostLaunchBound,
                   shallow ? T.confidence_pattern.value : T.confidence_weak.value, idle,
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
        Ev(fmt::format("launch queue {:.1f} kernels on average (shallow below "
                       "{:.0f}, {})",
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
