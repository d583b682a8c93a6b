#pragma once
// Hand-built runs for the verdict rules' tests (verdict_test.cc, gpu_rules_test.cc): per-step
// phases, processes, GPUs and host facts, analysed by the production code (PhasesFromSteps,
// BuildRunFacts, Diagnose).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "analysis/phases.h"
#include "diagnose/verdict.h"

namespace stallscope::diagnose::verdict_testing {

using Phases = std::map<std::string, double>;
using Counters = std::map<std::string, int64_t>;

// ---------------------------------------------------------------------------------------------
// Hand-built runs
// ---------------------------------------------------------------------------------------------

/// One rank's steps from per-step phase times (the step lasts the sum of its phases).
inline analysis::RankSteps MakeRank(int32_t rank, int32_t pid, const std::vector<Phases>& steps,
                                    const Counters& counters_each_step = {}) {
  analysis::RankSteps r;
  r.rank = rank;
  r.pid = pid;
  int64_t t_ns = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    analysis::StepRecord s;
    s.index = static_cast<int64_t>(i) + 1;
    s.begin_ns = t_ns;
    double len = 0;
    for (const auto& [name, sec] : steps[i]) len += sec;
    t_ns += std::llround(len * 1e9);
    s.end_ns = t_ns;
    s.phase_s = steps[i];
    s.counters = counters_each_step;
    r.steps.push_back(std::move(s));
  }
  return r;  // step statistics: analysis::PhasesFromSteps
}

/// `n` identical steps.
inline std::vector<Phases> Steady(size_t n, const Phases& step) {
  return std::vector<Phases>(n, step);
}

struct GpuSpec {
  double util_pct = 0;
  double sm_clock_mhz = 1900;
  double power_w = 600;
  double mem_used_gib = 40;
  uint64_t clock_reasons = 0;
  double throttled_fraction = 0;  ///< share of samples with clock_reasons set
  /// GPM (Hopper+): when sm_active_pct is set, every 5th sample closes a 5 s GPM window.
  std::optional<double> sm_active_pct = std::nullopt;
  std::optional<double> tensor_pct = std::nullopt;
  std::optional<double> fp32_pct = std::nullopt;
  std::optional<double> fp16_pct = std::nullopt;
};

/// A run built by hand: samples, process rows, loader and torch info, phases.
class FakeRun {
 public:
  static constexpr int kSamples = 20;
  static constexpr int32_t kMainPid = 10;

  FakeRun() {
    for (int i = 0; i < kSamples; ++i) {
      sample::Sample s;
      s.mono_ns = static_cast<int64_t>(i) * 1'000'000'000;
      s.has_processes = true;
      s.host.cpu_count = 2;
      data_.recording.samples.push_back(std::move(s));
    }
    data_.recording.header.cpu_count = 2;
    report_.wall_s = kSamples;
  }

  FakeRun& Cpus(uint32_t host, std::optional<double> quota = std::nullopt) {
    data_.recording.header.cpu_count = host;
    for (auto& s : data_.recording.samples) {
      s.host.cpu_count = host;
      s.host.cgroup_cpu_quota_cpus = quota;
    }
    return *this;
  }

  FakeRun& Steps(std::vector<analysis::RankSteps> ranks) {
    report_.phases = analysis::PhasesFromSteps(std::move(ranks), kThresholds);
    return *this;
  }

  ProcessRow& Process(int32_t pid, ProcessRole role, double cpu_pct, double running,
                      double blocked = 0, double nvcsw_per_s = 0, uint32_t threads_running = 1) {
    ProcessRow p;
    p.pid = pid;
    p.role = role;
    p.samples = kSamples;
    p.cpu_mean_pct = cpu_pct;
    p.running_fraction = running;
    p.blocked_fraction = blocked;
    p.sleeping_fraction = 1 - running - blocked;
    p.nonvoluntary_switches_per_s = nvcsw_per_s;
    report_.processes.push_back(p);
    for (auto& s : data_.recording.samples) {
      host::ProcessSample ps;
      ps.pid = pid;
      ps.cpu_pct = cpu_pct;
      ps.state = running >= 0.5 ? 'R' : (blocked >= 0.5 ? 'D' : 'S');
      ps.threads_running = threads_running;
      s.processes.push_back(ps);
    }
    return report_.processes.back();
  }

