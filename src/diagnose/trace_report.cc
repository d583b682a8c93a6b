#include "diagnose/trace_report.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "base/stats.h"
#include "base/thread_pool.h"
#include "base/units.h"
#include "base/vocabulary.h"
#include "diagnose/run_report.h"
#include "diagnose/verdict.h"

namespace stallscope::diagnose {
namespace {

using trace::StepCategory;

std::string LoaderIterator(const trace::RankTrace& t) {
  for (uint32_t id = 0; id < t.names.size(); ++id) {
    const std::string& n = t.names.Get(id);
    if (n.find("DataLoader") == std::string::npos) continue;
    if (n.find("_SingleProcessDataLoaderIter") != std::string::npos) {
      return "_SingleProcessDataLoaderIter";
    }
    if (n.find("_MultiProcessingDataLoaderIter") != std::string::npos) {
      return "_MultiProcessingDataLoaderIter";
    }
  }
  return "";
}

/// Phase seconds of one step from its category times (see TracePhaseSteps).
std::map<std::string, double> StepPhases(const trace::CategoryNs& c, int64_t sync_ns, bool gpu) {
  std::map<std::string, double> p;
  auto get = [&](StepCategory cat) { return c.Get(cat); };
  p[std::string(phase_name::kDataLoading)] = NsToSeconds(get(StepCategory::kDataLoader));
  p[std::string(phase_name::kOther)] = NsToSeconds(get(StepCategory::kOther));
  if (!gpu) {
    p[std::string(phase_name::kCpuExec)] =
        NsToSeconds(get(StepCategory::kCpuExec) + get(StepCategory::kRuntime) +
                    get(StepCategory::kKernel) + get(StepCategory::kMemcpy) +
                    get(StepCategory::kMemset) + get(StepCategory::kCommunication));
    return p;
  }
  int64_t runtime = get(StepCategory::kRuntime);
  // Runtime time is host time in API calls while no GPU work ran; the synchronizing calls'
  // part of it is the host waiting on the GPU (an upper bound: sync time may also lie under
  // GPU work, which claims first).
  // It goes to "other" as in a live run, where syncs are time outside the named phases (the
  // host-sync rule reads "other" together with the sync counters).
  int64_t sync = std::clamp<int64_t>(sync_ns, 0, runtime);
  p[std::string(phase_name::kGpuCompute)] = NsToSeconds(
      get(StepCategory::kKernel) + get(StepCategory::kMemcpy) + get(StepCategory::kMemset));
  p[std::string(phase_name::kCommunication)] = NsToSeconds(get(StepCategory::kCommunication));
  p[std::string(phase_name::kOther)] += NsToSeconds(sync);
  p[std::string(phase_name::kLaunchOverhead)] = NsToSeconds(runtime - sync);
  p[std::string(phase_name::kCpuOps)] = NsToSeconds(get(StepCategory::kCpuExec));
  return p;
}

void Detect(TraceRankReport& r) {
  std::vector<double> steps;
  steps.reserve(r.series.step_ns.size());
  for (int64_t ns : r.series.step_ns) steps.push_back(NsToSeconds(ns));
  r.step_outliers = analysis::FindOutliers(steps);
  r.step_period = analysis::DetectPeriod(steps);
}

// Runtime calls of every rank: shares of the windows, the top names, memory calls per step.
void AddRuntimeFacts(const std::vector<TraceRankReport>& ranks, TraceFacts& f) {
  int64_t window = 0;
  std::array<int64_t, trace::kRuntimeCallKindCount> ns{};
  std::map<std::string, trace::RuntimeCallTotal> by_name;
  for (const auto& r : ranks) {
    const trace::RuntimeCalls& rc = r.idle.runtime;
    window += rc.window_ns;
    for (size_t k = 0; k < trace::kRuntimeCallKindCount; ++k) {
      ns[k] += rc.ns[k];
      f.runtime_calls[k] += rc.count[k];
    }
    for (const auto& t : rc.top) {
      trace::RuntimeCallTotal& m = by_name[t.name];
      m.name = t.name;
      m.kind = t.kind;
      m.count += t.count;
      m.ns += t.ns;
    }
    f.steps += static_cast<int64_t>(rc.memory_calls_per_step.size());
    for (int64_t n : rc.memory_calls_per_step) {
      f.steps_with_memory_calls += n > 0 ? 1 : 0;
      f.memory_calls_in_steps += n;
    }
    f.host_syncs += r.idle.syncs.count;
  }
  if (window > 0) {
    for (size_t k = 0; k < trace::kRuntimeCallKindCount; ++k) {
      f.runtime_share[k] = static_cast<double>(ns[k]) / static_cast<double>(window);
    }
  }
  for (auto& [name, t] : by_name) f.top_calls.push_back(std::move(t));
  std::stable_sort(f.top_calls.begin(), f.top_calls.end(),
                   [](const auto& a, const auto& b) { return a.ns > b.ns; });
  if (f.top_calls.size() > trace::RuntimeCalls::kMaxTopCalls) {
    f.top_calls.resize(trace::RuntimeCalls::kMaxTopCalls);
  }
}

TraceFacts FactsOf(const std::vector<TraceRankReport>& ranks) {
  TraceFacts f;
  f.ranks = static_cast<int64_t>(ranks.size());
  int64_t window = 0, span = 0, comm = 0, overlap = 0, kernel_ns = 0;
  std::array<int64_t, trace::kIdleCauseCount> idle_ns{};
  std::array<int64_t, trace::kIdlePositionCount> position_ns{};
  std::vector<double> queues;
  for (const auto& r : ranks) {
    for (const auto& d : r.idle.devices) {
      ++f.gpu_devices;
      window += d.window_ns;
      for (size_t i = 0; i < trace::kIdleCauseCount; ++i) idle_ns[i] += d.idle.ns[i];
      for (size_t i = 0; i < trace::kIdlePositionCount; ++i) position_ns[i] += d.position_ns[i];
      std::string name;
      for (const auto& p : r.devices) {
        if (p.id == d.device) name = p.name;
      }
      double share =
          d.window_ns > 0 ? static_cast<double>(d.busy_ns) / static_cast<double>(d.window_ns) : 0.0;
      f.gpus.push_back({r.rank, d.device, name, share});
    }
    span += r.gpu.temporal.span_ns;
    comm += r.gpu.comm_ns;
    overlap += r.gpu.comm_overlap_ns;
    kernel_ns += r.kernels.kernel_time_ns;
    f.kernels += r.kernels.kernel_count;
    f.cuda_graph_launches += r.kernels.cuda_graph_launches;
    // The stream with the most launches speaks for the rank's queue.
    const trace::QueueLength* top = nullptr;
    for (const auto& q : r.gpu.launch.queues) {
      if (!top || q.samples > top->samples) top = &q;
    }
    if (top && top->samples > 0) queues.push_back(top->mean);
  }
  if (window > 0) {
    for (size_t i = 0; i < trace::kIdleCauseCount; ++i) {
      f.idle_share[i] = static_cast<double>(idle_ns[i]) / static_cast<double>(window);
    }
    for (size_t i = 0; i < trace::kIdlePositionCount; ++i) {
      f.idle_position_share[i] = static_cast<double>(position_ns[i]) / static_cast<double>(window);
    }
  }
  if (span > 0) f.comm_share = static_cast<double>(comm) / static_cast<double>(span);
  if (comm > 0) f.overlap_share = static_cast<double>(overlap) / static_cast<double>(comm);
  if (!queues.empty()) f.queue_mean = Quantile(queues, 0.5);
  if (f.kernels > 0) {
    f.kernel_mean_us = static_cast<double>(kernel_ns) / static_cast<double>(f.kernels) / 1e3;
  }
  AddRuntimeFacts(ranks, f);
  return f;
}

}  // namespace

TraceRankReport AnalyzeRank(trace::RankTrace t, const trace::AnalysisOptions& options,
                            bool parallel, bool cross_rank) {
  TraceRankReport r;
  r.timeline = trace::PrepareTimeline(t, options);
  r.rank = t.rank;
  r.path = t.path;
  r.rank_source = t.rank_source;
  r.dialect = t.dialect;
  r.world_size = t.world_size;
  r.backend = t.backend;
  r.devices = t.devices;
  r.stats = t.stats;
  r.warnings = t.warnings;
  r.loader_iterator = LoaderIterator(t);
  // The analyses only read the prepared trace: with a spare core, run them in two groups of
  // about equal cost (GPU metrics + kernels | step breakdown + idle attribution; on
  // trace_diff/control 3.3 + 1.6 ms | 1.9 + 3.5 ms).
  auto second = [&] {
    r.steps = trace::ComputeStepBreakdown(t, r.timeline);
    r.idle = trace::AttributeGpuIdle(t, r.timeline);
  };
  std::optional<std::thread> helper;
  if (parallel) helper.emplace(second);
  r.gpu = trace::ComputeGpuMetrics(t, r.timeline, options);
  r.kernels = trace::AnalyzeKernels(t);
  if (helper) {
    helper->join();
  } else {
    second();
  }
  if (cross_rank) r.cross_input = trace::MakeCrossRankInput(t, r.timeline, r.kernels);
  r.series = trace::BuildStepSeries(r.steps, r.idle);
  if (r.timeline.steps.empty()) {
    r.warnings.push_back(
        fmt::format("{}: no ProfilerStep#N ranges (use torch.profiler with a schedule and call "
                    "prof.step() each iteration); the whole trace is analysed as one window",
                    r.path));
  }
  Detect(r);
  return r;
}

analysis::RankSteps TracePhaseSteps(const TraceRankReport& r) {
  analysis::RankSteps rs;
  rs.rank = r.rank;
  bool gpu = r.has_gpu();
  for (size_t i = 0; i < r.steps.steps.size(); ++i) {
    const auto& row = r.steps.steps[i];
    analysis::StepRecord s;
    s.index = static_cast<int64_t>(i) + 1;
    s.begin_ns = row.begin_ns;
    s.end_ns = row.end_ns;
    int64_t sync_ns = i < r.idle.syncs.ns_per_step.size() ? r.idle.syncs.ns_per_step[i] : 0;
    s.phase_s = StepPhases(row.times, sync_ns, gpu);
    if (i < r.idle.syncs.count_per_step.size() && r.idle.syncs.count_per_step[i] > 0) {
      s.counters["host_sync.sync_calls"] = r.idle.syncs.count_per_step[i];
    }
    rs.steps.push_back(std::move(s));
  }
  return rs;
}

TraceReport BuildTraceReport(std::vector<TraceRankReport> ranks,
                             const trace::AnalysisOptions& options) {
  TraceReport report;
  report.options = options;
  std::stable_sort(ranks.begin(), ranks.end(),
                   [](const auto& a, const auto& b) { return a.rank < b.rank; });
  for (size_t i = 1; i < ranks.size(); ++i) {
    if (ranks[i].rank == ranks[i - 1].rank) {
      report.warnings.push_back(
          fmt::format("{} and {} both claim rank {} ({}): analysed "
                      "separately",
                      ranks[i - 1].path, ranks[i].path, ranks[i].rank,
                      trace::RankSourceName(ranks[i].rank_source)));
    }
  }
  std::vector<trace::CrossRankInput> inputs;
  for (const auto& r : ranks) inputs.push_back(r.cross_input);
  report.cross = trace::AnalyzeCrossRank(inputs);
  report.facts = FactsOf(ranks);

  std::vector<rundir::LoaderInfo> loaders;
  std::vector<analysis::RankSteps> steps;
  for (const auto& r : ranks) {
    steps.push_back(TracePhaseSteps(r));
    if (!r.loader_iterator.empty()) {
      rundir::LoaderInfo l;
      l.rank = r.rank;
      if (r.loader_iterator == "_SingleProcessDataLoaderIter") l.num_workers = 0;
      loaders.push_back(std::move(l));
    }
  }
  report.phases = analysis::PhasesFromSteps(std::move(steps), kThresholds);
  report.verdict = Diagnose(BuildTraceFacts(report.facts, report.phases, loaders));
  report.verdict.compute_time =
      ComputeTime::kUnknown;  // a trace's compute is its kernels: GPU time
  report.ranks = std::move(ranks);
  return report;
}

namespace {

/// Issue 12 finding 9: `--steps 100:200` on a trace of steps 551..552 analysed the whole trace
/// with a warning. A --steps range that holds no step of a rank is an error naming its file.
Status CheckStepRange(const TraceRankReport& r, const trace::AnalysisOptions& options) {
  if ((!options.first_step && !options.last_step) || !r.timeline.steps.empty()) return OkStatus();
  auto bound = [](const std::optional<int64_t>& n) { return n ? std::to_string(*n) : ""; };
  const std::string asked = bound(options.first_step) + ".." + bound(options.last_step);
  const trace::Timeline& t = r.timeline;
  if (!t.trace_first_step) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "{}: no step in {} (the trace has no ProfilerStep#N ranges)", r.path, asked);
  }
  return MakeError(ErrorCode::kInvalidArgument, "{}: no step in {} (the trace has {}..{}{})",
                   r.path, asked, *t.trace_first_step, *t.trace_last_step,
                   t.last_step_dropped ? "; --hta-compat drops the last step" : "");
}

