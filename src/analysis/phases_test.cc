#include "analysis/phases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/stats.h"
#include "base/units.h"

namespace stallscope::analysis {
namespace {

using phase::RecordKind;

/// A non-zero clock origin, so nothing relies on timestamps starting at 0.
constexpr int64_t kT0 = 5'000'000 * kNsPerMs;
constexpr double kEps = 1e-9;

/// Builds an EventLog in write order; times in ms from kT0.
class LogBuilder {
 public:
  /// Switches to (and registers on first use) process `pid` of `rank`, thread `tid`.
  LogBuilder& Proc(int32_t pid, int32_t rank = 0, uint32_t tid = 0) {
    pid_ = pid;
    rank_ = rank;
    tid_ = tid == 0 ? static_cast<uint32_t>(pid) : tid;
    auto known = std::find_if(log_.processes.begin(), log_.processes.end(),
                              [&](const phase::EventProcess& p) { return p.pid == pid; });
    if (known == log_.processes.end()) log_.processes.push_back({pid, rank, 1, kT0});
    return *this;
  }
  LogBuilder& Thread(uint32_t tid) {
    tid_ = tid;
    return *this;
  }
  LogBuilder& Begin(const std::string& name, double ms) {
    return Add(RecordKind::kBegin, Id(name), ms, 0);
  }
  LogBuilder& End(const std::string& name, double ms) {
    return Add(RecordKind::kEnd, Id(name), ms, 0);
  }
  LogBuilder& Phase(const std::string& name, double begin_ms, double end_ms) {
    return Begin(name, begin_ms).End(name, end_ms);
  }
  LogBuilder& Step(double ms) { return Add(RecordKind::kStep, 0, ms, ++steps_[pid_]); }
  LogBuilder& Counter(const std::string& name, int64_t delta, double ms) {
    return Add(RecordKind::kCounter, Id(name), ms, delta);
  }
  LogBuilder& Raw(RecordKind kind, uint16_t id, double ms) { return Add(kind, id, ms, 0); }
  /// A resolved CUDA-event span of `name`'s instance that began at begin_ms, written late.
  LogBuilder& Gpu(const std::string& name, double begin_ms, double gpu_ms) {
    return Add(RecordKind::kGpuSpan, Id(name), begin_ms,
               static_cast<int64_t>(gpu_ms * static_cast<double>(kNsPerMs)));
  }
  phase::EventLog Build() const { return log_; }

 private:
  uint16_t Id(const std::string& name) {
    for (const auto& [key, value] : log_.names) {
      if (key.first == pid_ && value == name) return key.second;
    }
    auto id = static_cast<uint16_t>(++next_id_[pid_]);
    log_.names[{pid_, id}] = name;
    return id;
  }
  LogBuilder& Add(RecordKind kind, uint16_t id, double ms, int64_t arg) {
    phase::LoggedEvent e;
    e.ts_ns = kT0 + static_cast<int64_t>(ms * static_cast<double>(kNsPerMs));
    e.arg = arg;
    e.pid = pid_;
    e.tid = tid_;
    e.rank = rank_;
    e.phase_id = id;
    e.kind = kind;
    log_.events.push_back(e);
    return *this;
  }

