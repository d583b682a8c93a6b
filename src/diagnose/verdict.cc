#include "diagnose/verdict.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/name_table.h"
#include "diagnose/rule_util.h"

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

Verdict Diagnose(const Facts& context) {
  std::vector<Finding> findings;
  for (const NamedRule& rule : Rules()) {
    if (auto f = rule.fn(context)) findings.push_back(std::move(*f));
  }
  // A CPU-only run is compute-bound only when no data or sync finding costs ≥ 10%.
  bool data_or_sync = std::any_of(findings.begin(), findings.end(), [](const Finding& f) {
    return (f.cls == FindingClass::kDataBoundCpu || f.cls == FindingClass::kDataBoundIo ||
            f.cls == FindingClass::kHostSyncOrLogging) &&
           f.cost_fraction >= kThresholds.cpu_compute_other_max.value;
  });
  if (!context.has_gpu && data_or_sync) {
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
  Verdict v = RankFindings(std::move(findings));
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
  return v;
}

}  // namespace stallscope::diagnose
