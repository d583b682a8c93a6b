#include "diagnose/verdict.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/name_table.h"
#include "diagnose/gpu_rules.h"
#include "diagnose/loop_rules.h"
#include "diagnose/rule_util.h"
#include "diagnose/stack_attribution.h"
#include "diagnose/verdict_rules.h"

namespace stallscope::diagnose {

std::string_view ComputeTimeName(ComputeTime t) { return NameIn(kComputeTimeNames, t); }

std::string_view FindingClassName(FindingClass c) {
  switch (c) {
    case FindingClass::kGpuBound:
      return "gpu_bound";
    case FindingClass::kDataBoundCpu:
      return "data_bound_cpu";
    case FindingClass::kDataBoundIo:
      return "data_bound_io";
    case FindingClass::kHostSyncOrLogging:
      return "host_sync_or_logging";
    case FindingClass::kPeriodicSideWork:
      return "periodic_side_work";
    case FindingClass::kEpochBoundaryStall:
      return "epoch_boundary_stall";
    case FindingClass::kPrefetchTooShallow:
      return "prefetch_too_shallow";
    case FindingClass::kThreadOversubscription:
      return "thread_oversubscription";
    case FindingClass::kGpuThrottled:
      return "gpu_throttled";
    case FindingClass::kUtilMisleading:
      return "util_misleading";
    case FindingClass::kLoadImbalance:
      return "load_imbalance";
    case FindingClass::kStraggler:
      return "straggler";
    case FindingClass::kSmallBatch:
      return "small_batch";
    case FindingClass::kGpuMemoryPressure:
      return "gpu_memory_pressure";
    case FindingClass::kHostLaunchBound:
      return "host_launch_bound";
    case FindingClass::kCommunicationBound:
      return "communication_bound";
    case FindingClass::kHostStepBoundary:
      return "host_step_boundary";
    case FindingClass::kAllocatorChurn:
      return "allocator_churn";
    case FindingClass::kStartupWindow:
      return "startup_window";
  }
  return "unknown";
}

Verdict RankFindings(std::vector<Finding> findings) {
  Verdict v;
  if (findings.empty()) return v;
  auto is_gpu_bound = [](const Finding& f) { return f.cls == FindingClass::kGpuBound; };
  bool costly_other = std::any_of(findings.begin(), findings.end(), [&](const Finding& f) {
    return !is_gpu_bound(f) && f.cost_fraction >= kThresholds.min_cost.value;
  });
  auto best = findings.end();
  if (!costly_other) best = std::find_if(findings.begin(), findings.end(), is_gpu_bound);
  if (best == findings.end()) {
    // The good case (gpu_bound) is principal only when nothing else costs ≥ 5% of wall time.
    for (auto it = findings.begin(); it != findings.end(); ++it) {
      if (costly_other && is_gpu_bound(*it)) continue;
      if (best == findings.end() ||
          it->cost_fraction * it->confidence > best->cost_fraction * best->confidence) {
        best = it;
      }
    }
  }
  v.principal = std::move(*best);
  findings.erase(best);
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    return a.cost_fraction > b.cost_fraction;
  });
  v.secondary = std::move(findings);
  return v;
}