  phase::EventLog log_;
  int32_t pid_ = 100;
  int32_t rank_ = 0;
  uint32_t tid_ = 100;
  std::map<int32_t, int> next_id_;
  std::map<int32_t, int64_t> steps_;
};

const PhaseStats* Find(const PhaseAnalysis& a, const std::string& name, int32_t rank = 0) {
  for (const PhaseStats& s : a.phases) {
    if (s.name == name && s.rank == rank) return &s;
  }
  return nullptr;
}

std::vector<std::string> Names(const PhaseAnalysis& a, int32_t rank = 0) {
  std::vector<std::string> out;
  for (const PhaseStats& s : a.phases) {
    if (s.rank == rank) out.push_back(s.name);
  }
  return out;
}

/// Three 100 ms steps: data_loading 10, forward 20, backward 30, optimizer 40 ms.
LogBuilder SimpleLoop() {
  LogBuilder b;
  b.Proc(100);
  for (int k = 0; k < 3; ++k) {
    double t = 100.0 * k;
    b.Phase("data_loading", t, t + 10)
        .Phase("forward_pass", t + 10, t + 30)
        .Phase("backward_pass", t + 30, t + 60)
        .Phase("optimizer_step", t + 60, t + 100)
        .Step(t + 100);
  }
  return b;
}

TEST(AnalyzePhases, SimpleLoopHasExactShares) {
  PhaseAnalysis a = AnalyzePhases(SimpleLoop().Build(), kThresholds);
  ASSERT_EQ(a.ranks.size(), 1u);
  const RankSteps& r = a.ranks[0];
  EXPECT_EQ(r.pid, 100);
  // The first batch is start-up (phases.h): step 1 begins at 10 ms, once it is in hand, and is
  // warm-up (it waited for no data); the steady state is steps 2 and 3.
  ASSERT_EQ(r.warmup.size(), 1u);
  EXPECT_EQ(r.warmup[0].begin_ns, kT0 + 10 * kNsPerMs);
  EXPECT_EQ(r.count, 2);
  EXPECT_NEAR(r.duration_s, 0.2, kEps);
  EXPECT_NEAR(r.per_second, 10, 1e-6);
  EXPECT_NEAR(r.mean_step_s, 0.1, kEps);
  EXPECT_NEAR(r.variation_ratio, 0, 1e-6);
  EXPECT_FALSE(r.oscillating);
  EXPECT_EQ(r.life.first_event_ns, kT0);
  EXPECT_EQ(r.life.steps_begin_ns, kT0 + 10 * kNsPerMs);
  EXPECT_EQ(r.life.steady_begin_ns, kT0 + 100 * kNsPerMs);
  EXPECT_EQ(r.life.steady_end_ns, kT0 + 300 * kNsPerMs);
  EXPECT_EQ(r.life.startup_phase_s, (std::map<std::string, double>{{"data_loading", 0.01}}));
  EXPECT_TRUE(r.life.tail_phase_s.empty());
  EXPECT_EQ(Names(a), (std::vector<std::string>{"optimizer_step", "backward_pass", "forward_pass",
                                                "data_loading", "other"}));
  struct Want {
    const char* name;
    double share;
    double each_s;
  };
  for (Want w : {Want{"data_loading", 0.1, 0.01}, Want{"forward_pass", 0.2, 0.02},
                 Want{"backward_pass", 0.3, 0.03}, Want{"optimizer_step", 0.4, 0.04},
                 Want{"other", 0.0, 0.0}}) {
    SCOPED_TRACE(w.name);
    const PhaseStats* s = Find(a, w.name);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->count, 2);
    EXPECT_NEAR(s->share, w.share, kEps);
    EXPECT_NEAR(s->total_s, 2 * w.each_s, kEps);
    EXPECT_NEAR(s->mean_s, w.each_s, kEps);
    EXPECT_NEAR(s->std_s, 0, 1e-9);
    EXPECT_NEAR(s->min_s, w.each_s, kEps);
    EXPECT_NEAR(s->max_s, w.each_s, kEps);
    EXPECT_NEAR(s->p99_s, w.each_s, kEps);
  }
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[0].index, 2);
  EXPECT_EQ(r.steps[0].begin_ns, kT0 + 100 * kNsPerMs);
  EXPECT_EQ(r.steps[0].end_ns, kT0 + 200 * kNsPerMs);
  EXPECT_NEAR(r.steps[0].phase_s.at("backward_pass"), 0.03, kEps);
  EXPECT_NEAR(r.steps[0].phase_s.at("other"), 0, kEps);
  EXPECT_EQ(r.steps[0].phase_s.size(), 5u);
  EXPECT_NEAR(a.outside_steps_s, 0.1, kEps) << "the first batch and step 1";
  EXPECT_EQ(a.unmatched_begins, 0);
  EXPECT_EQ(a.unmatched_ends, 0);
  EXPECT_TRUE(a.warnings.empty());
  EXPECT_TRUE(a.other_processes.empty());
}

// CUDA's asynchrony: forward/backward return after queueing (2 ms on the host) while the GPU
// works 30 and 50 ms; the host waits in "other" (a .item()). Spans are written a step late.
TEST(AnalyzePhases, GpuSpansAttachToTheirPhaseNotToTheTimeline) {
  LogBuilder b;
  b.Proc(100);
  for (int k = 0; k < 3; ++k) {
    double t = 100.0 * k;
    b.Phase("forward_pass", t, t + 2).Phase("backward_pass", t + 2, t + 4);
    if (k > 0) b.Gpu("forward_pass", t - 100, 30).Gpu("backward_pass", t - 98, 50);
    b.Step(t + 100);
  }
  b.Gpu("forward_pass", 200, 30);  // the last step's backward never resolved
  b.Gpu("forward_pass", 900, 30);  // began after the last step: not in the steps' window
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  ASSERT_EQ(a.ranks.size(), 1u);
  EXPECT_EQ(a.ranks[0].count, 3);
  EXPECT_NEAR(a.ranks[0].duration_s, 0.3, kEps) << "spans do not stretch the timeline";
  const PhaseStats* fwd = Find(a, "forward_pass");
  ASSERT_NE(fwd, nullptr);
  EXPECT_NEAR(fwd->share, 0.02, kEps) << "host time unchanged";
  ASSERT_TRUE(fwd->gpu.has_value());
  EXPECT_EQ(fwd->gpu->count, 3);
  EXPECT_NEAR(fwd->gpu->total_s, 0.09, kEps);
  EXPECT_NEAR(fwd->gpu->mean_s, 0.03, kEps);
  EXPECT_NEAR(fwd->gpu->max_s, 0.03, kEps);
  EXPECT_NEAR(fwd->gpu->share, 0.3, kEps);
  const PhaseStats* bwd = Find(a, "backward_pass");
  ASSERT_NE(bwd, nullptr);
  ASSERT_TRUE(bwd->gpu.has_value());
  EXPECT_EQ(bwd->gpu->count, 2);
  EXPECT_NEAR(bwd->gpu->share, 1.0 / 3, kEps);
  const PhaseStats* other = Find(a, "other");
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(other->gpu.has_value());
  EXPECT_NEAR(other->share, 0.96, kEps);
  EXPECT_TRUE(a.warnings.empty());
}