  FakeRun& Main(double cpu_pct, double running, double blocked = 0, double nvcsw_per_s = 0,
                uint32_t threads_running = 1) {
    Process(kMainPid, {ProcessRoleKind::kMain}, cpu_pct, running, blocked, nvcsw_per_s,
            threads_running);
    return *this;
  }

  FakeRun& Workers(int n, double cpu_pct_each, double running, double blocked = 0) {
    for (int i = 0; i < n; ++i)
      Process(100 + i, {ProcessRoleKind::kDataLoaderWorker}, cpu_pct_each, running, blocked);
    return *this;
  }

  rundir::LoaderInfo& Loader(int64_t num_workers) {
    rundir::LoaderInfo l;
    l.pid = kMainPid;
    l.num_workers = num_workers;
    l.batch_size = 32;
    l.pin_memory = false;
    l.persistent_workers = false;
    l.drop_last = false;
    if (num_workers > 0) l.prefetch_factor = 2;
    report_.loaders.push_back(l);
    return report_.loaders.back();
  }

  FakeRun& Torch(int64_t intra_op_threads, std::optional<int64_t> affinity = std::nullopt) {
    phase::MetaItem m;
    m.pid = kMainPid;
    m.kind = "info";
    m.name = "torch";
    m.data_json =
        fmt::format(R"({{"intra_op_threads": {}, "interop_threads": 1, "cpu_count": {}, )"
                    R"("cpu_affinity": {}, "rank": null, "world_size": null, "pid": {}}})",
                    intra_op_threads, data_.recording.header.cpu_count,
                    affinity ? std::to_string(*affinity) : "null", kMainPid);
    data_.events.meta.push_back(m);
    return *this;
  }

  FakeRun& IoWait(double pct) {
    for (auto& s : data_.recording.samples) s.host.cpu = host::CpuShares{0, 0, 0, pct, 0};
    return *this;
  }

  /// The whole host's CPU busy share in every sample (percent of all CPUs; the job included).
  FakeRun& HostBusy(double pct) {
    for (auto& s : data_.recording.samples) s.host.cpu = host::CpuShares{pct, pct, 0, 0, 0};
    return *this;
  }

  FakeRun& Shm(double total_gib, double used_gib) {
    for (auto& s : data_.recording.samples) {
      s.host.shm_total_bytes = static_cast<uint64_t>(total_gib * kGiB);
      s.host.shm_used_bytes = static_cast<uint64_t>(used_gib * kGiB);
    }
    return *this;
  }

  /// GPUs: 80 GiB, 700 W limit, 1980 MHz max (an H100-like card).
  FakeRun& Gpus(const std::vector<GpuSpec>& gpus) {
    for (uint32_t i = 0; i < gpus.size(); ++i) {
      gpu::GpuStatic st;
      st.index = i;
      st.name = "NVIDIA H100 80GB HBM3";
      st.mem_total_bytes = 80ULL << 30;
      st.power_limit_mw = 700'000;
      st.sm_clock_max_mhz = 1980;
      data_.recording.header.gpus.push_back(st);
    }
    for (size_t k = 0; k < data_.recording.samples.size(); ++k) {
      auto& s = data_.recording.samples[k];
      s.gpus.resize(gpus.size());
      for (size_t i = 0; i < gpus.size(); ++i) {
        const GpuSpec& g = gpus[i];
        auto& x = s.gpus[i];
        x.util_gpu_pct = static_cast<uint32_t>(g.util_pct);
        x.sm_clock_mhz = static_cast<uint32_t>(g.sm_clock_mhz);
        x.power_mw = static_cast<uint32_t>(g.power_w * 1000);
        x.mem_used_bytes = static_cast<uint64_t>(g.mem_used_gib * kGiB);
        x.mem_total_bytes = 80ULL << 30;
        bool throttled = static_cast<double>(k) < g.throttled_fraction * kSamples;
        x.clock_event_reasons = throttled ? g.clock_reasons : 0;
        if (g.sm_active_pct && k % 5 == 4) {
          gpu::GpmMetrics& m = x.gpm.emplace();
          m.window_ns = 5'000'000'000;
          m.sm_active_pct = g.sm_active_pct;
          m.tensor_active_pct = g.tensor_pct;
          m.fp32_active_pct = g.fp32_pct;
          m.fp16_active_pct = g.fp16_pct;
        }
      }
    }
    return *this;
  }