namespace {

/// Classes whose cause is host CPU time: other work on the host can cause or inflate them.
bool HostCpuClass(FindingClass c) {
  switch (c) {
    case FindingClass::kDataBoundCpu:
    case FindingClass::kHostSyncOrLogging:
    case FindingClass::kThreadOversubscription:
    case FindingClass::kEpochBoundaryStall:
    case FindingClass::kPrefetchTooShallow:
    case FindingClass::kHostLaunchBound:
    case FindingClass::kHostStepBoundary:
    case FindingClass::kStraggler:
      return true;
    default:
      return false;
  }
}

/// The discounts that hold for the whole verdict, applied before ranking: corrupt phase data
/// (every finding a lead, none confident) and a host busy with other work (the host-CPU findings
/// less certain). Returns the caveats that say so.
std::vector<std::string> ApplyCaveats(const Facts& c, std::vector<Finding>& findings) {
  std::vector<std::string> caveats;
  auto cap = [&findings](double most, auto applies) {
    for (Finding& f : findings) {
      if (applies(f)) f.confidence = std::min(f.confidence, most);
    }
  };
  if (c.corrupt_records > 0) {
    cap(kThresholds.corrupt_data_confidence_max.value, [](const Finding&) { return true; });
    caveats.push_back(fmt::format(
        "uncertain: {} corrupt phase records were skipped; no finding is more than {:.0f}% "
        "confident",
        c.corrupt_records, kThresholds.corrupt_data_confidence_max.value * 100));
  }
  // Issue 27 B20: a process whose ring could not be created left no phase: silence is no
  // evidence (of a GPU-bound job, or of no training loop). Missing data caps as corrupt data.
  if (!c.unrecorded_processes.empty()) {
    cap(kThresholds.corrupt_data_confidence_max.value, [](const Finding&) { return true; });
    caveats.push_back(fmt::format(
        "uncertain: {} process{} recorded no phases, {} phase ring could not be created ({}); "
        "the steps and phases are incomplete and no finding is more than {:.0f}% confident",
        c.unrecorded_processes.size(), c.unrecorded_processes.size() == 1 ? "" : "es",
        c.unrecorded_processes.size() == 1 ? "its" : "their", c.unrecorded_processes.front(),
        kThresholds.corrupt_data_confidence_max.value * 100));
  }
  if (c.HostBusy()) {
    cap(kThresholds.busy_host_confidence_max.value,
        [](const Finding& f) { return HostCpuClass(f.cls); });
    caveats.push_back(fmt::format(
        "{} other processes used {:.1f} of the {} CPUs during the run; host-CPU "
        "findings are less certain, predictions count only the job's share of the CPUs, and an "
        "idle host would run it faster",
        kBusyHostCaveat, *c.other_cpu, c.host_cpus));
  }
  return caveats;
}

}  // namespace