TEST(AnalyzePhases, GapIsOther) {
  LogBuilder b;
  b.Proc(100).Phase("forward_pass", 0, 40).Phase("backward_pass", 60, 100).Step(100);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  ASSERT_EQ(a.ranks.size(), 1u);
  EXPECT_NEAR(a.ranks[0].steps[0].phase_s.at("other"), 0.02, kEps);
  const PhaseStats* other = Find(a, "other");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->count, 1);
  EXPECT_NEAR(other->share, 0.2, kEps);
  EXPECT_EQ(Names(a).back(), "other");
}

TEST(AnalyzePhases, NestedPhasesCountInclusiveAndOtherUsesTheUnion) {
  LogBuilder b;
  b.Proc(100)
      .Begin("optimizer_step", 0)
      .Begin("ema_update", 30)
      .End("ema_update", 50)
      .End("optimizer_step", 50)
      .Phase("forward_pass", 50, 80)
      .Step(100);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  const StepRecord& s = a.ranks.at(0).steps.at(0);
  EXPECT_NEAR(s.phase_s.at("optimizer_step"), 0.05, kEps);
  EXPECT_NEAR(s.phase_s.at("ema_update"), 0.02, kEps);
  EXPECT_NEAR(s.phase_s.at("forward_pass"), 0.03, kEps);
  EXPECT_NEAR(s.phase_s.at("other"), 0.02, kEps);  // 100 − |[0, 80]|, not 100 − 50 − 20 − 30
  EXPECT_NEAR(Find(a, "ema_update")->share, 0.2, kEps);
  EXPECT_EQ(a.unmatched_begins, 0);
}

TEST(AnalyzePhases, TwoThreadsOverlapOnce) {
  LogBuilder b;
  b.Proc(100).Begin("forward_pass", 0);
  b.Thread(7).Begin("data_loading", 20);
  b.Thread(100).End("forward_pass", 60);
  b.Thread(7).End("data_loading", 80);
  b.Thread(100).Step(100);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  const StepRecord& s = a.ranks.at(0).steps.at(0);
  EXPECT_NEAR(s.phase_s.at("forward_pass"), 0.06, kEps);
  EXPECT_NEAR(s.phase_s.at("data_loading"), 0.06, kEps);
  EXPECT_NEAR(s.phase_s.at("other"), 0.02, kEps);
}

TEST(AnalyzePhases, PhaseCrossingAStepIsSplitPerStepButCountedOnce) {
  LogBuilder b;
  b.Proc(100).Phase("setup", 0, 10).Begin("forward_pass", 80).Step(100);
  b.End("forward_pass", 120).Step(200);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  const RankSteps& r = a.ranks.at(0);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_NEAR(r.steps[0].phase_s.at("forward_pass"), 0.02, kEps);
  EXPECT_NEAR(r.steps[1].phase_s.at("forward_pass"), 0.02, kEps);
  EXPECT_EQ(r.steps[1].phase_s.count("setup"), 0u);
  const PhaseStats* fwd = Find(a, "forward_pass");
  EXPECT_EQ(fwd->count, 1);
  EXPECT_NEAR(fwd->max_s, 0.04, kEps);
}

TEST(AnalyzePhases, TwoRanksAreSeparate) {
  LogBuilder b;
  b.Proc(200, 1).Phase("forward_pass", 0, 50).Step(50).Phase("forward_pass", 50, 100).Step(100);
  b.Proc(100, 0).Phase("forward_pass", 0, 30).Step(100);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  ASSERT_EQ(a.ranks.size(), 2u);
  EXPECT_EQ(a.ranks[0].rank, 0);
  EXPECT_EQ(a.ranks[0].pid, 100);
  EXPECT_EQ(a.ranks[0].count, 1);
  EXPECT_EQ(a.ranks[1].rank, 1);
  EXPECT_EQ(a.ranks[1].count, 2);
  EXPECT_NEAR(Find(a, "forward_pass", 0)->share, 0.3, kEps);
  EXPECT_NEAR(Find(a, "forward_pass", 1)->share, 1.0, kEps);
  ASSERT_EQ(a.phases.size(), 4u);
  EXPECT_EQ(a.phases[0].rank, 0);
  EXPECT_EQ(a.phases[1].rank, 0);
  EXPECT_EQ(a.phases[1].name, "other");
  EXPECT_EQ(a.phases[3].rank, 1);
}

