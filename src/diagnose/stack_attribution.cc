#include "diagnose/stack_attribution.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "base/thresholds.h"
#include "base/units.h"
#include "base/vocabulary.h"
#include "diagnose/rule_util.h"
#include "diagnose/run_report.h"
#include "sample/recording.h"
#include "sample/sample.h"

namespace stallscope::diagnose {
namespace {

/// Counts of one group: per line of the job's code (a frame id), the innermost frames under it.
struct LineTally {
  int64_t samples = 0;
  std::map<uint32_t, int64_t> leaves;
};
struct GroupTally {
  int64_t samples = 0;
  std::unordered_map<uint32_t, LineTally> lines;
};

/// The phase a rank's main thread was in at `t`: the innermost closed phase instance holding it
/// (the latest to begin, `intervals` sorted by begin), else "other".
std::string_view PhaseAtTime(const std::vector<analysis::PhaseInterval>& intervals, int64_t t) {
  constexpr int kMaxLookBack = 256;  // nested phases open within a step: enough to find the outer
  auto it =
      std::upper_bound(intervals.begin(), intervals.end(), t,
                       [](int64_t v, const analysis::PhaseInterval& i) { return v < i.begin_ns; });
  for (int n = 0; it != intervals.begin() && n < kMaxLookBack; ++n) {
    --it;
    if (it->end_ns >= t) return it->name;
  }
  return phase_name::kOther;
}

struct GpuIdle;

/// A rank's main process: its steady window and phase instances.
struct StackRankWindow {
  int32_t rank = 0;
  int32_t pid = 0;
  const GpuIdle* gpu_idle = nullptr;  ///< its GPU's idle periods, when known
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  const std::vector<analysis::PhaseInterval>* intervals = nullptr;
  bool Holds(int64_t t) const { return t >= begin_ns && t <= end_ns; }
};

std::vector<StackRankWindow> StackRankWindows(const RunReport& report) {
  std::vector<StackRankWindow> out;
  for (const analysis::RankSteps& r : report.phases.ranks) {
    if (r.steps.empty()) continue;
    // The rank's phase instances from the one scan of the event log (AnalyzePhases), by begin.
    out.push_back(
        {r.rank, r.pid, nullptr, r.life.steady_begin_ns, r.life.steady_end_ns, &r.intervals});
  }
  return out;
}

/// The frame a sample is counted at: the innermost frame of the job's own code, else the
/// innermost frame.
uint32_t CountedFrame(const std::vector<uint32_t>& stack, const std::vector<bool>& library) {
  for (uint32_t id : stack) {
    if (!library[id]) return id;
  }
  return stack.front();
}

void CountSample(GroupTally& g, const std::vector<uint32_t>& stack,
                 const std::vector<bool>& library) {
  if (stack.empty()) return;
  const uint32_t at = CountedFrame(stack, library);
  ++g.samples;
  LineTally& line = g.lines[at];
  ++line.samples;
  if (stack.front() != at) ++line.leaves[stack.front()];
}

std::string FrameWhere(const stacks::StackFrame& f, std::string_view cwd) {
  return f.line > 0 ? fmt::format("{}:{}", ShortPath(f.file, cwd), f.line) : ShortPath(f.file, cwd);
}

StackGroup MakeGroup(std::string name, const GroupTally& g, const stacks::StackLog& log,
                     const std::vector<bool>& library, std::string_view base) {
  StackGroup out{std::move(name), g.samples, {}};
  std::vector<std::pair<uint32_t, const LineTally*>> order;
  for (const auto& [id, tally] : g.lines) order.emplace_back(id, &tally);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second->samples != b.second->samples ? a.second->samples > b.second->samples
                                                  : a.first < b.first;
  });
  if (order.size() > kMaxStackLines) order.resize(kMaxStackLines);
  for (const auto& [id, tally] : order) {
    const stacks::StackFrame& f = log.frames[id];
    StackLine line{FrameWhere(f, base),
                   f.file,
                   f.function,
                   f.line,
                   f.text,
                   library[id],
                   tally->samples,
                   static_cast<double>(tally->samples) / static_cast<double>(g.samples),
                   /*via=*/{},
                   /*via_share=*/0};
    auto top = std::max_element(tally->leaves.begin(), tally->leaves.end(),
                                [](const auto& a, const auto& b) { return a.second < b.second; });
    if (top != tally->leaves.end()) {
      const stacks::StackFrame& leaf = log.frames[top->first];
      line.via = fmt::format("{} {}", FrameWhere(leaf, base), leaf.function);
      line.via_share = static_cast<double>(top->second) / static_cast<double>(tally->samples);
    }
    out.lines.push_back(std::move(line));
  }
  return out;
}

