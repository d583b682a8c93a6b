#include "experiment/passes.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/name_table.h"
#include "diagnose/thresholds.h"

namespace stallscope::experiment {
namespace {

std::string Times(const analysis::RateChange& c) {
  return fmt::format("{:.2f}× (95% interval {:.2f}–{:.2f}×)", c.ratio, c.lo, c.hi);
}

bool Recovers(const PassResult& p, double required) {
  return !p.removed_nothing && p.vs_baseline && p.vs_baseline->significant &&
         p.vs_baseline->ratio >= required;
}

std::string_view WhatItMeans(PassId id) {
  if (id == PassId::kB)
    return "periodic side work (checkpoints, evaluation/sampling) is the bottleneck";
  if (id == PassId::kC) return "the input pipeline is the bottleneck";
  return "";
}

/// Synthetic data that shortens a step far more than its loading took changed the step's own work
/// (the same few batches stay in the CPU caches; other values), not the input pipeline. Holds when
/// A loaded its batches in the training process (num_workers=0: all of the loading is in
/// data_loading, and no worker competes for the CPUs): the part of A's step that C saves (from its
/// interval's low end) may exceed A's data_loading share by the machine's drift (A to A2) and
/// pass_untimed_margin (5%) of the step for what data_loading does not time. The CAVEAT when it
/// exceeds more; empty when it does not, when a worker process loads or when A's share is unknown.
std::optional<std::string> BeyondLoading(const PassResult& c, const RunDigest& a, double drift) {
  if (c.spec.id != PassId::kC || !c.vs_baseline || c.vs_baseline->lo <= 0 || !a.loader ||
      a.loader->num_workers.value_or(-1) != 0 || !a.data_share) {
    return std::nullopt;
  }
  const double saved = 1 - 1 / c.vs_baseline->lo;
  if (saved - *a.data_share <= kThresholds.pass_untimed_margin.value + (drift - 1))
    return std::nullopt;
  return fmt::format(
      "C ran at {:.2f}× A's rate, but A spent {:.1f}% of its step loading data in the training "
      "process (num_workers=0): removing all of it explains at most {:.2f}×; the repeated "
      "synthetic batches changed the step's own work (they stay in the CPU caches, their values "
      "differ), so C is not counted",
      c.vs_baseline->ratio, *a.data_share * 100, 1 / std::max(1 - *a.data_share, 0.01));
}

/// A's steps pooled with A2's when it ran (the job as it is before and after the other passes:
/// drift of the machine's speed between passes falls on both sides). How far A2 moved from A
/// raises the bar a pass must clear (out.required_ratio), with a caveat when it moved.
std::vector<double> PooledBaseline(std::vector<PassResult>& passes, const PassResult& a,
                                   PassesConclusion& out) {
  std::vector<double> baseline = a.run->step_s;
  out.required_ratio = kThresholds.pass_recovery_min.value;
  for (auto& p : passes) {
    if (p.spec.id != PassId::kA2 || !p.run || p.run->step_s.empty() || !p.failure.empty()) continue;
    p.vs_baseline =
        analysis::CompareRates(a.run->step_s, p.run->step_s, kThresholds.rate_change_min.value);
    if (!p.vs_baseline) continue;
    baseline.insert(baseline.end(), p.run->step_s.begin(), p.run->step_s.end());
    const double drift = std::max(p.vs_baseline->ratio, 1 / p.vs_baseline->ratio);
    out.required_ratio *= drift;
    if (p.vs_baseline->significant && drift >= kThresholds.pass_recovery_min.value) {
      out.caveats.push_back(fmt::format(
          "the machine's speed changed between passes: A ran at {:.2f}× its first rate the second "
          "time (A2); a pass must recover {:.2f}× to count; rerun on a quiet machine",
          p.vs_baseline->ratio, out.required_ratio));
    }
  }
  return baseline;
}

/// Sets out.agrees (the recovering pass is the one pass A's verdict class predicts) and says so at
/// the end of out.text.
void CheckAgainstVerdict(diagnose::FindingClass verdict, PassesConclusion& out) {
  const std::optional<PassId> expected = PassForClass(verdict);
  out.agrees = expected == out.recovering;
  out.text +=
      out.agrees.value()
          ? fmt::format("; matches the verdict's {}", out.verdict_class)
          : fmt::format("; DISAGREES with the verdict's {} (which predicts {})", out.verdict_class,
                        expected ? fmt::format("pass {} recovers", PassIdName(*expected))
                                 : std::string("that no pass recovers"));
}

}  // namespace

std::vector<PassSpec> StandardPasses(const std::string& scratch_dir, int synthetic_batches) {
  const std::string scratch = "STALLSCOPE_SCRATCH_DIR=" + scratch_dir;
  return {
      {PassId::kA, "baseline", "nothing", {scratch}},
      {PassId::kB,
       "side work off",
       "side work: torch.save calls are skipped, no-grad (eval/sampling) forwards are served "
       "from a cache of their first outputs",
       {scratch, "STALLSCOPE_SIDE_WORK_OFF=1"}},
      {PassId::kC,
       "synthetic data",
       fmt::format("the input pipeline: each DataLoader repeats copies of its first {} batches",
                   synthetic_batches),
       {scratch, fmt::format("STALLSCOPE_SYNTHETIC_DATA={}", synthetic_batches)}},
      {PassId::kA2,
       "baseline again",
       "nothing: A once more, last, to see the machine's drift",
       {scratch}},
  };
}

std::string_view PassIdName(PassId id) { return NameIn(kPassIdNames, id); }

std::optional<PassId> PassForClass(diagnose::FindingClass c) {
  switch (c) {
    case diagnose::FindingClass::kDataBoundCpu:
    case diagnose::FindingClass::kDataBoundIo:
    case diagnose::FindingClass::kEpochBoundaryStall:
    case diagnose::FindingClass::kPrefetchTooShallow:
      return PassId::kC;
    case diagnose::FindingClass::kPeriodicSideWork:
      return PassId::kB;
    default:
      return std::nullopt;
  }
}

PassesConclusion ConcludePasses(std::vector<PassResult>& passes) {
  PassesConclusion out;
  const PassResult* a = nullptr;
  for (const auto& p : passes) {
    if (p.spec.id == PassId::kA) a = &p;
  }
  if (a == nullptr || !a->run || !a->run->rate || !a->failure.empty()) {
    out.text = "no conclusion: the baseline pass A gave no steps/s" +
               (a != nullptr && !a->failure.empty() ? " (" + a->failure + ")" : std::string());
    return out;
  }
  // The baseline: A, pooled with A2 when it ran.
  const std::vector<double> baseline = PooledBaseline(passes, *a, out);
  const PassResult* best = nullptr;
  for (auto& p : passes) {
    if (&p == a || p.spec.id == PassId::kA2 || !p.run || p.run->step_s.empty() ||
        !p.failure.empty())
      continue;
    if (!p.run->experiment.present) {
      // The job's hooks never said they applied the control: the pass ran the job unchanged.
      p.failure =
          "not applied: the job's PyTorch hooks did not report the pass's controls (is "
          "the job PyTorch, run without --no-auto?)";
      continue;
    }
    p.vs_baseline =
        analysis::CompareRates(baseline, p.run->step_s, kThresholds.rate_change_min.value);
    const rundir::ExperimentNote& e = p.run->experiment;
    p.removed_nothing =
        (p.spec.id == PassId::kB && e.saves_skipped + e.eval_forwards_cached == 0) ||
        (p.spec.id == PassId::kC && e.synthetic_batches_served == 0);
    const double r = p.vs_baseline ? p.vs_baseline->ratio : 1;
    if (p.removed_nothing && p.vs_baseline && p.vs_baseline->significant &&
        (r >= out.required_ratio || r <= 1 / out.required_ratio)) {
      out.caveats.push_back(fmt::format(
          "the machine's speed changed between passes: {} removed nothing in its run yet ran at "
          "{:.2f}× A's rate; rerun on a quiet machine (other work on the host shifts every pass)",
          PassIdName(p.spec.id), r));
    }
    const double drift = out.required_ratio / kThresholds.pass_recovery_min.value;
    if (auto beyond =
            Recovers(p, out.required_ratio) ? BeyondLoading(p, *a->run, drift) : std::nullopt) {
      out.caveats.push_back(std::move(*beyond));
      continue;
    }
    if (Recovers(p, out.required_ratio) &&
        (best == nullptr || p.vs_baseline->ratio > best->vs_baseline->ratio))
      best = &p;
  }
  if (a->run->principal) out.verdict_class = diagnose::FindingClassName(a->run->principal->cls);
  if (best != nullptr) {
    out.recovering = best->spec.id;
    out.text = fmt::format("{} ({}) recovers {} → {}", PassIdName(best->spec.id), best->spec.name,
                           Times(*best->vs_baseline), WhatItMeans(best->spec.id));
  } else {
    std::string each;
    for (const auto& p : passes) {
      if (&p == a || p.spec.id == PassId::kA2 || !p.vs_baseline) continue;
      each += fmt::format("{}{} {:.2f}×", each.empty() ? "" : ", ", PassIdName(p.spec.id),
                          p.vs_baseline->ratio);
    }
    out.text = fmt::format(
        "no pass recovers {:.0f}% or more{} → neither side work nor the input pipeline limits "
        "this job: the time is the model's own work or what no pass removes (host syncs, "
        "threads, the GPU)",
        (out.required_ratio - 1) * 100, each.empty() ? "" : " (" + each + ")");
  }
  if (a->run->principal) {
    CheckAgainstVerdict(a->run->principal->cls, out);
  } else {
    out.text += "; pass A has no verdict to check it against";
  }
  return out;
}

}  // namespace stallscope::experiment