TEST(AnalyzePhases, WorkerPhasesGoToOtherProcesses) {
  LogBuilder b;
  b.Proc(100).Phase("forward_pass", 0, 50).Step(100).Phase("forward_pass", 100, 150).Step(200);
  // A DataLoader worker of the same rank: same phase ids, different names.
  b.Proc(101).Phase("decode", 10, 40).Phase("decode", 60, 70).Counter("host_sync.item", 1, 70);
  b.Proc(102).Counter("host_sync.item", 2, 5);  // no phases: not listed
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  ASSERT_EQ(a.ranks.size(), 1u);
  EXPECT_EQ(a.ranks[0].pid, 100);
  EXPECT_EQ(Find(a, "decode"), nullptr);
  ASSERT_EQ(a.other_processes.size(), 1u);
  const ProcessPhases& w = a.other_processes[0];
  EXPECT_EQ(w.pid, 101);
  ASSERT_EQ(w.phases.size(), 1u);
  EXPECT_EQ(w.phases[0].name, "decode");
  EXPECT_EQ(w.phases[0].count, 2);
  EXPECT_NEAR(w.phases[0].total_s, 0.04, kEps);
  EXPECT_NEAR(w.phases[0].share, 0.04 / 0.06, 1e-9);  // span 10..70 ms
  EXPECT_EQ(a.counters_total.at("host_sync.item"), 3);
}

TEST(AnalyzePhases, CrashClipsOpenPhaseAndCountsOutsideTime) {
  LogBuilder b;
  b.Proc(100).Phase("forward_pass", 0, 100).Step(100).Phase("forward_pass", 100, 200).Step(200);
  b.Phase("data_loading", 200, 230).Begin("forward_pass", 230).Counter("host_sync.item", 1, 280);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  EXPECT_EQ(a.unmatched_begins, 1);
  EXPECT_EQ(a.ranks.at(0).count, 2);
  // After the last step: data_loading 30 ms + the open forward_pass clipped at 280 ms.
  EXPECT_NEAR(a.outside_steps_s, 0.08, kEps);
  EXPECT_EQ(Find(a, "forward_pass")->count, 2);
  EXPECT_EQ(Find(a, "data_loading"), nullptr);
  EXPECT_EQ(a.counters_total.at("host_sync.item"), 1);
  EXPECT_TRUE(a.ranks[0].steps[1].counters.empty());
}

TEST(AnalyzePhases, SetupBeforeFirstStepIsInsideStepOne) {
  // Step 1 begins at the first event (no first batch opens it), so setup phases belong to step 1.
  LogBuilder b;
  b.Proc(100).Phase("setup", 0, 500).Phase("forward_pass", 500, 600).Step(600);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  EXPECT_NEAR(a.ranks.at(0).duration_s, 0.6, kEps);
  EXPECT_NEAR(a.outside_steps_s, 0, kEps);
}

/// A loop as the hooks record it: the iterator's creation (which starts the workers) and the
/// first batch, then `steps` steps of 100 ms (data 10, forward 20, backward 30, optimizer 40);
/// the first `slow` steps' forward takes `slow_ms` more (compile, cuDNN autotuning).
LogBuilder HookedLoop(int steps, int slow, double slow_ms) {
  LogBuilder b;
  b.Proc(100).Phase("data_loading", 0, 3000).Phase("data_loading", 3000, 3500);  // 3 s spawn
  double t = 3500;
  for (int k = 0; k < steps; ++k) {
    const double extra = k < slow ? slow_ms : 0;
    if (k > 0) b.Phase("data_loading", t, t + 10), t += 10;
    b.Phase("forward_pass", t, t + 20 + extra)
        .Gpu("forward_pass", t, 15 + extra)
        .Phase("backward_pass", t + 20 + extra, t + 50 + extra)
        .Phase("optimizer_step", t + 50 + extra, t + 90 + extra)
        .Counter("host_sync.item", 1, t + 5)
        .Step(t + 90 + extra);
    t += 90 + extra;
  }
  return b;
}

TEST(AnalyzePhases, TheFirstBatchIsStartupAndStepOneBeginsAfterIt) {
  PhaseAnalysis a = AnalyzePhases(HookedLoop(20, 0, 0).Build(), kThresholds);
  const RankSteps& r = a.ranks.at(0);
  EXPECT_EQ(r.life.first_event_ns, kT0);
  EXPECT_EQ(r.life.steps_begin_ns, kT0 + 3500 * kNsPerMs);
  EXPECT_EQ(r.life.startup_phase_s, (std::map<std::string, double>{{"data_loading", 3.5}}));
  // Step 1 waited for no data: warm-up, and the 19 others are the steady state.
  ASSERT_EQ(r.warmup.size(), 1u);
  EXPECT_EQ(r.warmup[0].begin_ns, kT0 + 3500 * kNsPerMs);
  ASSERT_EQ(r.count, 19);
  EXPECT_EQ(r.steps.front().index, 2);
  EXPECT_NEAR(r.mean_step_s, 0.1, kEps);
  EXPECT_EQ(Find(a, "data_loading")->count, 19);
  EXPECT_NEAR(Find(a, "data_loading")->max_s, 0.01, kEps);
  EXPECT_NEAR(a.outside_steps_s, 3.5 + 0.09, kEps);
}

