#include "experiment/compare.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "diagnose/thresholds.h"

namespace stallscope::experiment {
namespace {

std::optional<std::string> ExitStatus(const rundir::RunMeta& m) {
  if (!m.exit_code) return std::string(rundir::RunStatusName(m.status));  // never ended
  if (*m.exit_code > 128 && m.status == rundir::RunStatus::kKilled)
    return fmt::format("killed by signal {}", *m.exit_code - 128);
  return fmt::format("exit {}", *m.exit_code);
}

template <typename T>
std::optional<std::string> LoaderValue(const std::optional<rundir::LoaderInfo>& l,
                                       std::optional<T> rundir::LoaderInfo::*field) {
  if (!l || !((*l).*field)) return std::nullopt;
  if constexpr (std::is_same_v<T, bool>) {
    return *((*l).*field) ? "True" : "False";  // as Python writes them
  } else {
    return fmt::format("{}", *((*l).*field));
  }
}

std::optional<std::string> NonEmpty(const std::string& s) {
  if (s.empty()) return std::nullopt;
  return s;
}

void AddIfDifferent(std::vector<RunDifference>& out, std::string name, std::optional<std::string> a,
                    std::optional<std::string> b) {
  if (a != b) out.push_back({std::move(name), std::move(a), std::move(b)});
}

std::vector<RunDifference> Differences(const RunDigest& a, const RunDigest& b) {
  std::vector<RunDifference> out;
  AddIfDifferent(out, "command", rundir::ShellJoin(a.meta.command),
                 rundir::ShellJoin(b.meta.command));
  AddIfDifferent(out, "exit", ExitStatus(a.meta), ExitStatus(b.meta));
  AddIfDifferent(out, "dataloader.num_workers",
                 LoaderValue(a.loader, &rundir::LoaderInfo::num_workers),
                 LoaderValue(b.loader, &rundir::LoaderInfo::num_workers));
  AddIfDifferent(out, "dataloader.batch_size",
                 LoaderValue(a.loader, &rundir::LoaderInfo::batch_size),
                 LoaderValue(b.loader, &rundir::LoaderInfo::batch_size));
  AddIfDifferent(out, "dataloader.pin_memory",
                 LoaderValue(a.loader, &rundir::LoaderInfo::pin_memory),
                 LoaderValue(b.loader, &rundir::LoaderInfo::pin_memory));
  AddIfDifferent(out, "dataloader.persistent_workers",
                 LoaderValue(a.loader, &rundir::LoaderInfo::persistent_workers),
                 LoaderValue(b.loader, &rundir::LoaderInfo::persistent_workers));
  AddIfDifferent(out, "dataloader.prefetch_factor",
                 LoaderValue(a.loader, &rundir::LoaderInfo::prefetch_factor),
                 LoaderValue(b.loader, &rundir::LoaderInfo::prefetch_factor));
  std::set<std::string> names;
  for (const auto& [k, v] : a.meta.env) names.insert(k);
  for (const auto& [k, v] : b.meta.env) names.insert(k);
  auto env = [](const RunDigest& d, const std::string& k) -> std::optional<std::string> {
    auto it = d.meta.env.find(k);
    if (it == d.meta.env.end()) return std::nullopt;
    return it->second;
  };
  for (const auto& k : names) AddIfDifferent(out, "env." + k, env(a, k), env(b, k));
  auto cpus = [](const RunDigest& d) -> std::optional<std::string> {
    if (d.allowed_cpus <= 0) return std::nullopt;
    return fmt::format("{}", d.allowed_cpus);
  };
  AddIfDifferent(out, "allowed_cpus", cpus(a), cpus(b));
  // Other work on the host, where it moved by busy_host_other_cpus or more: the likeliest reason
  // two runs of the same job differ.
  if (a.other_cpus && b.other_cpus &&
      std::abs(*a.other_cpus - *b.other_cpus) >= kThresholds.busy_host_other_cpus.value) {
    out.push_back({"host.other_cpus", fmt::format("{:.1f}", *a.other_cpus),
                   fmt::format("{:.1f}", *b.other_cpus)});
  }
  AddIfDifferent(out, "gpus", NonEmpty(a.gpus), NonEmpty(b.gpus));
  AddIfDifferent(out, "driver", NonEmpty(a.driver), NonEmpty(b.driver));
  AddIfDifferent(out, "hostname", NonEmpty(a.meta.hostname), NonEmpty(b.meta.hostname));
  AddIfDifferent(out, "tool_version", NonEmpty(a.meta.tool_version), NonEmpty(b.meta.tool_version));
  return out;
}

std::vector<PhaseChange> PhaseChanges(const RunDigest& a, const RunDigest& b) {
  std::vector<PhaseChange> out;
  auto row = [&out](const std::string& name) -> PhaseChange& {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.name == name; });
    if (it != out.end()) return *it;
    PhaseChange fresh;
    fresh.name = name;
    out.push_back(std::move(fresh));
    return out.back();
  };
  for (const auto& p : a.phases) {
    PhaseChange& r = row(p.name);
    r.a_ms_per_step = p.ms_per_step;
    r.a_share = p.share;
  }
  for (const auto& p : b.phases) {
    PhaseChange& r = row(p.name);
    r.b_ms_per_step = p.ms_per_step;
    r.b_share = p.share;
  }
  for (auto& r : out)
    r.delta_ms_per_step = r.b_ms_per_step.value_or(0) - r.a_ms_per_step.value_or(0);
  std::stable_sort(out.begin(), out.end(), [](const PhaseChange& x, const PhaseChange& y) {
    auto big = [](const PhaseChange& p) {
      return std::max(p.a_ms_per_step.value_or(0), p.b_ms_per_step.value_or(0));
    };
    return big(x) > big(y);
  });
  return out;
}