namespace {

using analysis::LedgerPart;

/// Whether findings of class `cls` explain the ledger's part `p` (issue 39): they name why that
/// part is large, so the principal part's best one leads. gpu_bound is compute's own finding;
/// thread oversubscription slows whatever the CPUs run (compute on a CPU, the loaders).
bool Explains(FindingClass cls, LedgerPart p, const Facts& c) {
  switch (cls) {
    case FindingClass::kGpuBound:
    case FindingClass::kGpuThrottled:
    case FindingClass::kSmallBatch:
      return p == LedgerPart::kCompute;
    case FindingClass::kUtilMisleading:
      // CUDA events measured the compute part itself: NVML's utilization misleads no one then.
      return p == LedgerPart::kCompute && !c.compute_on_gpu;
    case FindingClass::kThreadOversubscription:
      return p == LedgerPart::kCompute || p == LedgerPart::kData;
    case FindingClass::kDataBoundCpu:
    case FindingClass::kDataBoundIo:
    case FindingClass::kEpochBoundaryStall:
    case FindingClass::kPrefetchTooShallow:
      return p == LedgerPart::kData;
    case FindingClass::kCommunicationBound:
      return p == LedgerPart::kComm;
    case FindingClass::kStraggler:
      return p == LedgerPart::kRankWait;
    case FindingClass::kLoadImbalance:
      return p == (c.ranks >= 2 ? LedgerPart::kRankWait : LedgerPart::kCompute);
    case FindingClass::kPeriodicSideWork:
      return p == LedgerPart::kSideWork;
    case FindingClass::kHostSyncOrLogging:
    case FindingClass::kHostLaunchBound:
    case FindingClass::kHostStepBoundary:
    case FindingClass::kAllocatorChurn:
      return p == LedgerPart::kHostWork;
    case FindingClass::kGpuMemoryPressure:
    case FindingClass::kStartupWindow:
      return false;
  }
  return false;
}

/// A part's finding when no rule spoke for it.
std::optional<Finding> PartFinding(LedgerPart p, const Facts& c) {
  switch (p) {
    case LedgerPart::kCompute:
      return GpuBoundFinding(c);
    case LedgerPart::kData:
      return DataBoundFinding(c);
    case LedgerPart::kComm:
      return CommWaitFinding(c);
    case LedgerPart::kRankWait:
      return StragglerFinding(c);
    case LedgerPart::kSideWork:
      return SideWorkFinding(c);
    case LedgerPart::kHostWork:
      return HostWorkFinding(c);
    case LedgerPart::kUnaccounted:
      return std::nullopt;
  }
  return std::nullopt;
}

/// The bar a lost part clears to outrank the model's work: its rule's threshold.
double PartThreshold(LedgerPart p) {
  switch (p) {
    case LedgerPart::kData:
      return kThresholds.data_bound_share.value;
    case LedgerPart::kComm:
      return kThresholds.comm_wait_share.value;
    case LedgerPart::kRankWait:
      return kThresholds.straggler_wait_share.value;
    case LedgerPart::kSideWork:
      return kThresholds.periodic_share.value;
    case LedgerPart::kHostWork:
      return kThresholds.host_sync_other_share.value;
    case LedgerPart::kCompute:
      return kThresholds.gpu_bound_step_share.value;
    case LedgerPart::kUnaccounted:
      return 1.0;
  }
  return 1.0;
}

/// A lost part's weight in choosing the principal: its share of the step, or what the costliest
/// finding explaining it costs when that is more (periodic side work in `other` is host work in
/// the ledger; an epoch-start stall is part of data's share).
double PartWeight(LedgerPart p, const Facts& c, const std::vector<Finding>& findings) {
  double w = c.ledger.job.Share(p);
  for (const Finding& f : findings) {
    if (f.cls != FindingClass::kGpuBound && Explains(f.cls, p, c)) w = std::max(w, f.cost_fraction);
  }
  return w;
}

/// A lost part clears its bar: its share reaches its rule's threshold, or a significant finding
/// that explains it costs at least min_cost (an epoch-start stall, periodic checkpoints).
bool Significant(LedgerPart p, const Facts& c, const std::vector<Finding>& findings) {
  if (c.ledger.job.Share(p) >= PartThreshold(p)) return true;
  return std::any_of(findings.begin(), findings.end(), [&](const Finding& f) {
    return f.cls != FindingClass::kGpuBound && f.significant && Explains(f.cls, p, c) &&
           f.cost_fraction >= kThresholds.min_cost.value;
  });
}

/// The parts a run's principal finding may come from, first choice first. Compute (gpu_bound,
/// the good case, or what makes the work slow) when the model's own work is more than
/// gpu_bound_step_share of the step and no lost part clears its rule's threshold: the issue-39
/// ResNet-50 with 88% of the GPU busy and 7% waiting for data. Else the parts lost to something a
/// user can act on, by weight, those of at least min_cost; compute last.
std::vector<LedgerPart> PrincipalOrder(const Facts& c, const std::vector<Finding>& findings) {
  std::vector<std::pair<LedgerPart, double>> lost;
  bool significant = false;
  for (LedgerPart p : {LedgerPart::kData, LedgerPart::kComm, LedgerPart::kRankWait,
                       LedgerPart::kSideWork, LedgerPart::kHostWork}) {
    const double w = PartWeight(p, c, findings);
    significant = significant || Significant(p, c, findings);
    if (w >= kThresholds.min_cost.value) lost.emplace_back(p, w);
  }
  std::stable_sort(lost.begin(), lost.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<LedgerPart> order;
  const bool work = WorkShare(c) > kThresholds.gpu_bound_step_share.value && !significant;
  if (work) order.push_back(LedgerPart::kCompute);
  for (const auto& [p, w] : lost) order.push_back(p);
  if (!work) order.push_back(LedgerPart::kCompute);
  return order;
}

/// Issue 39: a run with steady steps always has a principal finding, the one that explains the
/// ledger part PrincipalOrder puts first: the best of the findings that explain it (cost ×
/// confidence; for compute a finding that costs ≥ min_cost before gpu_bound, which costs
/// nothing), else the part's own finding at whatever share it has. The rest are secondaries.
Verdict RankByLedger(const Facts& c, std::vector<Finding> findings) {
  Verdict v;
  for (LedgerPart p : PrincipalOrder(c, findings)) {
    auto best = findings.end();
    double best_score = -1;
    for (auto it = findings.begin(); it != findings.end(); ++it) {
      if (!Explains(it->cls, p, c)) continue;
      double score = it->cost_fraction * it->confidence;
      if (it->cls == FindingClass::kGpuBound) {
        score = 0;  // the good case: what explains a slow GPU leads
      } else if (p == LedgerPart::kCompute && it->cost_fraction < kThresholds.min_cost.value) {
        continue;
      }
      if (score > best_score) best = it, best_score = score;
    }
    if (best == findings.end()) {
      std::optional<Finding> own = PartFinding(p, c);
      if (!own) continue;
      findings.push_back(std::move(*own));
      best = findings.end() - 1;
    }
    v.principal = std::move(*best);
    findings.erase(best);
    break;
  }
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    return a.cost_fraction > b.cost_fraction;
  });
  v.secondary = std::move(findings);
  return v;
}

