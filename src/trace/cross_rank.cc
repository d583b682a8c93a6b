#include "trace/cross_rank.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "base/stats.h"

namespace stallscope::trace {
namespace {

// The smallest step number every rank has; each rank's begin of it is that rank's clock zero.
std::optional<int64_t> CommonFirstStep(std::span<const CrossRankInput> ranks) {
  std::optional<int64_t> best;
  for (const Step& s : ranks.front().steps) {
    bool everywhere = std::all_of(ranks.begin(), ranks.end(), [&](const CrossRankInput& r) {
      return std::any_of(r.steps.begin(), r.steps.end(),
                         [&](const Step& t) { return t.number == s.number; });
    });
    if (everywhere && (!best || s.number < *best)) best = s.number;
  }
  return best;
}

int64_t StepBegin(const CrossRankInput& r, int64_t number) {
  for (const Step& s : r.steps) {
    if (s.number == number) return s.begin_ns;
  }
  return 0;
}

void AddStepSpreads(std::span<const CrossRankInput> ranks, CrossRankReport& report,
                    std::vector<std::vector<double>>& excess_by_rank) {
  // step number → (rank index, duration)
  std::map<int64_t, std::vector<std::pair<size_t, int64_t>>> by_step;
  for (size_t i = 0; i < ranks.size(); ++i) {
    for (const Step& s : ranks[i].steps) by_step[s.number].emplace_back(i, s.end_ns - s.begin_ns);
  }
  for (const auto& [number, times] : by_step) {
    if (times.size() < 2) continue;
    StepSpread sp;
    sp.step = number;
    sp.ranks = static_cast<int32_t>(times.size());
    std::vector<double> values;
    auto slowest = times.front();
    sp.min_ns = times.front().second;
    sp.max_ns = times.front().second;
    for (const auto& t : times) {
      values.push_back(static_cast<double>(t.second));
      sp.min_ns = std::min(sp.min_ns, t.second);
      if (t.second > slowest.second) slowest = t;
      sp.max_ns = std::max(sp.max_ns, t.second);
    }
    sp.median_ns = Quantile(values, 0.5).value_or(0.0);  // interpolated (base/stats.h)
    if (sp.median_ns > 0) sp.spread = static_cast<double>(sp.max_ns - sp.min_ns) / sp.median_ns;
    sp.cv_pct = CoefficientOfVariationPct(values).value_or(0.0);
    sp.slowest_rank = ranks[slowest.first].rank;
    ++report.ranks[slowest.first].times_slowest;
    for (const auto& [index, dur] : times) {
      ++report.ranks[index].steps;
      if (sp.median_ns > 0) {
        excess_by_rank[index].push_back((static_cast<double>(dur) - sp.median_ns) / sp.median_ns);
      }
    }
    report.steps.push_back(sp);
  }
}

// Arrival of the k-th kernel of `name` on each rank, clock-aligned: arrivals[rank][k].
std::vector<std::vector<int64_t>> Arrivals(std::span<const CrossRankInput> ranks,
                                           std::string_view name,
                                           const std::vector<int64_t>& offsets) {
  std::vector<std::vector<int64_t>> arrivals(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    for (const CollectiveKernel& k : ranks[i].collectives) {
      if (k.collective == name) arrivals[i].push_back(k.begin_ns - offsets[i]);
    }
  }
  return arrivals;
}

void AddLateness(std::span<const CrossRankInput> ranks, const std::vector<int64_t>& offsets,
                 CrossRankReport& report) {
  std::vector<std::string_view> names;
  for (const CrossRankInput& r : ranks) {
    for (const CollectiveKernel& k : r.collectives) {
      if (std::find(names.begin(), names.end(), k.collective) == names.end()) {
        names.push_back(k.collective);
      }
    }
  }
  std::vector<std::vector<double>> lateness(ranks.size());
  for (std::string_view name : names) {
    auto arrivals = Arrivals(ranks, name, offsets);
    size_t matched = arrivals.front().size();
    size_t most = 0;
    for (const auto& a : arrivals) {
      matched = std::min(matched, a.size());
      most = std::max(most, a.size());
    }
    report.collectives_matched += static_cast<int64_t>(matched);
    report.collectives_unmatched += static_cast<int64_t>(most - matched);
    for (size_t k = 0; k < matched; ++k) {
      size_t last = 0;
      int64_t earliest = arrivals[0][k];
      for (size_t i = 0; i < ranks.size(); ++i) {
        earliest = std::min(earliest, arrivals[i][k]);
        if (arrivals[i][k] > arrivals[last][k]) last = i;
      }
      int64_t second = std::numeric_limits<int64_t>::min();
      for (size_t i = 0; i < ranks.size(); ++i) {
        if (i != last) second = std::max(second, arrivals[i][k]);
        lateness[i].push_back(static_cast<double>(arrivals[i][k] - earliest));
        ++report.ranks[i].collectives;
      }
      ++report.ranks[last].times_last;
      report.ranks[last].held_up_ns += arrivals[last][k] - second;
    }
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (lateness[i].empty()) continue;
    double sum = 0;
    for (double v : lateness[i]) sum += v;
    report.ranks[i].mean_lateness_ns = sum / static_cast<double>(lateness[i].size());
    report.ranks[i].p95_lateness_ns = Quantile(lateness[i], 0.95).value_or(0.0);
  }
}

}  // namespace

CrossRankInput MakeCrossRankInput(const RankTrace& trace, const Timeline& timeline,
                                  const KernelReport& kernels) {
  return CrossRankInput{trace.rank, timeline.steps, kernels.collective_kernels};
}

std::optional<CrossRankReport> AnalyzeCrossRank(std::span<const CrossRankInput> ranks) {
  if (ranks.size() < 2) return std::nullopt;
  CrossRankReport report;
  for (const CrossRankInput& r : ranks) report.ranks.push_back(RankSkew{.rank = r.rank});
  std::vector<std::vector<double>> excess(ranks.size());
  AddStepSpreads(ranks, report, excess);
  std::optional<size_t> slowest;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (excess[i].empty()) continue;
    double sum = 0;
    for (double v : excess[i]) sum += v;
    report.ranks[i].straggler_score = sum / static_cast<double>(excess[i].size());
    if (!slowest || report.ranks[i].straggler_score > report.ranks[*slowest].straggler_score) {
      slowest = i;
    }
  }
  if (slowest) report.slowest_rank = report.ranks[*slowest].rank;
  std::vector<int64_t> offsets(ranks.size(), 0);
  report.aligned_on_step = CommonFirstStep(ranks);
  if (report.aligned_on_step) {
    for (size_t i = 0; i < ranks.size(); ++i)
      offsets[i] = StepBegin(ranks[i], *report.aligned_on_step);
  }
  AddLateness(ranks, offsets, report);
  if (report.collectives_matched > 0) {
    const RankSkew* latest = &report.ranks.front();
    for (const RankSkew& s : report.ranks) {
      if (s.times_last > latest->times_last ||
          (s.times_last == latest->times_last && s.held_up_ns > latest->held_up_ns)) {
        latest = &s;
      }
    }
    report.latest_rank = latest->rank;
  }
  return report;
}

}  // namespace stallscope::trace