/// When a GPU was idle, from the driver's sub-second utilization samples (on CLOCK_MONOTONIC:
/// sample::Sample::DriverMonoNs). A
/// driver sample covers the time since the one before it; idle when at or below
/// stack_gpu_idle_pct.
struct GpuIdle {
  std::vector<std::pair<int64_t, int64_t>> periods;  ///< [begin, end] ns, by begin
  bool Holds(int64_t t) const {
    auto it = std::upper_bound(periods.begin(), periods.end(), t,
                               [](int64_t v, const auto& p) { return v < p.first; });
    return it != periods.begin() && std::prev(it)->second >= t;
  }
};

std::vector<GpuIdle> IdlePeriods(const sample::Recording& recording) {
  constexpr int64_t kMaxDriverPeriodNs = kNsPerSec;  // a gap longer than this is no one period
  std::vector<std::vector<std::pair<int64_t, uint32_t>>> points;
  for (const sample::Sample& s : recording.samples) {
    if (points.size() < s.gpus.size()) points.resize(s.gpus.size());
    for (size_t g = 0; g < s.gpus.size(); ++g) {
      const gpu::GpuSample& x = s.gpus[g];
      for (size_t k = 0; !x.lost && k < x.util_sample_count && k < x.util_samples.size(); ++k)
        points[g].emplace_back(s.DriverMonoNs(x.util_samples[k].ts_us), x.util_samples[k].util_pct);
    }
  }
  std::vector<GpuIdle> out(points.size());
  for (size_t g = 0; g < points.size(); ++g) {
    std::sort(points[g].begin(), points[g].end());
    for (size_t k = 1; k < points[g].size(); ++k) {
      const auto& [t0, unused] = points[g][k - 1];
      const auto& [t1, pct] = points[g][k];
      if (t1 > t0 && t1 - t0 <= kMaxDriverPeriodNs &&
          static_cast<double>(pct) <= kThresholds.stack_gpu_idle_pct.value)
        out[g].periods.emplace_back(t0, t1);
    }
  }
  return out;
}

/// The GPU process `pid` used: the one whose process list names it, else the only GPU.
std::optional<size_t> GpuOfProcess(const sample::Recording& recording, int32_t pid, size_t gpus) {
  for (const sample::Sample& s : recording.samples) {
    for (size_t g = 0; g < s.gpus.size(); ++g) {
      for (const gpu::GpuProcess& p : s.gpus[g].processes) {
        if (static_cast<int32_t>(p.pid) == pid) return g;
      }
    }
  }
  return gpus == 1 ? std::optional<size_t>(0) : std::nullopt;
}

/// The sampled children of ranks that are DataLoader workers, with their rank: the ones the
/// hooks named (info "dataloader_workers"), or every sampled child when they named none (a run
/// without loader notes). Decided once per process, not per sample.
std::unordered_map<int32_t, int32_t> LoaderWorkerRanks(const stacks::StackLog& log,
                                                       const rundir::InfoRecords& info) {
  std::unordered_set<int32_t> named;
  for (const rundir::LoaderInfo& l : info.loaders)
    named.insert(l.worker_pids.begin(), l.worker_pids.end());
  std::unordered_map<int32_t, int32_t> out;
  for (const stacks::StackProcess& p : log.processes) {
    if (p.worker && (named.empty() || named.contains(p.pid))) out.emplace(p.pid, p.rank);
  }
  return out;
}

/// The folder the job's own files are shown relative to: the main script's (the outermost frame
/// of the first rank's first sample in its own code, or any process's when no rank has steps: a
/// process is sampled from its start, when the outermost frames are the interpreter's start-up),
/// else the first process's working directory.
std::string CodeBase(const stacks::StackLog& log, const std::vector<StackRankWindow>& ranks) {
  for (const stacks::StackSample& s : log.samples) {
    // The first rank's; without ranks (a job that marks no steps) any process's.
    if ((!ranks.empty() && s.pid != ranks.front().pid) || log.stacks[s.stack].empty()) continue;
    const std::string& file = log.frames[log.stacks[s.stack].back()].file;
    const size_t slash = file.rfind('/');
    if (file.starts_with('/') && slash != std::string::npos && !IsLibraryFile(file))
      return file.substr(0, slash);
  }
  return log.processes.empty() ? std::string() : log.processes.front().cwd;
}

