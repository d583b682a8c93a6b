#include "experiment/scaling.h"

#include <algorithm>
#include <charconv>
#include <set>

#include <fmt/format.h>

#include "base/name_table.h"
#include "base/thresholds.h"
#include "base/units.h"
#include "base/vocabulary.h"
#include "diagnose/thresholds.h"
#include "rundir/run_dir.h"

namespace stallscope::experiment {
namespace {

using phase_name::kCommWait;

/// One rank's slow steps (analysis::FindPeriodicPhases groups of that rank taken together).
struct SlowSteps {
  int32_t rank = 0;
  std::vector<int64_t> steps;       ///< sorted
  std::vector<std::string> phases;  ///< of the groups, in order
  double extra_s_each = 0;          ///< mean over the steps
  double share_of_wall = 0;
  int64_t every_steps = 0;  ///< a group's period, 0 when none has one
};

/// Rank `work.rank` works at some steps while every other rank waits at the same steps.
struct MainRankWork {
  SlowSteps work;
  std::vector<SlowSteps> waits;                 ///< one per other rank
  std::vector<std::string> only_worker_phases;  ///< phases no other rank recorded
};

bool Has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

/// "other, eval_forward"
std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

/// The groups of `rank` that `take` accepts, together.
template <typename Take>
SlowSteps Gather(const RunDigest& d, int32_t rank, Take take) {
  SlowSteps out;
  out.rank = rank;
  double extra = 0;
  int64_t n = 0;
  for (const auto& g : d.periodic) {
    if (g.rank != rank || !take(g)) continue;
    out.steps.insert(out.steps.end(), g.steps.begin(), g.steps.end());
    if (!Has(out.phases, g.phase)) out.phases.push_back(g.phase);
    extra += g.extra_s_each * static_cast<double>(g.occurrences);
    n += g.occurrences;
    out.share_of_wall += g.share_of_wall;
    if (out.every_steps == 0) out.every_steps = g.every_steps;
  }
  std::sort(out.steps.begin(), out.steps.end());
  out.steps.erase(std::unique(out.steps.begin(), out.steps.end()), out.steps.end());
  out.extra_s_each = n > 0 ? extra / static_cast<double>(n) : 0;
  return out;
}

size_t SharedSteps(const SlowSteps& a, const SlowSteps& b) {
  size_t n = 0;
  for (int64_t s : a.steps) {
    n += std::any_of(b.steps.begin(), b.steps.end(),
                     [s](int64_t t) { return t >= s - 1 && t <= s + 1; });
  }
  return n;
}

/// The phases only `rank` recorded: "eval_forward (160×, 1.61 s)".
std::vector<std::string> OnlyPhases(const RunDigest& d, int32_t rank) {
  std::vector<std::string> out;
  for (const auto& r : d.ranks) {
    if (r.rank != rank) continue;
    for (const auto& [name, count, total] : r.phases) {
      bool elsewhere = false;
      for (const auto& o : d.ranks) {
        for (const auto& p : o.phases) elsewhere |= o.rank != rank && std::get<0>(p) == name;
      }
      if (!elsewhere)
        out.push_back(fmt::format("{} ({}×, {})", name, count, FormatDurationSeconds(total)));
    }
  }
  return out;
}

double MedianPhase(const RankDigest& r, const std::string& phase) {
  auto it = r.median_phase_s.find(phase);
  return it == r.median_phase_s.end() ? 0 : it->second;
}

/// A rank slower than the others at its ordinary steps, not only at its slow ones: another rank
/// waits scaling_uneven_step_share (a quarter) of every step, or it spends that much longer in a
/// phase than any other rank.
/// "rank 0 waits in comm_wait 48.2 ms of every 97.3 ms step: rank 1 is slower at every step".
std::optional<std::string> EveryStepImbalance(const RunDigest& d) {
  const double share = kThresholds.scaling_uneven_step_share.value;
  for (const auto& waiter : d.ranks) {
    const double wait = MedianPhase(waiter, std::string(kCommWait));
    if (waiter.median_step_s <= 0 || wait < share * waiter.median_step_s) continue;
    return fmt::format(
        "rank {} waits in {} {} of every {} step (median): the ranks are uneven at "
        "every step, not only at the slow ones (a straggler, or uneven work)",
        waiter.rank, kCommWait, FormatDurationSeconds(wait),
        FormatDurationSeconds(waiter.median_step_s));
  }
  for (const auto& slow : d.ranks) {
    for (const auto& [phase, s] : slow.median_phase_s) {
      if (phase == "other" || phase == kCommWait) continue;
      double others = 0;
      for (const auto& r : d.ranks)
        others = r.rank == slow.rank ? others : std::max(others, MedianPhase(r, phase));
      if (slow.median_step_s <= 0 || s - others < share * slow.median_step_s) continue;
      return fmt::format(
          "rank {} spends {} in {} at every step (median), the others at most {}: "
          "it is slower at every step, not only at its slow ones (a straggler)",
          slow.rank, FormatDurationSeconds(s), phase, FormatDurationSeconds(others));
    }
  }
  return std::nullopt;
}

std::optional<MainRankWork> FindMainRankWork(const RunDigest& d) {
  if (d.ranks.size() < 2) return std::nullopt;
  std::optional<MainRankWork> best;
  for (const auto& worker : d.ranks) {
    MainRankWork m;
    m.work = Gather(d, worker.rank, [](const auto& g) { return g.phase != kCommWait; });
    // Work that repeats (3 times or more) and costs what periodic side work must.
    if (m.work.steps.size() < 3 || m.work.share_of_wall < kThresholds.periodic_share.value)
      continue;
    for (const auto& r : d.ranks) {
      if (r.rank == worker.rank) continue;
      // The same steps slow on the other rank for another reason than the same work: it waits
      // (in comm_wait, or in the backward whose all-reduce it waits in).
      SlowSteps wait = Gather(d, r.rank, [&](const auto& g) {
        return g.phase == kCommWait || !Has(m.work.phases, g.phase);
      });
      if (2 * SharedSteps(m.work, wait) < m.work.steps.size()) {
        m.waits.clear();
        break;
      }
      m.waits.push_back(std::move(wait));
    }
    if (m.waits.empty() || (best && best->work.share_of_wall >= m.work.share_of_wall)) continue;
    m.only_worker_phases = OnlyPhases(d, worker.rank);
    best = std::move(m);
  }
  return best;
}

std::string Every(const MainRankWork& m) {
  int64_t every = m.work.every_steps;
  for (const auto& w : m.waits) every = every > 0 ? every : w.every_steps;
  return every > 0 ? fmt::format("every {} steps", every)
                   : fmt::format("at {} steps", m.work.steps.size());
}

std::string PhaseWords(const std::string& phases) {
  return phases == "other" ? "work outside the named phases (other)" : phases;
}

std::string RunLine(const ScalingRun& r) {
  const RunDigest& d = *r.run;
  std::string gpu;
  if (auto u = JobGpuUtil(d)) {
    gpu = fmt::format(", GPU util {:.0f}%", *u);
    if (auto s = GpuUtilSpread(d)) gpu += fmt::format(" (spread {:.0f} points)", *s);
  }
  const RankDigest* measured = d.ranks.empty() ? nullptr : &d.ranks.front();
  return fmt::format("{} process{}: {:.2f} steps/s, step {} median, variation {:.2f} ({}){}",
                     r.processes, r.processes == 1 ? "" : "es", d.rate->per_s,
                     FormatDurationSeconds(measured ? measured->median_step_s : 0),
                     measured ? measured->variation_ratio : 0, Sawtooth(d) ? "sawtooth" : "smooth",
                     gpu);
}

std::string VerdictWords(const RunDigest& d) {
  if (!d.principal) return "no verdict";
  return fmt::format("{} ({})", diagnose::FindingClassName(d.principal->cls), d.principal->reason);
}

void MainRankConclusion(const ScalingRun& big, const MainRankWork& m, ScalingConclusion& out) {
  const SlowSteps& w = m.work;
  std::string waiters;
  double cost = w.share_of_wall;
  for (const auto& h : m.waits) {
    waiters += fmt::format("{}{}", waiters.empty() ? "" : ", ", h.rank);
    cost = std::max(cost, h.share_of_wall);
  }
  cost = std::min(cost, 1.0);
  out.cls = ScalingClass::kMainRankSideWork;
  out.cost_fraction = cost;
  out.text = fmt::format(
      "main-rank side work: rank {} alone does {} {} (+{} each) while rank{} {} wait{} for it at "
      "the next all-reduce; every process loses {:.0f}% of the {}-process run's time",
      w.rank, PhaseWords(Joined(w.phases)), Every(m), FormatDurationSeconds(w.extra_s_each),
      m.waits.size() == 1 ? "" : "s", waiters, m.waits.size() == 1 ? "s" : "", cost * 100,
      big.processes);
  out.evidence.push_back(fmt::format("rank {}: {} slow steps, {}, in {} (+{} each)", w.rank,
                                     w.steps.size(), Every(m), Joined(w.phases),
                                     FormatDurationSeconds(w.extra_s_each)));
  for (const auto& h : m.waits) {
    out.evidence.push_back(fmt::format(
        "rank {}: slow at {} of the same {} steps, in {} (+{} each): it waits, it does not work",
        h.rank, SharedSteps(w, h), w.steps.size(), Joined(h.phases),
        FormatDurationSeconds(h.extra_s_each)));
  }
  if (!m.only_worker_phases.empty()) {
    std::string list;
    for (const auto& p : m.only_worker_phases) list += (list.empty() ? "" : ", ") + p;
    out.evidence.push_back(fmt::format("only rank {} records {}", w.rank, list));
  }
  out.fixes = {
      fmt::format(
          "do it less often ({} now) or in a separate job (evaluation on saved checkpoints)",
          Every(m)),
      "share it: every rank evaluates/samples its shard of the work (DistributedSampler on the "
      "eval set) and the results are all-reduced, so nobody waits idle",
      "checkpoints: torch.distributed.checkpoint.async_save (torch ≥ 2.3) or a background thread "
      "that writes a CPU copy, instead of a blocking torch.save on rank 0",
      fmt::format("confirm: stallscope passes -- {} (pass B removes side work)",
                  rundir::ShellJoin(big.command))};
}

/// The class of two smooth-or-sawing runs that show no main-rank side work, with its sentence.
void Classify(const ScalingRun& small, const ScalingRun& big, ScalingConclusion& out) {
  const RunDigest& a = *small.run;
  const RunDigest& b = *big.run;
  const double ratio = out.change ? out.change->ratio : 1;
  const bool slower =
      out.change && out.change->significant && ratio <= 1 / kThresholds.pass_recovery_min.value;
  if (!Sawtooth(a) && Sawtooth(b)) {
    out.cls = ScalingClass::kCrossRankSync;
    out.text = fmt::format(
        "one process runs smooth, {} saw (variation {:.2f} → {:.2f}): cross-rank "
        "synchronization is primary (seed 000 §1); the {}-process run's verdict: {}",
        big.processes, a.ranks.front().variation_ratio, b.ranks.front().variation_ratio,
        big.processes, VerdictWords(b));
  } else if (Sawtooth(a) && Sawtooth(b)) {
    out.cls = ScalingClass::kSawtoothInEveryProcess;
    out.text = fmt::format(
        "the sawtooth is there with one process too (variation {:.2f} and {:.2f}): its cause is "
        "in each process, not between them; the 1-process run's verdict: {}",
        a.ranks.front().variation_ratio, b.ranks.front().variation_ratio, VerdictWords(a));
  } else if (slower) {
    out.cls = ScalingClass::kMultiProcessOverhead;
    out.cost_fraction = 1 - ratio;
    out.text = fmt::format(
        "both run smooth, but with {} processes each step takes {:.2f}× as long: the processes "
        "cost each other time (all-reduce every step, a rank the others wait for, shared CPUs, "
        "PCIe or storage); the {}-process run's verdict: {}",
        big.processes, 1 / ratio, big.processes, VerdictWords(b));
  } else {
    out.cls = ScalingClass::kScales;
    out.text = fmt::format(
        "{} processes step at {:.2f}× the rate of {} (each trains its own batch: ideal 1.00×): "
        "no cross-rank problem; the bottleneck is in each process: {}",
        big.processes, ratio, small.processes, VerdictWords(a));
  }
}

/// The evidence and fixes of the run that explains the class (one process when the cause is in
/// each process, N otherwise), and the CPUs N processes compete for.
void Explain(const ScalingRun& big, const RunDigest& a, const RunDigest& b,
             ScalingConclusion& out) {
  const RunDigest& explained =
      out.cls == ScalingClass::kSawtoothInEveryProcess || out.cls == ScalingClass::kScales ? a : b;
  if (explained.principal) {
    for (const auto& e : explained.principal->evidence) out.evidence.push_back(e.text);
    for (const auto& r : explained.principal->recommendations) out.fixes.push_back(r.text);
    if (out.cls != ScalingClass::kScales && out.cls != ScalingClass::kSawtoothInEveryProcess)
      out.cost_fraction =
          std::max(out.cost_fraction.value_or(0), explained.principal->cost_fraction);
  }
  if (b.job_cpus && b.allowed_cpus > 0 &&
      *b.job_cpus >=
          kThresholds.scaling_host_full_share.value * static_cast<double>(b.allowed_cpus)) {
    out.evidence.push_back(
        fmt::format("the {} processes use {:.1f} of the {} CPUs allowed: they compete for the host",
                    big.processes, *b.job_cpus, b.allowed_cpus));
  }
}

}  // namespace

std::string_view ScalingClassName(ScalingClass cls) { return NameIn(kScalingClassNames, cls); }

bool Sawtooth(const RunDigest& d) {
  return !d.ranks.empty() && d.ranks.front().variation_ratio > kThresholds.oscillation_ratio.value;
}

std::optional<double> JobGpuUtil(const RunDigest& d) {
  if (d.job_gpus.empty()) return std::nullopt;
  double sum = 0;
  for (const auto& g : d.job_gpus) sum += g.util_pct;
  return sum / static_cast<double>(d.job_gpus.size());
}

std::optional<double> GpuUtilSpread(const RunDigest& d) {
  if (d.job_gpus.size() < 2) return std::nullopt;
  auto [lo, hi] =
      std::minmax_element(d.job_gpus.begin(), d.job_gpus.end(),
                          [](const GpuUse& a, const GpuUse& b) { return a.util_pct < b.util_pct; });
  return hi->util_pct - lo->util_pct;
}

ScalingConclusion ConcludeScaling(const std::vector<ScalingRun>& runs) {
  ScalingConclusion out;
  const ScalingRun* small = nullptr;
  const ScalingRun* big = nullptr;
  for (const auto& r : runs) {
    if (!r.run || !r.run->rate || !r.failure.empty()) {
      out.text = fmt::format("no conclusion: the {}-process run gave no steps/s ({})", r.processes,
                             r.failure.empty() ? "no steps measured" : r.failure);
      return out;
    }
    if (small == nullptr || r.processes < small->processes) small = &r;
    if (big == nullptr || r.processes > big->processes) big = &r;
  }
  if (small == nullptr || small == big) {
    out.text = "no conclusion: fewer than two process counts ran";
    return out;
  }
  const RunDigest& a = *small->run;
  const RunDigest& b = *big->run;
  out.change = analysis::CompareRates(a.step_s, b.step_s, kThresholds.rate_change_min.value);
  out.evidence.push_back(RunLine(*small));
  out.evidence.push_back(RunLine(*big));
  // Side work makes some steps slow; a rank slow at every step is a straggler, whose noise can
  // look periodic too.
  const std::optional<std::string> uneven = EveryStepImbalance(b);
  if (auto m = uneven ? std::nullopt : FindMainRankWork(b)) {
    MainRankConclusion(*big, *m, out);
    return out;
  }
  Classify(*small, *big, out);
  Explain(*big, a, b, out);
  // The straggler verdict's evidence says it already.
  const bool straggler = b.principal && b.principal->cls == diagnose::FindingClass::kStraggler;
  if ((out.cls == ScalingClass::kCrossRankSync || out.cls == ScalingClass::kMultiProcessOverhead) &&
      !straggler && uneven) {
    out.evidence.push_back(*uneven);
  }
  if (out.cls == ScalingClass::kCrossRankSync) {
    out.fixes.push_back(
        "find what the ranks wait for: stallscope diagnose " + b.dir +
        " (per-rank phases; a rank slow in turn, a per-step barrier, .item() of a reduced metric)");
  }
  return out;
}

}  // namespace stallscope::experiment
