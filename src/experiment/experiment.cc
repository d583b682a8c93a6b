#include "experiment/experiment.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/json_fields.h"
#include "base/stats.h"
#include "base/thresholds.h"
#include "diagnose/facts.h"
#include "diagnose/rule_util.h"
#include "diagnose/run_analysis.h"
#include "diagnose/verdict.h"

namespace stallscope::experiment {
namespace {

/// Rank 0's steps, else the rank with the most.
const analysis::RankSteps* MeasuredRank(const analysis::PhaseAnalysis& phases) {
  const analysis::RankSteps* best = nullptr;
  for (const auto& r : phases.ranks) {
    if (r.steps.empty()) continue;
    if (r.rank == 0) return &r;
    if (best == nullptr || r.count > best->count) best = &r;
  }
  return best;
}

/// "2× NVIDIA H100 80GB HBM3" (names in order, equal ones counted).
std::string GpuNames(const std::vector<gpu::GpuStatic>& gpus) {
  std::vector<std::pair<std::string, int>> names;
  for (const auto& g : gpus) {
    if (!names.empty() && names.back().first == g.name) {
      ++names.back().second;
    } else {
      names.emplace_back(g.name, 1);
    }
  }
  std::string out;
  for (const auto& [name, n] : names) {
    out += (out.empty() ? "" : ", ") + (n > 1 ? fmt::format("{}× {}", n, name) : name);
  }
  return out;
}

/// The steady steps of `rank` a digest counts: from the first numbered above `skip_through`,
/// unless fewer than rate_min_steps would be left (then all of them).
std::span<const analysis::StepRecord> CountedSteps(const analysis::RankSteps& rank,
                                                   int64_t skip_through) {
  const auto kMinSteps = static_cast<size_t>(kThresholds.rate_min_steps.value);  // the rate's
  const auto from = static_cast<size_t>(
      std::find_if(rank.steps.begin(), rank.steps.end(),
                   [&](const analysis::StepRecord& s) { return s.index > skip_through; }) -
      rank.steps.begin());
  std::span<const analysis::StepRecord> all(rank.steps);
  return all.size() - from >= kMinSteps ? all.subspan(from) : all;
}

std::vector<double> Durations(std::span<const analysis::StepRecord> steps) {
  std::vector<double> out;
  out.reserve(steps.size());
  for (const auto& s : steps) out.push_back(static_cast<double>(s.end_ns - s.begin_ns) / 1e9);
  return out;
}

/// Every rank's steady steps (AnalyzePhases leaves the warm-up apart) and recorded phases.
std::vector<RankDigest> RankDigests(const analysis::PhaseAnalysis& phases, int64_t skip_through) {
  std::vector<RankDigest> out;
  for (const auto& rank : phases.ranks) {
    if (rank.steps.empty()) continue;
    analysis::RankSteps r;  // the counted steps only
    r.rank = rank.rank;
    const auto counted = CountedSteps(rank, skip_through);
    r.steps.assign(counted.begin(), counted.end());
    RankDigest d;
    d.rank = r.rank;
    const std::vector<double> steps = Durations(r.steps);
    d.steps = static_cast<int64_t>(steps.size());
    d.median_step_s = Median(steps);
    RunningStats st;
    for (double s : steps) st.Add(s);
    d.variation_ratio = st.count() > 1 && st.mean() > 0 ? st.stddev() / st.mean() : 0;
    std::map<std::string, std::vector<double>> per_step;
    for (size_t i = 0; i < r.steps.size(); ++i) {
      for (const auto& [name, s] : r.steps[i].phase_s) {
        std::vector<double>& v = per_step[name];
        v.resize(i, 0.0);  // the steps before without it
        v.push_back(s);
      }
    }
    for (auto& [name, v] : per_step) {
      v.resize(r.steps.size(), 0.0);
      d.median_phase_s[name] = Median(v);
    }
    for (const auto& p : phases.phases) {
      if (p.rank == r.rank && p.name != "other") d.phases.emplace_back(p.name, p.count, p.total_s);
    }
    std::sort(d.phases.begin(), d.phases.end(),
              [](const auto& a, const auto& b) { return std::get<2>(a) > std::get<2>(b); });
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return out;
}

/// The GPUs the job used, with their mean utilization over the steady window: those whose NVML
/// process lists named one of the job's processes; when none did (PIDs of another namespace, a
/// driver that hides them), those that listed any process; else those that were ever busy; else
/// every GPU.
std::vector<GpuUse> JobGpus(const rundir::RunData& data, const diagnose::RunReport& report) {
  std::set<uint32_t> job, any, busy;
  const auto& statics = data.recording.header.gpus;
  for (const auto& s : data.recording.samples) {
    std::set<int32_t> pids;
    for (const auto& p : s.processes) pids.insert(p.pid);
    for (size_t g = 0; g < s.gpus.size(); ++g) {
      const uint32_t index = g < statics.size() ? statics[g].index : static_cast<uint32_t>(g);
      if (s.gpus[g].util_gpu_pct.value_or(0) > 0) busy.insert(index);
      for (const auto& gp : s.gpus[g].processes) {
        any.insert(index);
        if (pids.count(static_cast<int32_t>(gp.pid)) != 0) job.insert(index);
      }
    }
  }
  const std::set<uint32_t>& used = !job.empty() ? job : !any.empty() ? any : busy;
  std::vector<GpuUse> out;
  for (const auto& g : report.machine.gpus) {
    const RunningStats& u = g.util_fine_pct.count() > 0 ? g.util_fine_pct : g.util_pct;
    if (u.count() > 0 && (used.empty() || used.count(g.index) != 0))
      out.push_back({g.index, u.mean()});
  }
  return out;
}

/// The job's CPUs and peak RSS from the sampler's process tree over the steady window (every
/// process, DataLoader workers of a forkserver included); getrusage only sees the children the
/// job waited for, so it is the fallback for the CPUs.
void JobCpusAndMemory(const rundir::RunData& data, const diagnose::RunReport& report,
                      RunDigest& d) {
  RunningStats cpus;
  for (const auto& s : diagnose::SteadySamples(data.recording, report)) {
    if (!s.has_processes) continue;
    uint64_t rss = 0;
    double cpu = 0;
    bool complete = true;
    for (const auto& p : s.processes) {
      rss += p.rss_bytes;
      if (p.cpu_pct) {
        cpu += *p.cpu_pct / 100.0;
      } else {
        complete = false;
      }
    }
    d.peak_rss_bytes = std::max(d.peak_rss_bytes.value_or(0), rss);
    if (complete && !s.processes.empty()) cpus.Add(cpu);
  }
  if (cpus.count() > 0) {
    d.job_cpus = cpus.mean();
  } else if (data.meta.job_cpu_s && data.meta.end_mono_ns &&
             *data.meta.end_mono_ns > data.meta.start_mono_ns) {
    d.job_cpus = *data.meta.job_cpu_s /
                 (static_cast<double>(*data.meta.end_mono_ns - data.meta.start_mono_ns) / 1e9);
  }
}

}  // namespace

RunDigest DigestRun(const rundir::RunData& data, const diagnose::RunAnalysis& analysis,
                    int64_t skip_through_step) {
  const diagnose::RunReport& report = analysis.report;
  RunDigest d;
  d.dir = data.paths.dir;
  d.meta = data.meta;
  d.wall_s = report.wall_s;
  d.life = report.life;
  d.ledger = report.ledger;
  if (const analysis::RankSteps* rank = MeasuredRank(report.phases)) {
    const auto counted = CountedSteps(*rank, skip_through_step);
    d.warmup_steps =
        static_cast<int64_t>(rank->warmup.size() + rank->steps.size() - counted.size());
    d.step_s = Durations(counted);
    d.rate = analysis::EstimateRate(d.step_s);
    std::map<std::string, double> phase_s;
    double total_s = 0;
    int64_t syncs = 0;
    for (const auto& step : counted) {
      for (const auto& [name, s] : step.phase_s) phase_s[name] += s;
      for (const auto& [name, n] : step.counters) {
        if (name.starts_with("host_sync.")) syncs += n;
      }
    }
    for (double s : d.step_s) total_s += s;
    const double steps = static_cast<double>(std::max<size_t>(1, d.step_s.size()));
    d.host_syncs_per_step = static_cast<double>(syncs) / steps;
    for (const auto& [name, s] : phase_s) {
      d.phases.push_back({name, s * 1e3 / steps, total_s > 0 ? s / total_s : 0});
      if (name == "data_loading") d.data_share = d.phases.back().share;
    }
    std::sort(d.phases.begin(), d.phases.end(), [](const PhasePerStep& x, const PhasePerStep& y) {
      return x.ms_per_step > y.ms_per_step;
    });
    for (const auto& l : report.loaders) {
      if (l.rank == rank->rank && (l.pid == rank->pid || !d.loader)) d.loader = l;
    }
  }
  if (!d.loader && !report.loaders.empty()) d.loader = report.loaders.front();
  if (d.loader) d.batch_size = d.loader->batch_size;
  if (d.rate && d.batch_size) d.samples_per_s = d.rate->per_s * static_cast<double>(*d.batch_size);

  RunningStats util;
  for (const auto& g : report.machine.gpus) {
    const RunningStats& u = g.util_fine_pct.count() > 0 ? g.util_fine_pct : g.util_pct;
    if (u.count() > 0) util.Add(u.mean());
  }
  if (util.count() > 0) d.gpu_util_pct = util.mean();
  d.job_gpus = JobGpus(data, report);
  d.ranks = RankDigests(report.phases, skip_through_step);
  d.periodic = analysis::FindPeriodicPhases(report.phases);
  JobCpusAndMemory(data, report, d);
  d.allowed_cpus = analysis.facts.allowed_cpus;
  d.other_cpus = analysis.facts.other_cpu;
  d.gpus = GpuNames(data.recording.header.gpus);
  d.driver = data.recording.header.driver_version;
  d.principal = report.verdict.principal;
  d.caveats = report.verdict.caveats;
  d.busy_host = report.verdict.busy_host;
  d.experiment = data.info.experiment;
  d.warnings = report.warnings;
  return d;
}

Result<RunDigest> LoadDigest(const std::string& dir, int64_t skip_through_step) {
  TRY(diagnose::LoadedRun run, diagnose::LoadAndAnalyzeRun(dir));
  return DigestRun(run.data, run.analysis, skip_through_step);
}

}  // namespace stallscope::experiment