void NoteStackTotals(const stacks::StackLog& log, StackReport& out) {
  out.present = true;
  out.main_hz = log.main_hz;
  out.worker_hz = log.worker_hz;
  out.samples = static_cast<int64_t>(log.samples.size());
  if (log.totals) {
    out.torn = log.totals->torn;
    out.failed = log.totals->failed;
    out.cpu_s = log.totals->cpu_s;
  }
  for (const stacks::StackProcess& p : log.processes) {
    if (!p.error.empty()) out.unreadable.push_back(p.error);
  }
}

}  // namespace

bool IsLibraryFile(std::string_view file) {
  if (file.empty() || file.front() == '<') return true;  // <frozen importlib._bootstrap>, <string>
  for (std::string_view marker : {"/site-packages/", "/dist-packages/", "/lib/python3",
                                  "/lib64/python3", "/stallscope/_", "/stallscope/__init__.py"}) {
    if (file.find(marker) != std::string_view::npos) return true;
  }
  return false;
}

std::string ShortPath(std::string_view file, std::string_view cwd) {
  for (std::string_view marker : {"/site-packages/", "/dist-packages/"}) {
    if (auto at = file.rfind(marker); at != std::string_view::npos)
      return std::string(file.substr(at + marker.size()));
  }
  if (auto at = file.find("/lib/python3."); at != std::string_view::npos) {
    if (auto slash = file.find('/', at + 13); slash != std::string_view::npos)
      return std::string(file.substr(slash + 1));
  }
  if (!cwd.empty() && file.size() > cwd.size() + 1 && file.starts_with(cwd) &&
      file[cwd.size()] == '/')
    return std::string(file.substr(cwd.size() + 1));
  return std::string(file);
}

StackReport AttributeStacks(const rundir::RunData& data, const RunReport& report) {
  StackReport out;
  const stacks::StackLog& log = data.stacks;
  if (log.empty()) return out;
  NoteStackTotals(log, out);
  std::vector<bool> library(log.frames.size());
  for (size_t i = 0; i < log.frames.size(); ++i) library[i] = IsLibraryFile(log.frames[i].file);
  std::vector<StackRankWindow> ranks = StackRankWindows(report);
  const std::vector<GpuIdle> idle = IdlePeriods(data.recording);
  for (StackRankWindow& r : ranks) {
    if (auto g = GpuOfProcess(data.recording, r.pid, idle.size()); g && !idle[*g].periods.empty())
      r.gpu_idle = &idle[*g];
  }
  const std::unordered_map<int32_t, int32_t> workers = LoaderWorkerRanks(log, data.info);
  std::map<std::string, GroupTally, std::less<>> phases;
  GroupTally worker_tally, gpu_idle, threads, whole_run;
  for (const stacks::StackSample& s : log.samples) {
    const std::vector<uint32_t>& stack = log.stacks[s.stack];
    auto rank =
        std::find_if(ranks.begin(), ranks.end(), [&](const auto& r) { return r.pid == s.pid; });
    if (rank != ranks.end()) {
      if (!rank->Holds(s.t_ns)) continue;
      if (s.tid != s.pid) {  // another thread of the rank (--stacks-threads all): not its phases
        CountSample(threads, stack, library);
        continue;
      }
      ++out.steady_samples;
      const std::string_view phase = PhaseAtTime(*rank->intervals, s.t_ns);
      auto in = phases.find(phase);  // no string made per sample
      if (in == phases.end()) in = phases.emplace(std::string(phase), GroupTally{}).first;
      CountSample(in->second, stack, library);
      if (rank->gpu_idle && rank->gpu_idle->Holds(s.t_ns)) CountSample(gpu_idle, stack, library);
      continue;
    }
    auto worker = workers.find(s.pid);
    if (worker == workers.end()) {
      // No rank marked a step (a job without a training loop): where its Python was all along.
      if (ranks.empty() && s.tid == s.pid) CountSample(whole_run, stack, library);
      continue;
    }
    auto parent = std::find_if(ranks.begin(), ranks.end(),
                               [&](const auto& r) { return r.rank == worker->second; });
    const bool steady = parent != ranks.end()
                            ? parent->Holds(s.t_ns)
                            : std::any_of(ranks.begin(), ranks.end(),
                                          [&](const auto& r) { return r.Holds(s.t_ns); });
    if (steady) CountSample(worker_tally, stack, library);
  }
  const std::string base = CodeBase(log, ranks);
  for (const auto& [name, tally] : phases)
    out.phases.push_back(MakeGroup(name, tally, log, library, base));
  std::stable_sort(out.phases.begin(), out.phases.end(),
                   [](const auto& a, const auto& b) { return a.samples > b.samples; });
  if (worker_tally.samples > 0)
    out.workers = MakeGroup("workers", worker_tally, log, library, base);
  if (gpu_idle.samples > 0) out.gpu_idle = MakeGroup("gpu_idle", gpu_idle, log, library, base);
  if (threads.samples > 0) out.threads = MakeGroup("threads", threads, log, library, base);
  if (whole_run.samples > 0) out.whole_run = MakeGroup("whole_run", whole_run, log, library, base);
  return out;
}