/// What the run's data leaves uncertain beyond the findings' own confidence: events.bin damaged,
/// a steady state too short for a sure verdict.
void DataCaveats(const Facts& c, std::vector<std::string>& caveats) {
  if (!c.events_damage.empty()) {
    // Issue 27 B10: the phases then come from the rings alone, which keep each process's last
    // records only; with no ring left there are none, and "no phases" is no finding.
    caveats.push_back(fmt::format(
        "events.bin is corrupt or unreadable ({}): {}", c.events_damage,
        c.phases_lost
            ? "no ring in phases/ holds the phases either, so this run's phases are lost"
            : "the phases were read from the rings in phases/ instead, which keep only each "
              "process's latest records"));
  }
  if (c.has_steps && !c.steady_sure) {
    caveats.push_back(fmt::format(
        "the steady state is only {:.1f} s ({} step{}); a sure verdict needs at least {:.0f} s "
        "and {:.0f} steady steps: run it longer",
        c.steady_s, c.steady_steps, c.steady_steps == 1 ? "" : "s", kThresholds.steady_sure_s.value,
        kThresholds.steady_sure_steps.value));
  }
}

}  // namespace

Verdict Diagnose(const Facts& context) {
  std::vector<Finding> findings;
  for (const NamedRule& rule : Rules()) {
    if (auto f = rule.fn(context)) findings.push_back(std::move(*f));
  }
  const bool by_ledger = !context.trace && !context.ledger.empty();
  // A CPU-only trace is compute-bound only when no data or sync finding costs ≥ 10% (a run's
  // ledger weighs compute against them).
  bool data_or_sync = std::any_of(findings.begin(), findings.end(), [](const Finding& f) {
    return (f.cls == FindingClass::kDataBoundCpu || f.cls == FindingClass::kDataBoundIo ||
            f.cls == FindingClass::kHostSyncOrLogging) &&
           f.cost_fraction >= kThresholds.cpu_compute_other_max.value;
  });
  if (!by_ledger && !context.has_gpu && data_or_sync) {
    std::erase_if(findings, [](const Finding& f) { return f.cls == FindingClass::kGpuBound; });
  }
  // A profiled window of CUDA start-up says nothing about steady-state training: its finding is
  // the whole verdict (the others would give training advice from set-up calls).
  auto startup = std::find_if(findings.begin(), findings.end(), [](const Finding& f) {
    return f.cls == FindingClass::kStartupWindow;
  });
  if (startup != findings.end()) {
    Finding only = std::move(*startup);
    findings.clear();
    findings.push_back(std::move(only));
  }
  std::vector<std::string> caveats = ApplyCaveats(context, findings);
  if (context.gpu_use == GpuUsage::kNotUsed && context.idle_gpus > 0) {
    caveats.insert(
        caveats.begin(),
        fmt::format("this job does not use the GPU ({}): the verdict is the CPU side's; "
                    "the {} GPU{} sampled are left out",
                    context.gpu_use_why, context.idle_gpus, context.idle_gpus == 1 ? "" : "s"));
  }
  Verdict v =
      by_ledger ? RankByLedger(context, std::move(findings)) : RankFindings(std::move(findings));
  if (by_ledger && v.principal) {
    // A finding the ledger made principal when no rule spoke for it gets the same discounts.
    std::vector<Finding> one{*v.principal};
    (void)ApplyCaveats(context, one);
    v.principal->confidence = one.front().confidence;
  }
  DataCaveats(context, caveats);
  v.caveats = std::move(caveats);
  v.busy_host = context.HostBusy();  // ApplyCaveats' busy-host caveat, as a field
  v.compute_time = ComputeTime::kHost;
  if (context.compute_on_gpu) {
    v.compute_time = ComputeTime::kGpu;
    v.compute_time_note = fmt::format(
        "CUDA events: the compute phases keep the GPU busy {:.0f}% of the step, against {:.0f}% "
        "of it on the host; {:.0f}% of step time elsewhere was the host waiting for the GPU",
        context.gpu_busy_by_events.value_or(0) * 100, context.host_compute_share * 100,
        context.gpu_moved_share * 100);
  }
  AddStackEvidence(v, context.stacks);
  return v;
}

}  // namespace stallscope::diagnose