/// Files that could not be read while others could: left out, each said in a warning.
void WarnSkipped(const std::vector<Error>& skipped, TraceReport& report) {
  for (const Error& e : skipped) {
    report.warnings.push_back(
        fmt::format("{}; left out, the other {} file(s) analysed", e.message, report.ranks.size()));
  }
}

/// AnalyzeTraceFiles with a hook: every rank read and held, the hook, then the analyses.
Result<TraceReport> AnalyzeAllAtOnce(const std::vector<std::string>& files,
                                     const trace::ReadOptions& read,
                                     const trace::AnalysisOptions& options, unsigned threads,
                                     const TracesHook& before_analysis) {
  std::vector<Error> skipped;
  TRY(std::vector<trace::RankTrace> traces, trace::ReadTraces(files, read, threads, &skipped));
  TRY_STATUS(before_analysis(traces));
  std::vector<TraceRankReport> ranks;
  for (auto& t : traces) {
    ranks.push_back(AnalyzeRank(std::move(t), options));
    TRY_STATUS(CheckStepRange(ranks.back(), options));
  }
  TraceReport report = BuildTraceReport(std::move(ranks), options);
  WarnSkipped(skipped, report);
  return report;
}

}  // namespace

Result<TraceReport> AnalyzeTraceFiles(const std::vector<std::string>& paths,
                                      const trace::ReadOptions& read,
                                      const trace::AnalysisOptions& options, unsigned threads,
                                      const TracesHook& before_analysis) {
  TRY(std::vector<std::string> files, trace::ExpandTracePaths(paths));
  if (files.empty()) {
    return MakeError(ErrorCode::kNotFound, "{}: no trace files (*.json, *.json.gz)",
                     paths.empty() ? std::string(".") : paths.front());
  }
  if (before_analysis) return AnalyzeAllAtOnce(files, read, options, threads, before_analysis);
  const unsigned wanted = ThreadsFor(SIZE_MAX, threads);  // 0: one per core
  // Fewer files than cores: each rank's analyses may use a second thread.
  const bool spare_core = wanted > files.size();
  std::vector<std::optional<TraceRankReport>> done(files.size());
  std::vector<std::optional<Error>> errors(files.size());
  std::vector<TaskFailure> crashed = ParallelFor(files.size(), wanted, [&](size_t i) {
    auto t = trace::ReadTrace(files[i], read);
    if (!t.ok()) {
      errors[i] = t.error();
      return;
    }
    done[i] = AnalyzeRank(std::move(t).value(), options, spare_core, files.size() > 1);
    if (auto st = CheckStepRange(*done[i], options); !st.ok()) errors[i] = st.error();
  });
  for (const TaskFailure& f : crashed) {
    errors[f.index] = MakeError(ErrorCode::kInternal, "{}: {}", files[f.index], f.what);
  }
  // A file that cannot be read is left out with a warning while others can; a --steps range
  // without steps, a crash, or every file unreadable is an error (the first in path order).
  std::vector<Error> skipped;
  std::vector<TraceRankReport> ranks;
  for (size_t i = 0; i < files.size(); ++i) {
    if (done[i] && !errors[i]) {
      ranks.push_back(std::move(*done[i]));
    } else if (errors[i] && !done[i] && errors[i]->code != ErrorCode::kInternal) {
      skipped.push_back(*errors[i]);
    } else if (errors[i]) {
      return *errors[i];
    }
  }
  if (ranks.empty()) return skipped.front();
  TraceReport report = BuildTraceReport(std::move(ranks), options);
  WarnSkipped(skipped, report);
  return report;
}

}  // namespace stallscope::diagnose
