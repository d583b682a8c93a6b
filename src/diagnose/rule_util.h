#pragma once
// Building blocks shared by the verdict rule files (verdict_rules.cc, trace_rules.cc): number
// formatting, Evidence/Finding construction. Private to src/diagnose.

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/stats.h"
#include "base/units.h"
#include "base/vocabulary.h"
#include "diagnose/verdict.h"

namespace stallscope::diagnose::rule_util {

inline constexpr const ThresholdSet& T = kThresholds;
inline constexpr std::string_view kData = phase_name::kDataLoading;
inline constexpr std::string_view kOther = phase_name::kOther;

/// 0.913 → "91%", 0.046 → "4.6%" (base/units.h FormatPercentShort, the rules' short name).
inline std::string Pct(double fraction) { return FormatPercentShort(fraction); }

/// 0.0123 → "12.3 ms", 1.42 → "1.42 s" (base/units.h FormatDurationShortSeconds).
inline std::string Secs(double s) { return FormatDurationShortSeconds(s); }

inline std::string GiB(double mib) { return fmt::format("{:.1f}", mib / 1024.0); }

inline std::string Plural(int64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

inline std::string Cpus(int64_t n) { return Plural(n, "CPU", "CPUs"); }

inline Evidence Ev(std::string text, std::string metric, double value, std::string unit,
                   std::optional<double> threshold = std::nullopt) {
  return Evidence{std::move(text), std::move(metric), value, std::move(unit), threshold};
}

inline Finding Make(FindingClass cls, double confidence, double cost, std::string reason) {
  Finding f;
  f.cls = cls;
  f.confidence = confidence;
  f.cost_fraction = std::clamp(cost, 0.0, 1.0);
  f.reason = fmt::format("{}: {}", FindingClassName(cls), reason);
  return f;
}

/// Issue 39, no cliffs: the confidence of a finding whose measure is `value` against a threshold
/// it must exceed, out of the `most` its evidence allows: half of it at the threshold, all of it
/// confidence_margin_span (50%) of the threshold above, none as far below; linear between.
inline double MarginConfidence(double value, double threshold, double most) {
  const double span = T.confidence_margin_span.value * threshold;
  if (span <= 0) return most;
  return most * std::clamp(0.5 + 0.5 * (value - threshold) / span, 0.0, 1.0);
}

/// Where a rule whose measure must exceed `threshold` starts to speak: the value at which
/// MarginConfidence reaches 0 (findings fade in, they do not appear at the threshold).
inline double FadeIn(double threshold) {
  return threshold * (1.0 - T.confidence_margin_span.value);
}

inline void Rec(Finding& f, int cost, std::string text) {
  f.recommendations.push_back({std::move(text), cost});
}

/// Keeps recommendations cheapest first, in insertion order within a cost.
inline void SortRecs(Finding& f) {
  std::stable_sort(
      f.recommendations.begin(), f.recommendations.end(),
      [](const Recommendation& a, const Recommendation& b) { return a.cost < b.cost; });
}

inline std::string AllowedWhy(const Facts& c) {
  std::string why = fmt::format("host {}", c.host_cpus);
  if (c.cgroup_quota_cpus) why += fmt::format(", cgroup quota {:.1f}", *c.cgroup_quota_cpus);
  if (c.affinity_cpus) why += fmt::format(", affinity {}", *c.affinity_cpus);
  return why;
}

inline Evidence AllowedEvidence(const Facts& c) {
  return Ev(fmt::format("{} allowed ({})", Cpus(c.allowed_cpus), AllowedWhy(c)), "allowed_cpus",
            static_cast<double>(c.allowed_cpus), "CPUs");
}

inline Evidence ShareEvidence(const Facts& c, std::string_view phase, const Threshold& th) {
  double share = c.Share(phase);
  return Ev(fmt::format("{} is {} of step time (threshold {}, {})", phase, Pct(share),
                        Pct(th.value), th.cite()),
            fmt::format("phase_share.{}", phase), share, "fraction", th.value);
}

/// The GPUs' mean busy fraction.
inline double MeanGpuUtil(const Facts& c) {
  double sum = 0;
  for (const auto& g : c.gpus) sum += g.util_mean;
  return c.gpus.empty() ? 0.0 : sum / static_cast<double>(c.gpus.size());
}

/// Seed 004: low GPU utilization as supporting evidence; none when CUDA events say the GPU was
/// busy for most of the step (they outrank NVML's averages, issue 26).
inline void AddLowUtilEvidence(const Facts& c, Finding& f) {
  if (!c.has_gpu || c.GpuBusyByEvents()) return;
  double util = MeanGpuUtil(c) * 100.0;  // the threshold is in percent
  if (util >= T.low_util_warn.value) return;
  f.evidence.push_back(
      Ev(fmt::format("GPU utilization averages {:.0f}% (warning below {:.0f}%, {})", util,
                     T.low_util_warn.value, T.low_util_warn.cite()),
         "gpu.util_mean_pct", util, "%", T.low_util_warn.value));
}

inline const analysis::RankSteps* RankOf(const analysis::PhaseAnalysis& phases, int32_t rank) {
  for (const auto& s : phases.ranks) {
    if (s.rank == rank) return &s;
  }
  return nullptr;
}

inline double PhaseOf(const analysis::StepRecord& s, std::string_view phase) {
  auto it = s.phase_s.find(std::string(phase));
  return it == s.phase_s.end() ? 0.0 : it->second;
}

}  // namespace stallscope::diagnose::rule_util