/// An interval's bound: 2 decimals, 3 where 2 would round a significant bound onto 1 ("0.998",
/// not "1.00", for an interval that excludes 1).
std::string Bound(double v) {
  std::string two = fmt::format("{:.2f}", v);
  return two == "1.00" && v != 1 ? fmt::format("{:.3f}", v) : two;
}

std::string Conclusion(CompareOutcome o, const std::optional<analysis::RateChange>& c,
                       const RunDigest& a, const RunDigest& b) {
  switch (o) {
    case CompareOutcome::kNoSteps: {
      const char* side = !a.rate && !b.rate ? "A nor B" : !a.rate ? "A" : "B";
      return fmt::format("nothing to compare: no steps measured in {}", side);
    }
    case CompareOutcome::kTooFewSteps:
      return fmt::format(
          "too few steps to say (A {} steady steps, B {}; {} or more each give an interval): B/A "
          "{:.2f}× without one",
          a.step_s.size(), b.step_s.size(), kThresholds.rate_min_steps.value, c->ratio);
    case CompareOutcome::kNoChange:
      if (c->lo > 1 || c->hi < 1) {  // a real but small change: below rate_change_min
        return fmt::format(
            "no significant change (B/A {:.2f}×, 95% interval {:.3f}–{:.3f}×: within the {:.0f}% "
            "two runs of the same job differ by)",
            c->ratio, c->lo, c->hi, (kThresholds.rate_change_min.value - 1) * 100);
      }
      return fmt::format("no significant change (B/A {:.2f}×, 95% interval {:.2f}–{:.2f}×)",
                         c->ratio, c->lo, c->hi);
    case CompareOutcome::kFaster:
      return fmt::format("B is {:.2f}× faster (95% interval {}–{}×): significant", c->ratio,
                         Bound(c->lo), Bound(c->hi));
    case CompareOutcome::kSlower:
      return fmt::format("B is {:.2f}× slower (B/A {:.2f}×, 95% interval {}–{}×): significant",
                         1 / c->ratio, c->ratio, Bound(c->lo), Bound(c->hi));
  }
  return {};
}

}  // namespace

std::string_view CompareOutcomeName(CompareOutcome o) {
  switch (o) {
    case CompareOutcome::kFaster:
      return "faster";
    case CompareOutcome::kSlower:
      return "slower";
    case CompareOutcome::kNoChange:
      return "no_change";
    case CompareOutcome::kTooFewSteps:
      return "too_few_steps";
    case CompareOutcome::kNoSteps:
      return "no_steps";
  }
  return "no_steps";
}

CompareReport Compare(const RunDigest& a, const RunDigest& b) {
  CompareReport r;
  r.a = a;
  r.b = b;
  r.change = analysis::CompareRates(a.step_s, b.step_s, kThresholds.rate_change_min.value);
  if (!r.change) {
    r.outcome = CompareOutcome::kNoSteps;
  } else if (static_cast<double>(std::min(a.step_s.size(), b.step_s.size())) <
             kThresholds.rate_min_steps.value) {  // the fewest steady steps for an interval
    r.outcome = CompareOutcome::kTooFewSteps;
  } else if (!r.change->significant) {
    r.outcome = CompareOutcome::kNoChange;
  } else {
    r.outcome = r.change->ratio > 1 ? CompareOutcome::kFaster : CompareOutcome::kSlower;
  }
  r.conclusion = Conclusion(r.outcome, r.change, a, b);
  r.phases = PhaseChanges(a, b);
  r.differences = Differences(a, b);
  r.a_busy_host = a.busy_host;
  r.b_busy_host = b.busy_host;
  return r;
}

}  // namespace stallscope::experiment
