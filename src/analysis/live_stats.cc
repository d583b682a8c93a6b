#include "analysis/live_stats.h"

#include <algorithm>

#include "analysis/phases.h"

namespace stallscope::analysis {
namespace {

/// Adds `phase` with `total_ns` over `window_s` to `w` and to its data/compute/covered shares.
void AddPhase(LiveWindow& w, const std::string& name, int64_t total_ns) {
  double share = static_cast<double>(total_ns) / (w.window_s * 1e9);
  w.covered_share += share;
  if (name == "data_loading") w.data_share = share;
  if (IsComputePhase(name)) w.compute_share += share;
  w.phases.push_back(LivePhase{name, total_ns, share});
}

LiveWindow StartWindow(uint64_t steps, int64_t window_ns) {
  LiveWindow w;
  w.steps = steps;
  w.window_s = static_cast<double>(window_ns) / 1e9;
  w.steps_per_s = static_cast<double>(steps) / w.window_s;
  return w;
}

void SetStage(LiveWindow& w, const StageTracker& t) {
  w.stage = t.stage();
  w.warmup_steps = static_cast<int64_t>(t.warmup_steps());
}

}  // namespace

void StepHistogram::Add(double seconds) {
  const auto* bound = std::lower_bound(kStepBucketsS.begin(), kStepBucketsS.end(), seconds);
  ++counts[static_cast<size_t>(bound - kStepBucketsS.begin())];
  ++count;
  sum_s += seconds;
}

std::optional<LiveWindow> WindowBetween(const ProcessTotals& before, const ProcessTotals& after,
                                        int64_t window_ns) {
  if (after.steps <= before.steps || window_ns <= 0) return std::nullopt;
  LiveWindow out = StartWindow(after.steps - before.steps, window_ns);
  for (const LivePhase& p : after.phases) {
    int64_t ns = p.total_ns;
    for (const LivePhase& b : before.phases) {
      if (b.name == p.name) ns -= b.total_ns;
    }
    if (ns > 0) AddPhase(out, p.name, ns);
  }
  std::stable_sort(out.phases.begin(), out.phases.end(),
                   [](const LivePhase& a, const LivePhase& b) { return a.total_ns > b.total_ns; });
  return out;
}

void LiveStats::Add(phase::PhaseReader& ring, const phase::PhaseRecord& record) {
  Proc& p = procs_[ring.info().pid];
  p.ring = &ring;
  p.agg.Add(record);
  if (record.kind == phase::RecordKind::kStep) {
    p.stage.Step(record.ts_ns);
  } else if (record.kind != phase::RecordKind::kGpuSpan) {
    p.stage.Begin(record.ts_ns);  // the first record only
  }
  if (!track_totals_) return;
  p.all_agg.Add(record);
  if (record.kind == phase::RecordKind::kStep) {
    if (p.last_step_ns > 0 && record.ts_ns >= p.last_step_ns)
      p.step_durations.Add(static_cast<double>(record.ts_ns - p.last_step_ns) / 1e9);
    p.last_step_ns = record.ts_ns;
  }
}

std::vector<ProcessTotals> LiveStats::AllTotals() {
  std::vector<ProcessTotals> out;
  if (!track_totals_) return out;
  out.reserve(procs_.size());
  for (auto& [pid, p] : procs_) {
    phase::PhaseWindow w = p.all_agg.Take();
    for (const auto& t : w.phases) p.all_ns[t.phase_id] += t.total_ns;
    p.all_steps += w.steps;
    ProcessTotals t;
    t.pid = pid;
    t.rank = p.ring->info().rank;
    t.steps = p.all_steps;
    for (const auto& [id, ns] : p.all_ns) t.phases.push_back(LivePhase{p.ring->Name(id), ns, 0});
    t.step_durations = p.step_durations;
    out.push_back(std::move(t));
  }
  return out;
}

std::optional<LiveWindow> LiveStats::TakeWindow(int64_t window_ns) {
  Proc* main = nullptr;
  phase::PhaseWindow main_window;
  for (auto& [pid, p] : procs_) {
    phase::PhaseWindow w = p.agg.Take();
    for (const auto& t : w.phases) {
      p.interim_ns[t.phase_id] += t.total_ns;
      p.total_ns[t.phase_id] += t.total_ns;
    }
    p.interim_steps += w.steps;
    p.total_steps += w.steps;
    if (main == nullptr || w.steps > main_window.steps) {
      main = &p;
      main_window = std::move(w);
    }
  }
  if (main == nullptr || main_window.steps == 0 || window_ns <= 0) return std::nullopt;
  LiveWindow out = StartWindow(main_window.steps, window_ns);
  for (const auto& t : main_window.phases) AddPhase(out, main->ring->Name(t.phase_id), t.total_ns);
  SetStage(out, main->stage);
  return out;
}

std::optional<LiveWindow> LiveStats::TakeInterim(int64_t every_steps, int64_t since_ns) {
  if (every_steps <= 0) return std::nullopt;
  Proc* main = nullptr;
  for (auto& [pid, p] : procs_) {
    if (main == nullptr || p.interim_steps > main->interim_steps) main = &p;
  }
  if (main == nullptr || main->interim_steps < static_cast<uint64_t>(every_steps) ||
      since_ns <= 0) {
    return std::nullopt;
  }
  LiveWindow out = StartWindow(main->interim_steps, since_ns);
  for (const auto& [id, ns] : main->interim_ns) AddPhase(out, main->ring->Name(id), ns);
  SetStage(out, main->stage);
  for (auto& [pid, p] : procs_) {
    p.interim_ns.clear();
    p.interim_steps = 0;
  }
  return out;
}

std::optional<LiveWindow> LiveStats::Totals(int64_t since_start_ns) const {
  const Proc* main = nullptr;
  for (const auto& [pid, p] : procs_) {
    if (main == nullptr || p.total_steps > main->total_steps) main = &p;
  }
  if (main == nullptr || main->total_steps == 0 || since_start_ns <= 0) return std::nullopt;
  LiveWindow out = StartWindow(main->total_steps, since_start_ns);
  for (const auto& [id, ns] : main->total_ns) AddPhase(out, main->ring->Name(id), ns);
  SetStage(out, main->stage);
  return out;
}

}  // namespace stallscope::analysis