namespace {

std::string StackLineText(const StackLine& l) {
  std::string s = l.where;
  if (!l.text.empty()) s += fmt::format(" `{}`", l.text);
  if (!l.via.empty() && l.via_share >= 0.5) s += fmt::format(" (in {})", l.via);
  return s;
}

/// "{lead} train.py:141 `…` in 52% of samples, …", or empty.
std::optional<Evidence> MainLinesEvidence(const StackGroup& g, std::string_view lead) {
  if (static_cast<double>(g.samples) < kThresholds.stack_min_samples.value) return std::nullopt;
  std::string lines;
  int named = 0;
  for (const StackLine& l : g.lines) {
    if (l.share < kThresholds.stack_line_min_share.value || named == 3) break;
    lines +=
        fmt::format("{}{} in {} of samples", named++ ? "; " : "", StackLineText(l), Pct(l.share));
  }
  if (named == 0) return std::nullopt;
  return Evidence{fmt::format("{} {} ({} samples)", lead, lines, g.samples),
                  fmt::format("stacks.{}", g.name), g.lines.front().share, "fraction",
                  kThresholds.stack_line_min_share.value};
}

/// "workers: 64% in PIL/Image.py:2192 resize ← dataset.py:58 `…`", or empty.
std::optional<Evidence> WorkerLinesEvidence(const StackGroup& g) {
  if (static_cast<double>(g.samples) < kThresholds.stack_min_samples.value) return std::nullopt;
  std::string lines;
  int named = 0;
  for (const StackLine& l : g.lines) {
    if (l.share < kThresholds.stack_line_min_share.value || named == 3) break;
    std::string where = l.where + (l.text.empty() ? "" : fmt::format(" `{}`", l.text));
    lines += named++ ? "; " : "";
    lines += !l.via.empty() && l.via_share >= 0.5
                 ? fmt::format("{} in {} ← {}", Pct(l.share * l.via_share), l.via, where)
                 : fmt::format("{} at {}", Pct(l.share), where);
  }
  if (named == 0) return std::nullopt;
  return Evidence{fmt::format("DataLoader workers: {} ({} samples)", lines, g.samples),
                  "stacks.workers", g.lines.front().share, "fraction",
                  kThresholds.stack_line_min_share.value};
}

void AddStackLines(Finding& f, const StackReport& stacks) {
  std::string phase;
  for (const Evidence& e : f.evidence) {
    if (e.metric.starts_with("phase_share.")) {
      phase = e.metric.substr(12);
      break;
    }
  }
  std::vector<Evidence> added;
  for (const StackGroup& g : stacks.phases) {
    if (g.name != phase) continue;
    const std::string lead = fmt::format("during {} the main thread was at", g.name);
    if (auto e = MainLinesEvidence(g, lead)) added.push_back(std::move(*e));
  }
  const bool data_bound = f.cls == FindingClass::kDataBoundCpu ||
                          f.cls == FindingClass::kDataBoundIo ||
                          f.cls == FindingClass::kPrefetchTooShallow;
  if (data_bound && stacks.workers) {
    if (auto e = WorkerLinesEvidence(*stacks.workers)) added.push_back(std::move(*e));
  }
  for (auto& e : added) f.evidence.push_back(std::move(e));
}

}  // namespace

void AddStackEvidence(Verdict& verdict, const StackReport& stacks) {
  if (!stacks.present) return;
  if (verdict.principal) AddStackLines(*verdict.principal, stacks);
  if (verdict.principal && stacks.gpu_idle) {
    const std::string lead = fmt::format(
        "while its GPU was idle (≤ {:.0f}% in the driver's sub-second samples) the "
        "main thread was at",
        kThresholds.stack_gpu_idle_pct.value);
    if (auto e = MainLinesEvidence(*stacks.gpu_idle, lead))
      verdict.principal->evidence.push_back(std::move(*e));
  }
  for (Finding& f : verdict.secondary) AddStackLines(f, stacks);
}

}  // namespace stallscope::diagnose
