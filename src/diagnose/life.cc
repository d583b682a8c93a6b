#include "diagnose/life.h"

#include <algorithm>

#include "base/stats.h"
#include "base/thresholds.h"
#include "base/units.h"
#include "base/vocabulary.h"

namespace stallscope::diagnose {
namespace {

/// The rank the life is told of: rank 0, else the lowest rank with steps.
const analysis::RankSteps* ReferenceRank(const analysis::PhaseAnalysis& phases) {
  const analysis::RankSteps* best = nullptr;
  for (const auto& r : phases.ranks) {
    if (r.steps.empty() && r.warmup.empty()) continue;
    if (best == nullptr || r.rank < best->rank) best = &r;
  }
  return best;
}

/// While every rank was steady; the reference rank's window when they do not overlap.
std::pair<int64_t, int64_t> JobWindow(const analysis::PhaseAnalysis& phases,
                                      const analysis::RankSteps& ref) {
  int64_t begin = ref.life.steady_begin_ns, end = ref.life.steady_end_ns;
  for (const auto& r : phases.ranks) {
    if (r.steps.empty()) continue;
    begin = std::max(begin, r.life.steady_begin_ns);
    end = std::min(end, r.life.steady_end_ns);
  }
  if (begin < end) return {begin, end};
  return {ref.life.steady_begin_ns, ref.life.steady_end_ns};
}

const rundir::PythonProcess* PythonOf(const std::vector<rundir::PythonProcess>& python,
                                      int32_t pid) {
  for (const auto& p : python) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

void StartupParts(const analysis::RankSteps& ref, int64_t job_start_ns,
                  const std::vector<rundir::PythonProcess>& python, const rundir::JobInfo& info,
                  int64_t workers_started, RunLife& life) {
  double known = 0;
  auto add = [&](LifePartKind kind, double s, int64_t count = 0, std::string phase = {}) {
    if (s <= 0) return;
    life.startup.push_back({kind, s, count, std::move(phase)});
    known += s;
  };
  if (const rundir::PythonProcess* p = PythonOf(python, ref.pid); p && p->start_ns) {
    add(LifePartKind::kInterpreter, NsToSeconds(*p->start_ns - job_start_ns));
    if (p->hooks_ns) add(LifePartKind::kImportTorch, NsToSeconds(*p->hooks_ns - *p->start_ns));
  }
  const size_t setup_at = life.startup.size();
  for (const auto& c : info.cuda_init) {
    if (c.pid == ref.pid && c.begin_ns < ref.life.steps_begin_ns)
      add(LifePartKind::kCudaInit, c.seconds());
  }
  double first_batch = 0;
  for (const auto& [name, s] : ref.life.startup_phase_s) {
    if (name == phase_name::kDataLoading) {
      first_batch = s;
    } else {
      add(LifePartKind::kPhase, s, 0, name);
    }
  }
  add(LifePartKind::kFirstBatch, first_batch, workers_started);
  // What no note or phase explains is the job's own set-up (data set, model, ...); it comes
  // after the torch import and before the rest.
  const double setup = life.startup_s - known;
  if (setup > 0.0005) {
    life.startup.insert(life.startup.begin() + static_cast<std::ptrdiff_t>(setup_at),
                        LifePart{LifePartKind::kSetup, setup, 0, {}});
  }
}

/// Each phase's time in the warm-up steps beyond what the same number of steady steps take
/// (their median per step), largest first; only phases that took longer.
std::vector<LifePart> WarmupExcess(const analysis::RankSteps& ref) {
  std::map<std::string, double> in_warmup;
  for (const auto& s : ref.warmup) {
    for (const auto& [name, sec] : s.phase_s) in_warmup[name] += sec;
  }
  std::vector<LifePart> out;
  for (const auto& [name, total] : in_warmup) {
    std::vector<double> steady;
    steady.reserve(ref.steps.size());
    for (const auto& s : ref.steps) {
      auto it = s.phase_s.find(name);
      steady.push_back(it == s.phase_s.end() ? 0.0 : it->second);
    }
    const double excess =
        total - Quantile(steady, 0.5).value_or(0.0) * static_cast<double>(ref.warmup.size());
    // Less is step-to-step jitter, not a warm-up cost: the same bar as a warm-up step's own.
    if (excess >= kThresholds.warmup_min_excess_s.value)
      out.push_back({LifePartKind::kPhase, excess, 0, name});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const LifePart& a, const LifePart& b) { return a.seconds > b.seconds; });
  return out;
}

void WarmupParts(const analysis::RankSteps& ref, const rundir::JobInfo& info, RunLife& life) {
  if (ref.warmup.empty()) return;
  const int64_t begin = ref.life.steps_begin_ns, end = ref.life.steady_begin_ns;
  auto inside = [&](const rundir::TimedInfo& t) {
    return t.pid == ref.pid && t.begin_ns >= begin && t.begin_ns < end;
  };
  LifePart compile{LifePartKind::kCompile, 0, 0, {}};
  for (const auto& c : info.compiles) {
    if (!inside(c)) continue;
    compile.seconds += c.seconds();
    ++compile.count;
  }
  if (compile.count > 0) life.warmup.push_back(compile);
  for (const auto& c : info.cuda_init) {
    if (inside(c)) life.warmup.push_back({LifePartKind::kCudaInit, c.seconds(), 0, {}});
  }
  for (const auto& b : info.backends) {
    if (b.pid == ref.pid && b.cudnn_benchmark.value_or(false)) {
      life.warmup.push_back({LifePartKind::kCudnnBenchmark, 0, 0, {}});
      break;
    }
  }
  for (auto& p : WarmupExcess(ref)) life.warmup.push_back(std::move(p));
}

void TailParts(const analysis::RankSteps& ref, int64_t job_end_ns, RunLife& life) {
  for (const auto& [name, s] : ref.life.tail_phase_s) {
    if (s > 0) life.tail.push_back({LifePartKind::kPhase, s, 0, name});
  }
  std::stable_sort(life.tail.begin(), life.tail.end(),
                   [](const LifePart& a, const LifePart& b) { return a.seconds > b.seconds; });
  const int64_t last = std::max(ref.life.last_event_ns, ref.life.steady_end_ns);
  if (job_end_ns > last)
    life.tail.push_back({LifePartKind::kExit, NsToSeconds(job_end_ns - last), 0, {}});
}

}  // namespace

std::string_view LifePartName(LifePartKind kind) {
  switch (kind) {
    case LifePartKind::kInterpreter:
      return "interpreter";
    case LifePartKind::kImportTorch:
      return "import_torch";
    case LifePartKind::kSetup:
      return "setup";
    case LifePartKind::kCudaInit:
      return "cuda_init";
    case LifePartKind::kFirstBatch:
      return "first_batch";
    case LifePartKind::kPhase:
      return "phase";
    case LifePartKind::kCompile:
      return "compile";
    case LifePartKind::kCudnnBenchmark:
      return "cudnn_benchmark";
    case LifePartKind::kExit:
      return "exit";
  }
  return "unknown";
}

double RunLife::StartupShare() const {
  return wall_s > 0 ? std::min(1.0, (startup_s + warmup_s) / wall_s) : 0.0;
}

RunLife BuildRunLife(const rundir::RunMeta& meta, double wall_s,
                     const analysis::PhaseAnalysis& phases,
                     const std::vector<rundir::PythonProcess>& python, const rundir::JobInfo& info,
                     int64_t workers_started) {
  RunLife life;
  life.wall_s = wall_s;
  const analysis::RankSteps* ref = ReferenceRank(phases);
  if (ref == nullptr) return life;
  life.has_steps = true;
  life.rank = ref->rank;
  const analysis::RankLife& l = ref->life;
  const int64_t start = meta.start_mono_ns;
  const int64_t end = start + static_cast<int64_t>(wall_s * 1e9);
  life.startup_s = std::max(0.0, NsToSeconds(l.steps_begin_ns - start));
  life.warmup_steps = static_cast<int64_t>(ref->warmup.size());
  life.warmup_s = NsToSeconds(l.steady_begin_ns - l.steps_begin_ns);
  life.steady_steps = ref->count;
  life.steady_s = NsToSeconds(l.steady_end_ns - l.steady_begin_ns);
  life.tail_s = std::max(0.0, NsToSeconds(end - l.steady_end_ns));
  std::tie(life.steady_begin_ns, life.steady_end_ns) = JobWindow(phases, *ref);
  StartupParts(*ref, start, python, info, workers_started, life);
  WarmupParts(*ref, info, life);
  TailParts(*ref, end, life);
  life.sure = static_cast<double>(life.steady_steps) >= kThresholds.steady_sure_steps.value &&
              life.steady_s >= kThresholds.steady_sure_s.value;
  life.mostly_startup = life.StartupShare() >= kThresholds.startup_most_share.value;
  return life;
}

}  // namespace stallscope::diagnose