TEST(AnalyzePhases, InstancesArePerStepByWhereTheyBegan) {
  LogBuilder b;
  b.Proc(100).Phase("setup", 0, 10).Phase("eval_forward", 10, 11).Phase("eval_forward", 11, 12);
  b.Begin("forward_pass", 90).Step(100).End("forward_pass", 120).Step(200);
  const PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  const RankSteps& r = a.ranks.at(0);
  ASSERT_EQ(r.steps.size(), 2u);
  // Sparse: only where more than one began; InstancesIn supplies the ones.
  EXPECT_EQ(r.steps[0].phase_n, (std::map<std::string, int64_t>{{"eval_forward", 2}}));
  EXPECT_EQ(InstancesIn(r.steps[0], "eval_forward"), 2);
  EXPECT_EQ(InstancesIn(r.steps[0], "setup"), 1);
  EXPECT_EQ(InstancesIn(r.steps[0], "forward_pass"), 1);
  EXPECT_EQ(InstancesIn(r.steps[0], "other"), 0);
  EXPECT_EQ(InstancesIn(r.steps[0], "checkpointing"), 0);
  EXPECT_TRUE(r.steps[1].phase_n.empty());
}

TEST(AnalyzePhases, PhasesNestedInTheFirstBatchAreStartupToo) {
  LogBuilder b;
  b.Proc(100)
      .Begin("data_loading", 0)
      .Phase("decode", 100, 400)  // a user phase inside the Dataset, in the main process
      .End("data_loading", 500)
      .Phase("forward_pass", 500, 600)
      .Step(600)
      .Phase("data_loading", 600, 610)
      .Phase("forward_pass", 610, 700)
      .Step(700);
  const PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  const RankSteps& r = a.ranks.at(0);
  EXPECT_EQ(r.life.steps_begin_ns, kT0 + 500 * kNsPerMs);
  EXPECT_NEAR(r.life.startup_phase_s.at("decode"), 0.3, kEps);
}

TEST(AnalyzePhases, SlowLeadingStepsAreWarmupAndLeftOutOfEveryStatistic) {
  // Two 5 s first forwards (compile), then 30 steps of 100 ms.
  PhaseAnalysis a = AnalyzePhases(HookedLoop(32, 2, 5000).Build(), kThresholds);
  const RankSteps& r = a.ranks.at(0);
  ASSERT_EQ(r.warmup.size(), 2u);
  EXPECT_EQ(r.warmup[0].index, 1);
  EXPECT_NEAR(r.warmup[0].phase_s.at("forward_pass"), 5.02, kEps);
  EXPECT_EQ(r.warmup[0].counters.at("host_sync.item"), 1);
  ASSERT_EQ(r.count, 30);
  EXPECT_EQ(r.steps.front().index, 3);
  EXPECT_EQ(r.life.steady_begin_ns, r.steps.front().begin_ns);
  EXPECT_EQ(r.life.steady_end_ns, r.steps.back().end_ns);
  EXPECT_NEAR(r.mean_step_s, 0.1, kEps);
  EXPECT_NEAR(r.variation_ratio, 0, 1e-9);
  const PhaseStats* fwd = Find(a, "forward_pass");
  EXPECT_EQ(fwd->count, 30);
  EXPECT_NEAR(fwd->max_s, 0.02, kEps);
  EXPECT_NEAR(fwd->share, 0.2, kEps);
  ASSERT_TRUE(fwd->gpu.has_value());
  EXPECT_EQ(fwd->gpu->count, 30) << "the warm-up's GPU spans are not steady GPU time";
  EXPECT_NEAR(fwd->gpu->max_s, 0.015, kEps);
  EXPECT_NEAR(a.outside_steps_s, 3.5 + 5.09 + 5.10, 1e-6);
  EXPECT_EQ(a.counters_total.at("host_sync.item"), 32) << "totals are the whole run's";
}

TEST(AnalyzePhases, WorkAfterTheLastStepIsTheTail) {
  LogBuilder b = HookedLoop(10, 0, 0);
  b.Phase("checkpointing", 4500, 5100);  // the final save, after the last step (4.49 s)
  const PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  const RankSteps& r = a.ranks.at(0);
  EXPECT_EQ(r.life.tail_phase_s, (std::map<std::string, double>{{"checkpointing", 0.6}}));
  EXPECT_EQ(r.life.last_event_ns, kT0 + 5100 * kNsPerMs);
}

struct PairingCase {
  const char* name;
  void (*build)(LogBuilder&);
  int64_t unmatched_begins;
  int64_t unmatched_ends;
  std::vector<std::pair<std::string, double>> want_s;  // phase → seconds in step 1
};

