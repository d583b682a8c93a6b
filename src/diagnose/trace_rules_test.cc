// The trace rules on hand-built TraceFacts, and issue 26's fallback: a window whose GPU idles
// ≥ 15% with an attributed cause gets a principal named by that cause, priced at its share.
#include "diagnose/trace_rules.h"

#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/units.h"
#include "diagnose/facts.h"
#include "diagnose/trace_report.h"
#include "diagnose/verdict.h"
#include "gpu_check_fixture.h"

namespace stallscope::diagnose {
namespace {

using trace::IdleCause;
using trace::IdlePosition;

/// Idle shares of the window by cause (the rest of the window busy), on one GPU.
struct Idle {
  double sync = 0, dataloader = 0, dependency = 0, setup = 0, memory = 0, launch = 0, cpu = 0,
         unattributed = 0;
};

TraceFacts FactsWith(const Idle& idle, IdlePosition where = IdlePosition::kMidStep,
                     std::optional<double> queue_mean = 15.0) {
  TraceFacts t;
  auto set = [&t](IdleCause c, double v) { t.idle_share[static_cast<size_t>(c)] = v; };
  set(IdleCause::kSync, idle.sync);
  set(IdleCause::kDataLoader, idle.dataloader);
  set(IdleCause::kDependency, idle.dependency);
  set(IdleCause::kSetup, idle.setup);
  set(IdleCause::kMemory, idle.memory);
  set(IdleCause::kLaunchOverhead, idle.launch);
  set(IdleCause::kCpuOther, idle.cpu);
  set(IdleCause::kUnattributed, idle.unattributed);
  double total = 0;
  for (double v : t.idle_share) total += v;
  t.idle_position_share[static_cast<size_t>(where)] = total;
  t.gpus.push_back({0, 0, "NVIDIA H100 80GB HBM3", 1.0 - total});
  t.ranks = 1;
  t.gpu_devices = 1;
  t.queue_mean = queue_mean;
  t.kernel_mean_us = 50.0;
  t.kernels = 1000;
  t.steps = 10;
  return t;
}

Verdict VerdictOf(const TraceFacts& t) { return Diagnose(BuildTraceFacts(t, {}, {})); }

std::string ClassOf(const Verdict& v) {
  return v.principal ? std::string(FindingClassName(v.principal->cls)) : "none";
}

std::vector<Finding> AllOf(const Verdict& v) {
  std::vector<Finding> all = v.secondary;
  if (v.principal) all.insert(all.begin(), *v.principal);
  return all;
}

struct Case {
  const char* what;
  Idle idle;
  IdlePosition where;
  const char* principal;  ///< "none": no finding at all
  double cost;            ///< the fallback principal's cost_fraction; 0: no fallback finding
};

// Deep queue (15 kernels), so host_launch_bound's own test fails, and every cause below its own
// rule's bar (sync < 10%, dependency < 10%, setup < 50% of the window, memory in 2 of 10 steps):
// only the fallback can name these windows.
/// Issue 26's fallback cases: idle shares and where the idle sits, with the principal expected.
const Case kFallbackCases[] = {
    // Busy 90%: the GPU is the limit.
    {"idle 10%: below the bar",
     {.launch = 0.02, .cpu = 0.06, .unattributed = 0.02},
     IdlePosition::kMidStep,
     "gpu_bound",
     0},
    {"idle 14.9%: below the bar",
     {.launch = 0.03, .cpu = 0.10, .unattributed = 0.019},
     IdlePosition::kMidStep,
     "none",
     0},
    {"the H100 shape: Python mid-step with a deep queue",
     {.dataloader = 0.005,
      .dependency = 0.023,
      .setup = 0.001,
      .launch = 0.021,
      .cpu = 0.102,
      .unattributed = 0.038},
     IdlePosition::kMidStep,
     "host_launch_bound",
     0.123},
    {"syncs",
     {.sync = 0.08, .cpu = 0.03, .unattributed = 0.05},
     IdlePosition::kMidStep,
     "host_sync_or_logging",
     0.08},
    {"the DataLoader",
     {.dataloader = 0.10, .cpu = 0.02, .unattributed = 0.04},
     IdlePosition::kDataLoader,
     "data_bound_cpu",
     0.10},
    {"dependencies",
     {.dependency = 0.08, .cpu = 0.04, .unattributed = 0.04},
     IdlePosition::kMidStep,
     "communication_bound",
     0.08},
    {"memory calls",
     {.memory = 0.09, .cpu = 0.01, .unattributed = 0.07},
     IdlePosition::kMidStep,
     "allocator_churn",
     0.09},
    {"set-up calls",
     {.setup = 0.09, .cpu = 0.02, .unattributed = 0.07},
     IdlePosition::kMidStep,
     "startup_window",
     0.09},
    {"launches and CPU ops together outweigh the DataLoader",
     {.dataloader = 0.07, .launch = 0.04, .cpu = 0.04, .unattributed = 0.01},
     IdlePosition::kMidStep,
     "host_launch_bound",
     0.08},
    // Unattributed idle: the host did nothing the trace shows (idle, or its CPU activity not
    // profiled). No cause to name, and a class would be a guess: no finding.
    {"nothing attributed", {.unattributed = 0.20}, IdlePosition::kMidStep, "none", 0},
};

TEST(TraceIdleFallback, TheLargestAttributedCauseOfAnIdleWindowNamesThePrincipal) {
  const auto& cases = kFallbackCases;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TraceFacts t = FactsWith(c.idle, c.where);
    t.steps_with_memory_calls = 2;
    t.runtime_share[static_cast<size_t>(trace::RuntimeCallKind::kSetup)] = c.idle.setup;
    Verdict v = VerdictOf(t);
    ASSERT_EQ(ClassOf(v), c.principal);
    // Below the bar or with nothing attributed, no finding comes from the fallback.
    bool fallback = false;
    for (const Finding& g : AllOf(v)) {
      for (const Evidence& e : g.evidence) fallback |= e.metric == "trace.idle_share";
    }
    EXPECT_EQ(fallback, c.cost > 0);
    if (c.cost == 0) continue;
    const Finding& f = *v.principal;
    EXPECT_NEAR(f.cost_fraction, c.cost, 1e-9);
    // Named once: the fallback is its class's only finding.
    int same = 0;
    for (const Finding& g : AllOf(v)) same += g.cls == f.cls ? 1 : 0;
    EXPECT_EQ(same, 1);
    // The reason says how idle the window is and what share the cause explains.
    double idle = 0;
    for (double s : t.idle_share) idle += s;
    EXPECT_NE(f.reason.find("the GPU is idle " + FormatPercentShort(idle) + " of the window"),
              std::string::npos)
        << f.reason;
    EXPECT_NE(f.reason.find(FormatPercentShort(c.cost) + " of the window"), std::string::npos)
        << f.reason;
    ASSERT_FALSE(f.evidence.empty());
    EXPECT_EQ(f.evidence[0].metric, "trace.idle_share");
    EXPECT_EQ(f.evidence[0].threshold, kThresholds.trace_idle_share.value);
    ASSERT_FALSE(f.recommendations.empty());
    for (size_t i = 1; i < f.recommendations.size(); ++i) {
      EXPECT_LE(f.recommendations[i - 1].cost, f.recommendations[i].cost);
    }
    // The deep queue never appears as launch-bound's support (issue 16).
    for (const Evidence& e : f.evidence) EXPECT_NE(e.metric, "trace.queue_mean") << e.text;
  }
}

TEST(TraceIdleFallback, TheH100ShapeSaysWhatTheHostDidAndWhere) {
  Verdict v = VerdictOf(FactsWith({.dataloader = 0.005,
                                   .dependency = 0.023,
                                   .launch = 0.021,
                                   .cpu = 0.102,
                                   .unattributed = 0.038}));
  ASSERT_EQ(ClassOf(v), "host_launch_bound");
  const Finding& f = *v.principal;
  for (const char* part :
       {"the GPU is idle 19% of the window", "65% of that (12% of the window)", "Python",
        "cpu_other 54%", "launch_overhead 11%", "mid-step", "15 kernels queued on average"}) {
    EXPECT_NE(f.reason.find(part), std::string::npos) << part << " in " << f.reason;
  }
  EXPECT_DOUBLE_EQ(f.confidence, kThresholds.confidence_fair.value);
  EXPECT_NE(f.recommendations.front().text.find("--export-perfetto"), std::string::npos);
}

// A cause behind less than half the idle is the likeliest of several, not the cause.
TEST(TraceIdleFallback, ACauseOfLessThanHalfTheIdleIsWeak) {
  Verdict v = VerdictOf(FactsWith({.sync = 0.06, .cpu = 0.04, .unattributed = 0.06}));
  ASSERT_EQ(ClassOf(v), "host_sync_or_logging");
  EXPECT_DOUBLE_EQ(v.principal->confidence, kThresholds.confidence_weak.value);
}

// Where a rule of its own explains the window, the fallback adds nothing.
TEST(TraceIdleFallback, OwnRulesKeepTheirWindows) {
  struct Own {
    const char* what;
    TraceFacts facts;
    const char* principal;
  };
  const Own cases[] = {
      {"shallow queue", FactsWith({.launch = 0.05, .cpu = 0.15}, IdlePosition::kMidStep, 1.0),
       "host_launch_bound"},
      {"deep queue, idle at the step start", FactsWith({.cpu = 0.20}, IdlePosition::kStepStart),
       "host_step_boundary"},
      {"syncs above their own bar", FactsWith({.sync = 0.12, .cpu = 0.05}), "host_sync_or_logging"},
  };
  for (const Own& c : cases) {
    SCOPED_TRACE(c.what);
    Verdict v = VerdictOf(c.facts);
    ASSERT_EQ(ClassOf(v), c.principal);
    for (const Finding& f : AllOf(v)) {
      for (const Evidence& e : f.evidence) EXPECT_NE(e.metric, "trace.idle_share") << e.text;
    }
  }
}

// A live run carries no timeline: nothing from the trace rules.
TEST(TraceIdleFallback, NoTimelineNoFinding) {
  Facts c;
  EXPECT_FALSE(HostLaunchRule(c));
  EXPECT_FALSE(CommunicationRule(c));
  EXPECT_FALSE(StartupRule(c));
  EXPECT_FALSE(AllocatorChurnRule(c));
  EXPECT_FALSE(StepBoundaryRule(c));
}

// Issue 26: `stallscope trace` of the H100's profiled window (GPU 80% busy, 19% idle while the
// host ran Python mid-step, 15 kernels queued on average) gave verdict null.
TEST(TraceIdleFallback, H100ProfiledWindowNamesThePrincipalAndItsShare) {
  auto dir = testing::H100GpuCheckDir();
  if (!dir) GTEST_SKIP() << "shared/gpu/h100-2026-11-26/gpu-check.tgz not found";
  auto r = AnalyzeTraceFiles({(*dir / "profile" / "trace.json").string()}, {}, {}, 1);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->verdict.principal);
  const Finding& f = *r->verdict.principal;
  EXPECT_EQ(FindingClassName(f.cls), "host_launch_bound");
  const TraceFacts& t = r->facts;
  double idle = 0;
  for (double s : t.idle_share) idle += s;
  EXPECT_NEAR(idle, 0.19, 0.01);
  double host = t.Idle(IdleCause::kCpuOther) + t.Idle(IdleCause::kLaunchOverhead);
  EXPECT_NEAR(f.cost_fraction, host, 1e-9);
  EXPECT_NEAR(f.cost_fraction, (7.04 + 1.47) / 69.10, 0.005);  // the old --json's causes_ns
  EXPECT_NE(f.reason.find("mid-step"), std::string::npos) << f.reason;
  EXPECT_NE(f.reason.find("cpu_other 53%"), std::string::npos) << f.reason;
}

}  // namespace
}  // namespace stallscope::diagnose