  /// GPU time (CUDA events) of phase `name` on every rank: `per_instance_s` each, for the
  /// first `covered` of its instances (the rest still pending at exit).
  FakeRun& GpuTime(const std::string& name, double per_instance_s, double covered = 1.0) {
    for (auto& p : report_.phases.phases) {
      if (p.name != name) continue;
      analysis::GpuPhaseTime g;
      g.count = std::llround(static_cast<double>(p.count) * covered);
      g.total_s = per_instance_s * static_cast<double>(g.count);
      g.mean_s = g.max_s = per_instance_s;
      g.share = p.share > 0 ? g.total_s * p.share / p.total_s : 0;
      p.gpu = g;
    }
    return *this;
  }

  rundir::RunData& data() { return data_; }
  RunReport& report() { return report_; }

  /// The info records as LoadRun decodes them (the tests add them to events.meta).
  Facts Context() {
    report_.machine = analysis::Summarize(data_.recording);
    data_.info = rundir::DecodeInfoRecords(data_.events);
    return BuildRunFacts(data_, report_);
  }

  Verdict Diagnose() { return diagnose::Diagnose(Context()); }

 private:
  rundir::RunData data_;
  RunReport report_;
};

// ---------------------------------------------------------------------------------------------
// Assertions
// ---------------------------------------------------------------------------------------------

inline std::string ClassOf(const Verdict& v) {
  return v.principal ? std::string(FindingClassName(v.principal->cls)) : "(none)";
}

inline const Evidence* FindEvidence(const Finding& f, std::string_view metric) {
  for (const auto& e : f.evidence) {
    if (e.metric == metric) return &e;
  }
  return nullptr;
}

inline bool HasRec(const Finding& f, std::string_view text) {
  return std::any_of(
      f.recommendations.begin(), f.recommendations.end(),
      [&](const Recommendation& r) { return r.text.find(text) != std::string::npos; });
}

inline std::string AllRecs(const Verdict& v) {
  std::string out;
  auto add = [&](const Finding& f) {
    for (const auto& r : f.recommendations) out += r.text + "\n";
  };
  if (v.principal) add(*v.principal);
  for (const auto& f : v.secondary) add(f);
  return out;
}

inline const Finding* FindClass(const Verdict& v, FindingClass c) {
  if (v.principal && v.principal->cls == c) return &*v.principal;
  for (const auto& f : v.secondary) {
    if (f.cls == c) return &f;
  }
  return nullptr;
}

inline void ExpectCheapestFirst(const Finding& f) {
  for (size_t i = 1; i < f.recommendations.size(); ++i) {
    EXPECT_LE(f.recommendations[i - 1].cost, f.recommendations[i].cost)
        << f.recommendations[i].text;
  }
}

/// The data_cpu example: 91% of a 0.1 s step in data_loading on the main process.
inline std::vector<Phases> DataHeavySteps(size_t n = 50) {
  return Steady(n, {{"data_loading", 0.091},
                    {"forward_pass", 0.004},
                    {"backward_pass", 0.004},
                    {"optimizer_step", 0.001}});
}

/// A compute-heavy step with a checkpoint of `extra_s` every `every` steps.
inline std::vector<Phases> CheckpointEvery(size_t n, size_t every, double extra_s) {
  std::vector<Phases> steps = Steady(n, {{"data_loading", 0.002},
                                         {"forward_pass", 0.05},
                                         {"backward_pass", 0.04},
                                         {"optimizer_step", 0.008}});
  for (size_t i = every - 1; i < n; i += every) steps[i]["checkpointing"] = extra_s;
  return steps;
}

}  // namespace stallscope::diagnose::verdict_testing