TEST(AnalyzePhases, PairingTable) {
  const std::vector<PairingCase> cases = {
      {"stray end",
       [](LogBuilder& b) { b.End("forward_pass", 10).Step(100); },
       0,
       1,
       {{"other", 0.09}}},  // step 1 starts at the first event (10 ms)
      {"end of another thread",
       [](LogBuilder& b) {
         b.Begin("forward_pass", 0).Thread(9).End("forward_pass", 10).Thread(100).Step(100);
       },
       1,
       1,
       {{"forward_pass", 0.1}, {"other", 0.0}}},
      {"inner phase lost its end",
       [](LogBuilder& b) { b.Begin("outer", 0).Begin("inner", 10).End("outer", 40).Step(100); },
       1,
       0,
       {{"outer", 0.04}, {"inner", 0.03}, {"other", 0.06}}},
      {"same id nested",
       [](LogBuilder& b) { b.Begin("f", 0).Begin("f", 10).End("f", 20).End("f", 50).Step(100); },
       0,
       0,
       {{"f", 0.06}, {"other", 0.05}}},
      {"zero-length phase",
       [](LogBuilder& b) { b.Phase("f", 10, 10).Step(100); },
       0,
       0,
       {{"other", 0.09}}},
  };
  for (const PairingCase& c : cases) {
    SCOPED_TRACE(c.name);
    LogBuilder b;
    b.Proc(100);
    c.build(b);
    PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
    EXPECT_EQ(a.unmatched_begins, c.unmatched_begins);
    EXPECT_EQ(a.unmatched_ends, c.unmatched_ends);
    const StepRecord& s = a.ranks.at(0).steps.at(0);
    EXPECT_EQ(s.phase_s.size(), c.want_s.size());
    for (const auto& [name, sec] : c.want_s) {
      ASSERT_EQ(s.phase_s.count(name), 1u) << name;
      EXPECT_NEAR(s.phase_s.at(name), sec, kEps) << name;
    }
  }
}

TEST(AnalyzePhases, ZeroLengthPhaseIsCountedInStats) {
  LogBuilder b;
  b.Proc(100).Phase("f", 10, 10).Step(100);
  const PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  const PhaseStats* f = Find(a, "f");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->count, 1);
  EXPECT_EQ(f->total_s, 0);
}

TEST(AnalyzePhases, NoStepRecordsMakeOneStepOfTheBusiestProcess) {
  LogBuilder b;
  b.Proc(100).Phase("forward_pass", 10, 50).Phase("backward_pass", 50, 110);
  b.Proc(101).Phase("decode", 0, 5);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  ASSERT_EQ(a.ranks.size(), 1u);
  EXPECT_EQ(a.ranks[0].pid, 100);
  EXPECT_EQ(a.ranks[0].count, 1);
  EXPECT_NEAR(a.ranks[0].duration_s, 0.1, kEps);
  EXPECT_NEAR(Find(a, "backward_pass")->share, 0.6, kEps);
  ASSERT_EQ(a.warnings.size(), 1u);
  EXPECT_EQ(a.warnings[0],
            "no step boundaries: stallscope.step() was never called and no optimizer.step() "
            "was seen");
  ASSERT_EQ(a.other_processes.size(), 1u);
  EXPECT_EQ(a.other_processes[0].pid, 101);
}

TEST(AnalyzePhases, MainProcessIsTheOneWithMostSteps) {
  LogBuilder b;
  b.Proc(100).Phase("a", 0, 10).Phase("a", 10, 20).Phase("a", 20, 30).Step(30);
  b.Proc(101).Step(10).Step(20).Phase("b", 20, 25);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  EXPECT_EQ(a.ranks.at(0).pid, 101);
  ASSERT_EQ(a.other_processes.size(), 1u);
  EXPECT_EQ(a.other_processes[0].pid, 100);
}

// Issue 27 B08: a daemon the job forked (without exec) ran more phases than the job itself, and
// with no step marks anywhere it became the rank's main process. A forked process is the main
// one only when it marks more steps; otherwise it stays a side process, its phases apart.
TEST(AnalyzePhases, AForkedProcessNeverReplacesTheProcessThatForkedIt) {
  LogBuilder b;
  b.Proc(100).Phase("parent_work", 0, 30);
  b.Proc(205).Phase("daemon_work", 0, 10).Phase("daemon_work", 10, 20).Phase("daemon_work", 20, 40);
  phase::EventLog log = b.Build();
  PhaseAnalysis before = AnalyzePhases(log, kThresholds);
  EXPECT_EQ(before.ranks.at(0).pid, 205) << "not known as forked: the busiest one";
  for (auto& p : log.processes) {
    if (p.pid == 205) p.forked_from = 101;  // forked by 101, which forked from 100 (a daemon)
  }
  PhaseAnalysis a = AnalyzePhases(log, kThresholds);
  EXPECT_EQ(a.ranks.at(0).pid, 100);
  ASSERT_NE(Find(a, "parent_work"), nullptr);
  EXPECT_EQ(Find(a, "daemon_work"), nullptr) << "not mixed into the rank's steps";
  ASSERT_EQ(a.other_processes.size(), 1u);
  EXPECT_EQ(a.other_processes[0].pid, 205);
  ASSERT_EQ(a.other_processes[0].phases.size(), 1u);
  EXPECT_EQ(a.other_processes[0].phases[0].name, "daemon_work");
  EXPECT_EQ(a.other_processes[0].phases[0].count, 3);

  // A forked child that marks the steps (a trainer process) is the main one all the same.
  LogBuilder c;
  c.Proc(100).Phase("launcher", 0, 5);
  c.Proc(205).Phase("compute", 0, 10).Step(10).Phase("compute", 10, 20).Step(20);
  phase::EventLog trainer = c.Build();
  for (auto& p : trainer.processes) {
    if (p.pid == 205) p.forked_from = 100;
  }
  EXPECT_EQ(AnalyzePhases(trainer, kThresholds).ranks.at(0).pid, 205);
}

struct OscillationCase {
  const char* name;
  std::vector<double> step_ms;
  double ratio;
  bool oscillating;
};

TEST(AnalyzePhases, OscillationTable) {
  const std::vector<OscillationCase> cases = {
      // Seed 003: std/mean > 0.5. 0.1/1.0 s alternating: mean 0.55, std 0.45 → 0.818.
      {"alternating 0.1 s / 1.0 s",
       {100, 1000, 100, 1000, 100, 1000, 100, 1000},
       0.45 / 0.55,
       true},
      {"steady", {100, 100, 100, 100}, 0, false},
      {"mild jitter", {90, 110, 90, 110}, 0.1, false},
      {"exactly 0.5 is not above", {250, 750}, 0.5, false},  // exact in binary
  };
  for (const OscillationCase& c : cases) {
    SCOPED_TRACE(c.name);
    LogBuilder b;
    b.Proc(100).Raw(RecordKind::kMark, 0, 0);
    double t = 0;
    for (double ms : c.step_ms) b.Step(t += ms);
    PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
    const RankSteps& r = a.ranks.at(0);
    EXPECT_EQ(r.count, static_cast<int64_t>(c.step_ms.size()));
    EXPECT_NEAR(r.variation_ratio, c.ratio, 1e-9);
    EXPECT_EQ(r.oscillating, c.oscillating);
  }
}

TEST(AnalyzePhases, CountersPerStep) {
  LogBuilder b;
  b.Proc(100)
      .Counter("host_sync.item", 1, 0)  // at the first event: step 1
      .Counter("host_sync.item", 1, 50)
      .Step(100)
      .Counter("host_sync.item", 3, 150)
      .Counter("host_sync.nonzero", 1, 200)  // at the boundary: step 2 ends here
      .Step(200);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  const RankSteps& r = a.ranks.at(0);
  EXPECT_EQ(r.steps[0].counters, (std::map<std::string, int64_t>{{"host_sync.item", 2}}));
  EXPECT_EQ(r.steps[1].counters,
            (std::map<std::string, int64_t>{{"host_sync.item", 3}, {"host_sync.nonzero", 1}}));
  EXPECT_EQ(a.counters_total,
            (std::map<std::string, int64_t>{{"host_sync.item", 5}, {"host_sync.nonzero", 1}}));
}

TEST(AnalyzePhases, UnsortedTimestampsWithinAProcessAreOrdered) {
  // Thread 7's records reach the log after later records of thread 100.
  LogBuilder b;
  b.Proc(100).Phase("forward_pass", 0, 40).Step(100).Phase("forward_pass", 100, 140).Step(200);
  b.Thread(7).Phase("data_loading", 50, 90).Phase("data_loading", 150, 190);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  const RankSteps& r = a.ranks.at(0);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_NEAR(r.steps[0].phase_s.at("data_loading"), 0.04, kEps);
  EXPECT_NEAR(r.steps[1].phase_s.at("data_loading"), 0.04, kEps);
  EXPECT_NEAR(r.steps[1].phase_s.at("other"), 0.02, kEps);
  EXPECT_NEAR(a.outside_steps_s, 0, kEps);
}

TEST(AnalyzePhases, OneThreadOutOfOrderFallsBackToAFullSort) {
  // Even one thread's records out of ts order (a clock step, a bad writer) are ordered.
  LogBuilder b;
  b.Proc(100).Step(100).Phase("forward_pass", 0, 40).Thread(7).Phase("data_loading", 50, 90);
  b.Thread(100).Step(200).Phase("forward_pass", 100, 140);
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  const RankSteps& r = a.ranks.at(0);
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[0].begin_ns, kT0);
  EXPECT_NEAR(r.steps[0].phase_s.at("other"), 0.02, kEps);
  EXPECT_NEAR(r.steps[1].phase_s.at("forward_pass"), 0.04, kEps);
  EXPECT_EQ(a.unmatched_begins + a.unmatched_ends, 0);
}

TEST(AnalyzePhases, PercentilesOverOneHundredSteps) {
  // forward_pass of step k lasts k ms (k = 1..100), in a scrambled order.
  LogBuilder b;
  b.Proc(100);
  double t = 0;
  for (int i = 0; i < 100; ++i) {
    const int k = (i * 37) % 100 + 1;  // 37 is coprime with 100: a permutation of 1..100
    b.Phase("forward_pass", t, t + k).Step(t + 100);
    t += 100;
  }
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  const PhaseStats* f = Find(a, "forward_pass");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->count, 100);
  EXPECT_NEAR(f->min_s, 0.001, kEps);
  EXPECT_NEAR(f->max_s, 0.100, kEps);
  EXPECT_NEAR(f->mean_s, 0.0505, kEps);
  EXPECT_NEAR(f->std_s, std::sqrt((100.0 * 100.0 - 1) / 12) * 1e-3, 1e-9);
  // Linear interpolation (numpy default): position q × 99.
  EXPECT_NEAR(f->p50_s, 0.0505, kEps);
  EXPECT_NEAR(f->p95_s, 0.09505, kEps);
  EXPECT_NEAR(f->p99_s, 0.09901, kEps);
  // Same values as base/stats.h Quantile (the analysis uses a copy-free equivalent).
  std::vector<double> series;
  for (int k = 1; k <= 100; ++k) series.push_back(k * 1e-3);
  EXPECT_DOUBLE_EQ(f->p50_s, *Quantile(series, 0.50));
  EXPECT_DOUBLE_EQ(f->p95_s, *Quantile(series, 0.95));
  EXPECT_DOUBLE_EQ(f->p99_s, *Quantile(series, 0.99));
  const PhaseStats* other = Find(a, "other");
  EXPECT_EQ(other->count, 100);
  EXPECT_NEAR(other->p95_s, 0.1 - 0.00595, kEps);
  EXPECT_NEAR(other->share + f->share, 1.0, kEps);
}

TEST(AnalyzePhases, EmptyLogGivesEmptyAnalysis) {
  phase::EventLog log;
  log.lost_records = 3;
  PhaseAnalysis a = AnalyzePhases(log, kThresholds);
  EXPECT_TRUE(a.ranks.empty());
  EXPECT_TRUE(a.phases.empty());
  EXPECT_TRUE(a.other_processes.empty());
  EXPECT_TRUE(a.counters_total.empty());
  EXPECT_TRUE(a.warnings.empty());
  EXPECT_EQ(a.lost_records, 3u);
}

TEST(AnalyzePhases, HostileInputIsCountedNotFatal) {
  LogBuilder b;
  b.Proc(100);
  for (int i = 0; i < 1000; ++i) b.Begin("deep", i * 0.01);  // never ended
  b.Raw(RecordKind::kInvalid, 0, 20).Raw(static_cast<RecordKind>(42), 0, 21);
  b.Raw(RecordKind::kBegin, 77, 22).Raw(RecordKind::kEnd, 77, 23).Step(30);  // id with no name
  PhaseAnalysis a = AnalyzePhases(b.Build(), kThresholds);
  EXPECT_EQ(a.unmatched_begins, 1000);  // 936 dropped beyond depth 64, 64 clipped at the end
  ASSERT_EQ(a.warnings.size(), 1u);
  EXPECT_NE(a.warnings[0].find("2 phase records"), std::string::npos);
  EXPECT_NEAR(a.ranks.at(0).steps.at(0).phase_s.at("unnamed_77"), 0.001, kEps);
}

TEST(AnalyzePhasesScale, MillionEvents) {
  // Two threads, 4 phases per step, loader thread written in blocks (not in ts order).
  constexpr int kSteps = 120'000;  // 9 events per step: 1.08 M events
  phase::EventLog log;
  log.processes.push_back({100, 0, 1, kT0});
  const char* names[] = {"", "forward_pass", "backward_pass", "optimizer_step", "data_loading"};
  for (uint16_t id = 1; id <= 4; ++id) log.names[{100, id}] = names[id];
  log.events.reserve(kSteps * 10);
  auto add = [&](int64_t ts, uint32_t tid, uint16_t id, RecordKind kind) {
    phase::LoggedEvent e;
    e.ts_ns = ts;
    e.pid = 100;
    e.tid = tid;
    e.phase_id = id;
    e.kind = kind;
    log.events.push_back(e);
  };
  constexpr int64_t kStepNs = 10'000;
  for (int k = 0; k < kSteps; ++k) {
    const int64_t t = kT0 + k * kStepNs;
    for (uint16_t id = 1; id <= 3; ++id) {
      add(t + (id - 1) * 3000, 1, id, RecordKind::kBegin);
      add(t + id * 3000, 1, id, RecordKind::kEnd);
    }
    add(t + kStepNs, 1, 0, RecordKind::kStep);
    if (k % 100 == 99) {
      for (int j = k - 99; j <= k; ++j) {
        const int64_t tj = kT0 + j * kStepNs;
        add(tj + 1000, 2, 4, RecordKind::kBegin);
        add(tj + 2000, 2, 4, RecordKind::kEnd);
      }
    }
  }
  ASSERT_EQ(log.events.size(), static_cast<size_t>(kSteps) * 9);
  const auto start = std::chrono::steady_clock::now();
  PhaseAnalysis a = AnalyzePhases(log, kThresholds);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("AnalyzePhases: %zu events in %.1f ms\n", log.events.size(), ms);
  ASSERT_EQ(a.ranks.size(), 1u);
  EXPECT_EQ(a.ranks[0].count, kSteps);
  EXPECT_NEAR(Find(a, "forward_pass")->share, 0.3, 1e-9);
  EXPECT_NEAR(Find(a, "data_loading")->share, 0.1, 1e-9);
  EXPECT_NEAR(Find(a, "other")->share, 0.1, 1e-9);
  EXPECT_EQ(Find(a, "data_loading")->count, kSteps);
  EXPECT_EQ(a.unmatched_begins + a.unmatched_ends, 0);
}

}  // namespace
}  // namespace stallscope::analysis
