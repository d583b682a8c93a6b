#include "trace/step_breakdown.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "base/units.h"
#include "trace/host_attribution.h"
#include "trace/timeline.h"
#include "trace/trace_model.h"
#include "trace/trace_reader.h"

#include "hta_traces.h"

namespace stallscope::trace {
namespace {

using K = EventKind;
using C = StepCategory;
using I = IdleCause;

// A hand-written event: times in ns; CPU kinds on (pid 0, tid 1) and GPU kinds on (device 0,
// stream 7) unless told otherwise.
struct Ev {
  K kind;
  const char* name;
  int64_t ts;
  int64_t dur;
  int64_t correlation = -1;
  int64_t tid = -1;  // -1: the default for the kind
  int32_t pid = 0;
};

RankTrace Make(std::initializer_list<Ev> evs) {
  RankTrace t;
  for (const Ev& v : evs) {
    Event e;
    e.kind = v.kind;
    e.name_id = t.names.Intern(v.name);
    e.ts_ns = v.ts;
    e.set_dur_ns(v.dur);
    e.correlation = v.correlation;
    e.tid = v.tid >= 0 ? v.tid : (IsGpuKind(v.kind) ? 7 : 1);
    e.pid = v.pid;
    t.events.push_back(e);
  }
  return t;
}

Timeline Prepare(RankTrace& t) { return PrepareTimeline(t, AnalysisOptions{}); }

int64_t Sum(const CategoryNs& c) {
  int64_t s = 0;
  for (int64_t v : c.ns) s += v;
  return s;
}

int64_t Sum(const IdleCauseNs& c) {
  int64_t s = 0;
  for (int64_t v : c.ns) s += v;
  return s;
}

// ------------------------------------------------------------------------------ interval sets

struct SetCase {
  const char* what;
  IntervalSet a;
  IntervalSet b;
  IntervalSet intersect;
  IntervalSet subtract;
  IntervalSet unite;
};

bool Same(const IntervalSet& x, const IntervalSet& y) {
  return std::equal(x.begin(), x.end(), y.begin(), y.end(),
                    [](const Interval& p, const Interval& q) {
                      return p.begin_ns == q.begin_ns && p.end_ns == q.end_ns;
                    });
}

TEST(IntervalSetTest, Table) {
  const SetCase cases[] = {
      {"empty b", {{0, 10}}, {}, {}, {{0, 10}}, {{0, 10}}},
      {"empty a", {}, {{0, 10}}, {}, {}, {{0, 10}}},
      {"disjoint", {{0, 10}}, {{20, 30}}, {}, {{0, 10}}, {{0, 10}, {20, 30}}},
      {"touching", {{0, 10}}, {{10, 20}}, {}, {{0, 10}}, {{0, 20}}},
      {"b inside a",
       {{0, 100}},
       {{10, 20}, {30, 40}},
       {{10, 20}, {30, 40}},
       {{0, 10}, {20, 30}, {40, 100}},
       {{0, 100}}},
      {"b spans two of a",
       {{0, 10}, {20, 30}},
       {{5, 25}},
       {{5, 10}, {20, 25}},
       {{0, 5}, {25, 30}},
       {{0, 30}}},
      {"b covers a", {{5, 10}, {12, 14}}, {{0, 20}}, {{5, 10}, {12, 14}}, {}, {{0, 20}}},
  };
  for (const SetCase& c : cases) {
    IntervalSet out;
    IntersectIntervals(c.a, c.b, out);
    EXPECT_TRUE(Same(out, c.intersect)) << c.what << ": intersect";
    SubtractIntervals(c.a, c.b, out);
    EXPECT_TRUE(Same(out, c.subtract)) << c.what << ": subtract";
    UniteIntervals(c.a, c.b, out);
    EXPECT_TRUE(Same(out, c.unite)) << c.what << ": unite";
  }
}

TEST(IntervalSetTest, NormalizeMergesSortsAndDropsEmpty) {
  IntervalSet s = {{50, 60}, {0, 10}, {5, 20}, {30, 30}, {40, 35}, {20, 25}, {55, 58}};
  NormalizeIntervals(s);
  EXPECT_TRUE(Same(s, {{0, 25}, {50, 60}}));
  EXPECT_EQ(TotalNs(s), 35);
  EXPECT_EQ(OverlapNs(s, 10, 55), 20);
  EXPECT_EQ(OverlapNs(s, 25, 50), 0);
  EXPECT_EQ(OverlapNs(s, 60, 50), 0);
}

// ------------------------------------------------------------------------------ names

TEST(NameTraitsTest, Table) {
  struct Case {
    const char* name;
    uint8_t traits;
  };
  const Case cases[] = {
      {"ncclKernel_AllReduce_RING_LL_Sum_float", kTraitCommKernel},
      {"void ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", kTraitCommKernel},
      {"nccl:all_reduce", kTraitCommKernel | kTraitCommOp},
      {"c10d::allreduce_", kTraitCommOp},
      {"record_param_comms", kTraitCommOp},
      {"ProcessGroupNCCL::allreduce", kTraitCommOp},
      {"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", kTraitDataLoader},
      {"ProfilerStep#12", kTraitProfilerStep},
      {"cudaStreamSynchronize", kTraitSyncCall},
      {"cudaDeviceSynchronize", kTraitSyncCall},
      {"cudaEventSynchronize", kTraitSyncCall},
      {"cuCtxSynchronize", kTraitSyncCall},
      {"cudaMemcpy", kTraitSyncCall},
      {"cudaMemcpyAsync", kTraitNone},
      {"cudaMemcpy2DAsync", kTraitNone},
      {"cudaStreamWaitEvent", kTraitStreamWait},
      {"Stream Wait Event", kTraitStreamWait},
      {"aten::item", kTraitSyncOp},
      {"aten::_local_scalar_dense", kTraitSyncOp},
      {"aten::nonzero", kTraitSyncOp},
      {"aten::nonzero_static", kTraitNone},
      {"cudaLaunchKernel", kTraitNone},
      {"volta_sgemm_128x64_nn", kTraitNone},
      {"", kTraitNone},
  };
  for (const Case& c : cases) EXPECT_EQ(NameTraitsOf(c.name), c.traits) << c.name;
}

// ------------------------------------------------------------------------------ breakdown

// The one name table of IdleCause: the trace report's JSON keys and text rows. Never rename.
TEST(IdleCauseTest, NameTable) {
  const std::pair<IdleCause, std::string_view> table[] = {
      {I::kSync, "sync"},
      {I::kDataLoader, "dataloader"},
      {I::kDependency, "dependency"},
      {I::kSetup, "setup"},
      {I::kMemory, "memory"},
      {I::kLaunchOverhead, "launch_overhead"},
      {I::kCpuOther, "cpu_other"},
      {I::kUnattributed, "unattributed"},
  };
  static_assert(std::size(table) == kIdleCauseCount);
  for (size_t i = 0; i < kIdleCauseCount; ++i) {
    EXPECT_EQ(static_cast<size_t>(table[i].first), i);
    EXPECT_EQ(IdleCauseName(table[i].first), table[i].second);
  }
}

TEST(StepBreakdownTest, PriorityClaimsOverlappingCategories) {
  RankTrace t = Make({
      {K::kUserAnnotation, "ProfilerStep#3", 0, 100},
      {K::kKernel, "sgemm", 10, 20},                  // Kernel [10,30)
      {K::kMemcpy, "Memcpy HtoD", 20, 20},            // [30,40) left
      {K::kMemset, "Memset", 35, 15},                 // [40,50) left
      {K::kKernel, "ncclKernel_AllReduce", 45, 15},   // [50,60) left
      {K::kRuntime, "cudaLaunchKernel", 0, 70},       // [0,10) + [60,70)
      {K::kCpuOp, "enumerate(DataLoader)#x", 0, 90},  // [70,90)
      {K::kCpuOp, "aten::add", 80, 15},               // [90,95)
  });
  Timeline tl = Prepare(t);
  StepBreakdown b = ComputeStepBreakdown(t, tl);
  ASSERT_EQ(b.steps.size(), 1u);
  const CategoryNs& s = b.steps[0].times;
  EXPECT_EQ(b.steps[0].step_number, 3);
  EXPECT_EQ(s.wall_ns, 100);
  EXPECT_EQ(s.Get(C::kKernel), 20);
  EXPECT_EQ(s.Get(C::kMemcpy), 10);
  EXPECT_EQ(s.Get(C::kMemset), 10);
  EXPECT_EQ(s.Get(C::kCommunication), 10);
  EXPECT_EQ(s.Get(C::kRuntime), 20);
  EXPECT_EQ(s.Get(C::kDataLoader), 20);
  EXPECT_EQ(s.Get(C::kCpuExec), 5);
  EXPECT_EQ(s.Get(C::kOther), 5);
  EXPECT_EQ(Sum(s), 100);
  EXPECT_DOUBLE_EQ(s.Share(C::kKernel), 0.2);
  EXPECT_EQ(b.total.wall_ns, 100);
  EXPECT_FALSE(b.whole_window);
}

TEST(StepBreakdownTest, ZeroLengthEventsClaimNothing) {
  RankTrace t = Make({
      {K::kUserAnnotation, "ProfilerStep#1", 0, 100},
      {K::kKernel, "k", 50, 0},
      {K::kCpuOp, "aten::empty", 10, 0},
      {K::kRuntime, "cudaLaunchKernel", 20, 0},
  });
  Timeline tl = Prepare(t);
  StepBreakdown b = ComputeStepBreakdown(t, tl);
  ASSERT_EQ(b.steps.size(), 1u);
  EXPECT_EQ(b.steps[0].times.Get(C::kOther), 100);
  EXPECT_EQ(Sum(b.steps[0].times), 100);
  HostAttribution h = AttributeGpuIdle(t, tl);
  EXPECT_TRUE(h.devices.empty());  // a zero-length kernel is no work
}

TEST(StepBreakdownTest, EventStraddlingStepsIsSplit) {
  RankTrace t = Make({
      {K::kUserAnnotation, "ProfilerStep#1", 0, 100},
      {K::kUserAnnotation, "ProfilerStep#2", 100, 100},
      {K::kKernel, "k", 80, 50},        // 20 in step 1, 30 in step 2
      {K::kCpuOp, "aten::mm", 90, 60},  // CPU Exec: [90,150) minus kernel = 0 + 20
  });
  Timeline tl = Prepare(t);
  StepBreakdown b = ComputeStepBreakdown(t, tl);
  ASSERT_EQ(b.steps.size(), 2u);
  EXPECT_EQ(b.steps[0].times.Get(C::kKernel), 20);
  EXPECT_EQ(b.steps[1].times.Get(C::kKernel), 30);
  EXPECT_EQ(b.steps[0].times.Get(C::kCpuExec), 0);
  EXPECT_EQ(b.steps[1].times.Get(C::kCpuExec), 20);
  EXPECT_EQ(b.steps[0].times.Get(C::kOther), 80);
  EXPECT_EQ(b.steps[1].times.Get(C::kOther), 50);
  EXPECT_EQ(b.total.Get(C::kKernel), 50);
  EXPECT_EQ(b.total.wall_ns, 200);
  EXPECT_EQ(Sum(b.total), 200);
}

TEST(StepBreakdownTest, NestedCpuOpsCountOnce) {
  RankTrace t = Make({
      {K::kUserAnnotation, "ProfilerStep#1", 0, 100},
      {K::kCpuOp, "aten::linear", 10, 40},
      {K::kCpuOp, "aten::addmm", 20, 10},
      {K::kCpuOp, "aten::t", 25, 15},
      {K::kPythonFunction, "nn.Module: Linear", 5, 10},
  });
  Timeline tl = Prepare(t);
  StepBreakdown b = ComputeStepBreakdown(t, tl);
  EXPECT_EQ(b.steps[0].times.Get(C::kCpuExec), 45);  // [5,50)
  EXPECT_EQ(b.steps[0].times.Get(C::kOther), 55);
}

TEST(StepBreakdownTest, UnsortedInputGivesTheSameAnswerAfterPrepare) {
  auto events = {
      Ev{K::kUserAnnotation, "ProfilerStep#1", 0, 100},
      Ev{K::kUserAnnotation, "ProfilerStep#2", 100, 100},
      Ev{K::kKernel, "k", 80, 50, 1},
      Ev{K::kRuntime, "cudaLaunchKernel", 70, 5, 1},
      Ev{K::kCpuOp, "enumerate(DataLoader)#x", 120, 60},
      Ev{K::kCpuOp, "aten::copy_", 130, 20},
      Ev{K::kRuntime, "cudaStreamSynchronize", 150, 40},
  };
  RankTrace sorted = Make(events);
  Timeline tl_sorted = Prepare(sorted);
  StepBreakdown want = ComputeStepBreakdown(sorted, tl_sorted);
  HostAttribution want_h = AttributeGpuIdle(sorted, tl_sorted);
  std::mt19937 rng(7);
  for (int round = 0; round < 5; ++round) {
    RankTrace t = Make(events);
    std::shuffle(t.events.begin(), t.events.end(), rng);
    Timeline tl = Prepare(t);
    StepBreakdown got = ComputeStepBreakdown(t, tl);
    ASSERT_EQ(got.steps.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(got.steps[i].times.ns, want.steps[i].times.ns);
    HostAttribution h = AttributeGpuIdle(t, tl);
    EXPECT_EQ(h.total.ns, want_h.total.ns);
    EXPECT_EQ(h.syncs.count, 1);
  }
  // Not even prepared: the analyses still agree (they sort what they need).
  RankTrace raw = Make(events);
  std::reverse(raw.events.begin(), raw.events.end());
  StepBreakdown got = ComputeStepBreakdown(raw, tl_sorted);
  EXPECT_EQ(got.total.ns, want.total.ns);
  EXPECT_EQ(AttributeGpuIdle(raw, tl_sorted).syncs.ns, want_h.syncs.ns);
}

TEST(StepBreakdownTest, NoStepsCoversTheWindow) {
  RankTrace t = Make({
      {K::kCpuOp, "aten::mm", 0, 50},
      {K::kKernel, "k", 40, 20},
  });
  Timeline tl = Prepare(t);
  StepBreakdown b = ComputeStepBreakdown(t, tl);
  EXPECT_TRUE(b.whole_window);
  EXPECT_TRUE(b.steps.empty());
  EXPECT_EQ(b.total.wall_ns, 60);
  EXPECT_EQ(b.total.Get(C::kKernel), 20);
  EXPECT_EQ(b.total.Get(C::kCpuExec), 40);
}

TEST(StepBreakdownTest, CpuOnlyTraceSplitsDataLoaderCpuExecOther) {
  // Legacy torch 1.13 shape: all kCpuOp, pid 0, tid 1; aten ops nested in the loader range.
  RankTrace t = Make({
      {K::kCpuOp, "ProfilerStep#1", 0, 100},
      {K::kCpuOp, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 5, 55},
      {K::kCpuOp, "aten::empty", 10, 10},
      {K::kCpuOp, "aten::full", 40, 10},
      {K::kCpuOp, "aten::linear", 65, 15},
      {K::kCpuOp, "aten::addmm", 66, 13},
      {K::kCpuOp, "aten::item", 85, 2},  // a CPU tensor: no runtime call inside, no sync
      {K::kCpuOp, "ProfilerStep#2", 100, 50},
      {K::kCpuOp, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 100, 30},
  });
  t.dialect = Dialect::kChromeNoCats;
  Timeline tl = Prepare(t);
  StepBreakdown b = ComputeStepBreakdown(t, tl);
  ASSERT_EQ(b.steps.size(), 2u);
  EXPECT_EQ(b.steps[0].times.Get(C::kDataLoader), 55);
  EXPECT_EQ(b.steps[0].times.Get(C::kCpuExec), 17);
  EXPECT_EQ(b.steps[0].times.Get(C::kOther), 28);
  EXPECT_EQ(b.steps[1].times.Get(C::kDataLoader), 30);
  EXPECT_EQ(b.steps[1].times.Get(C::kOther), 20);
  EXPECT_EQ(b.total.Get(C::kKernel), 0);
  HostAttribution h = AttributeGpuIdle(t, tl);
  EXPECT_TRUE(h.devices.empty());
  EXPECT_EQ(h.syncs.count, 0);
  StepSeries s = BuildStepSeries(b, h);
  EXPECT_EQ(s.step_number, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(s.step_ns, (std::vector<int64_t>{100, 50}));
  EXPECT_EQ(s.dataloader_ns, (std::vector<int64_t>{55, 30}));
  EXPECT_EQ(s.gpu_idle_ns, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(s.sync_ns, (std::vector<int64_t>{0, 0}));
}

// ------------------------------------------------------------------------------ GPU idle

TEST(HostAttributionTest, GapDuringStreamSynchronizeIsSync) {
  RankTrace t = Make({
      {K::kUserAnnotation, "ProfilerStep#1", 0, 1000},
      {K::kRuntime, "cudaLaunchKernel", 0, 5, 1},
      {K::kKernel, "k1", 10, 90, 1},                    // busy [10,100)
      {K::kRuntime, "cudaStreamSynchronize", 50, 250},  // host waits [50,300)
      {K::kRuntime, "cudaLaunchKernel", 310, 10, 2},
      {K::kCpuOp, "aten::add", 320, 10},
      {K::kKernel, "k2", 325, 75, 2},  // busy [325,400)
  });
  Timeline tl = Prepare(t);
  HostAttribution h = AttributeGpuIdle(t, tl);
  ASSERT_EQ(h.devices.size(), 1u);
  const DeviceIdle& d = h.devices[0];
  EXPECT_EQ(d.window_ns, 1000);
  EXPECT_EQ(d.busy_ns, 165);
  EXPECT_EQ(d.gaps, 3);  // [0,10) [100,325) [400,1000)
  EXPECT_EQ(d.idle.idle_ns, 835);
  EXPECT_EQ(d.idle.Get(I::kSync), 200);           // [100,300)
  EXPECT_EQ(d.idle.Get(I::kLaunchOverhead), 15);  // [0,5) + [310,320)
  EXPECT_EQ(d.idle.Get(I::kCpuOther), 5);         // [320,325)
  EXPECT_EQ(d.idle.Get(I::kDependency), 0);
  EXPECT_EQ(d.idle.Get(I::kUnattributed), 615);  // [5,10) [300,310) [400,1000)
  EXPECT_EQ(Sum(d.idle), d.idle.idle_ns);
  EXPECT_EQ(h.total.ns, d.idle.ns);
  EXPECT_EQ(h.gpu_idle_ns_per_step, (std::vector<int64_t>{835}));
  EXPECT_EQ(h.syncs.count, 1);
  EXPECT_EQ(h.syncs.ns, 250);
  EXPECT_EQ(h.syncs.count_per_step, (std::vector<int64_t>{1}));
  // Where: [0,10) opens the step (the sync came later); [100,325) began while the sync ran;
  // [400,1000) began 100 ns after the sync returned, within kAfterSyncSlackNs.
  using P = IdlePosition;
  EXPECT_EQ(d.position_ns[static_cast<size_t>(P::kStepStart)], 10);
  EXPECT_EQ(d.position_ns[static_cast<size_t>(P::kAfterSync)], 825);
  EXPECT_EQ(d.position_ns[static_cast<size_t>(P::kStepEnd)], 0);
  EXPECT_EQ(d.position_ns[static_cast<size_t>(P::kMidStep)], 0);
  EXPECT_EQ(h.position_ns, d.position_ns);
  EXPECT_EQ(h.runtime.Count(RuntimeCallKind::kSync), 1);
  EXPECT_EQ(h.runtime.Ns(RuntimeCallKind::kSync), 250);
  EXPECT_EQ(h.runtime.Count(RuntimeCallKind::kLaunch), 2);
}

// Set-up and memory-management calls claim idle by their kind, not as launch overhead; the
// runtime summary counts each kind, unites its time, and counts memory calls per step; a gap
// across a step boundary is the end of one step and the start of the next.
TEST(HostAttributionTest, SetupAndMemoryCallsAreTheirOwnCauses) {
  RankTrace t = Make({
      {K::kUserAnnotation, "ProfilerStep#1", 0, 1000},
      {K::kUserAnnotation, "ProfilerStep#2", 1000, 1000},
      {K::kRuntime, "cudaDeviceGetStreamPriorityRange", 0, 200},
      {K::kRuntime, "cudaMalloc", 200, 100},
      {K::kRuntime, "cudaLaunchKernel", 300, 10, 1},
      {K::kKernel, "k1", 320, 580, 1},  // busy [320,900)
      {K::kRuntime, "cudaFree", 1000, 100},
      {K::kRuntime, "cudaMalloc", 1100, 50},
      {K::kRuntime, "cudaLaunchKernel", 1150, 10, 2},
      {K::kKernel, "k2", 1170, 730, 2},  // busy [1170,1900)
  });
  Timeline tl = Prepare(t);
  HostAttribution h = AttributeGpuIdle(t, tl);
  ASSERT_EQ(h.devices.size(), 1u);
  const DeviceIdle& d = h.devices[0];
  EXPECT_EQ(d.idle.idle_ns, 690);
  EXPECT_EQ(d.idle.Get(I::kSetup), 200);          // [0,200)
  EXPECT_EQ(d.idle.Get(I::kMemory), 250);         // [200,300) [1000,1150)
  EXPECT_EQ(d.idle.Get(I::kLaunchOverhead), 20);  // [300,310) [1150,1160)
  EXPECT_EQ(d.idle.Get(I::kUnattributed), 220);   // [310,320) [900,1000) [1160,1170) [1900,2000)
  EXPECT_EQ(Sum(d.idle), d.idle.idle_ns);
  using P = IdlePosition;
  EXPECT_EQ(d.position_ns[static_cast<size_t>(P::kStepStart)], 490);  // [0,320) [1000,1170)
  EXPECT_EQ(d.position_ns[static_cast<size_t>(P::kStepEnd)], 200);    // [900,1000) [1900,2000)
  EXPECT_EQ(d.position_ns[static_cast<size_t>(P::kAfterSync)], 0);
  const RuntimeCalls& rc = h.runtime;
  EXPECT_EQ(rc.window_ns, 2000);
  EXPECT_EQ(rc.Count(RuntimeCallKind::kSetup), 1);
  EXPECT_EQ(rc.Count(RuntimeCallKind::kMemory), 3);
  EXPECT_EQ(rc.Count(RuntimeCallKind::kLaunch), 2);
  EXPECT_EQ(rc.Ns(RuntimeCallKind::kSetup), 200);
  EXPECT_EQ(rc.Ns(RuntimeCallKind::kMemory), 250);
  EXPECT_EQ(rc.Ns(RuntimeCallKind::kLaunch), 20);
  EXPECT_EQ(rc.memory_calls_per_step, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(rc.top.size(), 4u);
  EXPECT_EQ(rc.top[0].name, "cudaDeviceGetStreamPriorityRange");
  EXPECT_EQ(rc.top[1].name, "cudaMalloc");
  EXPECT_EQ(rc.top[1].count, 2);
  EXPECT_EQ(rc.top[1].ns, 150);
  EXPECT_EQ(rc.top[1].kind, RuntimeCallKind::kMemory);
  EXPECT_EQ(rc.top[2].name, "cudaFree");
}

TEST(HostAttributionTest, GapDuringDataLoaderIsDataLoading) {
  RankTrace t = Make({
      {K::kUserAnnotation, "ProfilerStep#1", 0, 1000},
      {K::kKernel, "k1", 0, 100},
      {K::kCpuOp, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 100, 500},
      {K::kCpuOp, "aten::to", 540, 30},
      {K::kRuntime, "cudaMemcpyAsync", 550, 10},
      {K::kRuntime, "cudaLaunchKernel", 600, 10, 2},
      {K::kKernel, "k2", 615, 85, 2},
  });
  Timeline tl = Prepare(t);
  HostAttribution h = AttributeGpuIdle(t, tl);
  ASSERT_EQ(h.devices.size(), 1u);
  const IdleCauseNs& idle = h.devices[0].idle;
  EXPECT_EQ(idle.idle_ns, 815);                 // [100,615) + [700,1000)
  EXPECT_EQ(idle.Get(I::kDataLoader), 500);     // [100,600), before the launch overhead
  EXPECT_EQ(idle.Get(I::kLaunchOverhead), 10);  // [600,610)
  EXPECT_EQ(idle.Get(I::kUnattributed), 305);   // [610,615) + [700,1000)
  EXPECT_DOUBLE_EQ(idle.Share(I::kDataLoader), 500.0 / 815.0);
  StepBreakdown b = ComputeStepBreakdown(t, tl);
  const CategoryNs& s = b.steps[0].times;
  EXPECT_EQ(s.Get(C::kKernel), 185);
  EXPECT_EQ(s.Get(C::kRuntime), 20);
  EXPECT_EQ(s.Get(C::kDataLoader), 490);  // exposed: minus the runtime call inside it
  EXPECT_EQ(s.Get(C::kCpuExec), 0);
  EXPECT_EQ(s.Get(C::kOther), 305);
  StepSeries series = BuildStepSeries(b, h);
  EXPECT_EQ(series.dataloader_ns, (std::vector<int64_t>{490}));
  EXPECT_EQ(series.gpu_idle_ns, (std::vector<int64_t>{815}));
}

TEST(HostAttributionTest, QueuedKernelAndStreamWaitAreDependency) {
  RankTrace t = Make({
      {K::kUserAnnotation, "ProfilerStep#1", 0, 600},
      {K::kKernel, "a", 0, 100},
      {K::kRuntime, "cudaLaunchKernel", 20, 5, 5},
      {K::kCpuOp, "aten::mul", 150, 50},  // outranked by dependency
      {K::kKernel, "b", 300, 100, 5},     // launched at 20, before its gap [100,300)
      {K::kCudaSync, "Stream Wait Event", 380, 100},
      {K::kRuntime, "cudaLaunchKernel", 450, 10, 6},
      {K::kKernel, "c", 500, 100, 6},  // launched inside its gap [400,500)
  });
  Timeline tl = Prepare(t);
  HostAttribution h = AttributeGpuIdle(t, tl);
  ASSERT_EQ(h.devices.size(), 1u);
  const IdleCauseNs& idle = h.devices[0].idle;
  EXPECT_EQ(idle.idle_ns, 300);
  EXPECT_EQ(idle.Get(I::kDependency), 280);  // [100,300) + [400,480)
  EXPECT_EQ(idle.Get(I::kLaunchOverhead), 0);
  EXPECT_EQ(idle.Get(I::kCpuOther), 0);
  EXPECT_EQ(idle.Get(I::kUnattributed), 20);  // [480,500)
  EXPECT_EQ(h.syncs.count, 0);                // a stream wait does not block the host
}

TEST(HostAttributionTest, StreamsOfADeviceAreUnited) {
  RankTrace t = Make({
      {K::kUserAnnotation, "ProfilerStep#1", 0, 100},
      {K::kKernel, "a", 0, 40, -1, 7},
      {K::kKernel, "b", 30, 30, -1, 20},
      {K::kMemcpy, "Memcpy DtoD", 70, 10, -1, 21},
      {K::kKernel, "other gpu", 0, 100, -1, 7, 1},
  });
  Timeline tl = Prepare(t);
  HostAttribution h = AttributeGpuIdle(t, tl);
  ASSERT_EQ(h.devices.size(), 2u);
  EXPECT_EQ(h.devices[0].device, 0);
  EXPECT_EQ(h.devices[0].busy_ns, 70);
  EXPECT_EQ(h.devices[0].gaps, 2);
  EXPECT_EQ(h.devices[1].device, 1);
  EXPECT_EQ(h.devices[1].idle.idle_ns, 0);
  EXPECT_EQ(h.total.idle_ns, 30);
  EXPECT_EQ(h.gpu_idle_ns_per_step, (std::vector<int64_t>{30}));
}

TEST(HostAttributionTest, SyncsCountOutermostAndNeedARuntimeCall) {
  RankTrace t = Make({
      {K::kUserAnnotation, "ProfilerStep#1", 0, 1000},
      {K::kUserAnnotation, "ProfilerStep#2", 1000, 1000},
      {K::kKernel, "k", 0, 100},
      {K::kCpuOp, "aten::item", 100, 100},
      {K::kCpuOp, "aten::_local_scalar_dense", 105, 90},
      {K::kRuntime, "cudaMemcpyAsync", 110, 10},
      {K::kRuntime, "cudaStreamSynchronize", 120, 70},
      {K::kCpuOp, "aten::item", 300, 10},  // CPU tensor: no runtime call inside
      {K::kRuntime, "cudaMemcpy", 1500, 40},
      {K::kRuntime, "cudaDeviceSynchronize", 1990, 20},  // straddles the end of step 2
      {K::kCudaSync, "Stream Sync", 120, 70},            // GPU row: not a host call
  });
  Timeline tl = Prepare(t);
  HostAttribution h = AttributeGpuIdle(t, tl);
  EXPECT_EQ(h.syncs.count, 3);
  EXPECT_EQ(h.syncs.count_per_step, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(h.syncs.ns_per_step, (std::vector<int64_t>{100, 50}));
  EXPECT_EQ(h.syncs.ns, 150);
  ASSERT_EQ(h.devices.size(), 1u);
  EXPECT_EQ(h.devices[0].idle.Get(I::kSync), 100 + 50);
  EXPECT_EQ(h.devices[0].idle.Get(I::kCpuOther), 10);
  EXPECT_EQ(h.gpu_idle_ns_per_step, (std::vector<int64_t>{900, 1000}));
  StepSeries s = BuildStepSeries(ComputeStepBreakdown(t, tl), h);
  EXPECT_EQ(s.sync_ns, (std::vector<int64_t>{100, 50}));
  EXPECT_EQ(s.step_ns, (std::vector<int64_t>{1000, 1000}));
}

// ------------------------------------------------------------------------------ real files

std::string BreakdownFixture(const char* name) {
  return std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/traces/" + name;
}

// Hand-written Kineto trace (µs): the sync / DataLoader / collective cases end to end through
// the reader. Numbers worked out by hand from the fixture's events (intervals in µs).
TEST(StepBreakdownFileTest, KinetoGpuFixture) {
  auto read = ReadTrace(BreakdownFixture("steps_kineto_gpu.json"));
  ASSERT_TRUE(read.ok()) << read.error().message;
  RankTrace t = std::move(read).value();
  Timeline tl = Prepare(t);
  StepBreakdown b = ComputeStepBreakdown(t, tl);
  ASSERT_EQ(b.steps.size(), 2u);
  const CategoryNs& s1 = b.steps[0].times;
  EXPECT_EQ(s1.Get(C::kKernel), 165 * kNsPerUs);      // [10,100) + [325,400)
  EXPECT_EQ(s1.Get(C::kRuntime), 220 * kNsPerUs);     // [0,5) [100,300) [310,320) [990,995)
  EXPECT_EQ(s1.Get(C::kDataLoader), 400 * kNsPerUs);  // [450,850)
  EXPECT_EQ(s1.Get(C::kCpuExec), 5 * kNsPerUs);       // aten::add [320,325)
  EXPECT_EQ(s1.Get(C::kOther), 210 * kNsPerUs);
  const CategoryNs& s2 = b.steps[1].times;
  EXPECT_EQ(s2.Get(C::kMemcpy), 100 * kNsPerUs);
  EXPECT_EQ(s2.Get(C::kCommunication), 210 * kNsPerUs);  // nccl kernel [1100,1300) + op [1300,1310)
  EXPECT_EQ(s2.Get(C::kRuntime), 0);                     // its launch hides under the copy
  EXPECT_EQ(s2.Get(C::kOther), 190 * kNsPerUs);
  EXPECT_EQ(Sum(b.total), 1500 * kNsPerUs);

  HostAttribution h = AttributeGpuIdle(t, tl);
  ASSERT_EQ(h.devices.size(), 1u);
  const IdleCauseNs& idle = h.devices[0].idle;
  EXPECT_EQ(h.devices[0].gaps, 4);
  EXPECT_EQ(idle.idle_ns, 1035 * kNsPerUs);
  EXPECT_EQ(idle.Get(I::kSync), 200 * kNsPerUs);
  EXPECT_EQ(idle.Get(I::kDataLoader), 400 * kNsPerUs);
  EXPECT_EQ(idle.Get(I::kDependency), 0);
  EXPECT_EQ(idle.Get(I::kLaunchOverhead), 20 * kNsPerUs);
  EXPECT_EQ(idle.Get(I::kCpuOther), 15 * kNsPerUs);
  EXPECT_EQ(idle.Get(I::kUnattributed), 400 * kNsPerUs);
  EXPECT_EQ(h.syncs.count, 1);
  EXPECT_EQ(h.syncs.ns, 250 * kNsPerUs);
  StepSeries series = BuildStepSeries(b, h);
  EXPECT_EQ(series.step_number, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(series.gpu_idle_ns, (std::vector<int64_t>{835 * kNsPerUs, 200 * kNsPerUs}));
  EXPECT_EQ(series.dataloader_ns, (std::vector<int64_t>{400 * kNsPerUs, 0}));
  EXPECT_EQ(series.sync_ns, (std::vector<int64_t>{250 * kNsPerUs, 0}));
}

// Real CPU-only trace from Debian's torch 1.13 (legacy bare array, make_steps_torch113_cpu.py).
// Expected numbers: an independent Python union over the same file (µs × 1000).
TEST(StepBreakdownFileTest, Torch113CpuOnly) {
  auto read = ReadTrace(BreakdownFixture("steps_torch113_cpu.json"));
  ASSERT_TRUE(read.ok()) << read.error().message;
  RankTrace t = std::move(read).value();
  Timeline tl = Prepare(t);
  StepBreakdown b = ComputeStepBreakdown(t, tl);
  struct Want {
    int64_t number, wall_us, dataloader_us, cpu_exec_us, other_us;
  };
  const Want want[] = {
      {1, 4712, 4278, 229, 205}, {2, 4722, 4336, 203, 183}, {3, 4913, 4487, 224, 202}};
  ASSERT_EQ(b.steps.size(), std::size(want));
  for (size_t i = 0; i < std::size(want); ++i) {
    const CategoryNs& s = b.steps[i].times;
    EXPECT_EQ(b.steps[i].step_number, want[i].number);
    EXPECT_EQ(s.wall_ns, want[i].wall_us * kNsPerUs);
    EXPECT_EQ(s.Get(C::kDataLoader), want[i].dataloader_us * kNsPerUs);
    EXPECT_EQ(s.Get(C::kCpuExec), want[i].cpu_exec_us * kNsPerUs);
    EXPECT_EQ(s.Get(C::kOther), want[i].other_us * kNsPerUs);
    EXPECT_EQ(Sum(s), s.wall_ns);
  }
  HostAttribution h = AttributeGpuIdle(t, tl);
  EXPECT_TRUE(h.devices.empty());
  EXPECT_EQ(h.syncs.count, 0);
}

// Smoke test over the HTA reference traces (tests/support/hta_traces.h; skipped when absent):
// every step's parts sum exactly to its wall time, idle causes sum to idle, in clean and
// HTA-compatible modes.
TEST(StepBreakdownScale, HtaTracesSumExactly) {
  const std::string dir = testing::HtaTracesDir().string();
  const char* files[] = {"trace_filter/sampled_rank-0.json.gz",
                         "trace_filter/sampled_rank-1.json.gz",
                         "trace_diff/control/control.json.gz",
                         "trace_diff/test/test.json.gz",
                         "negative_queue_length_values_check/rank0.json.gz",
                         "nccl_parser_config/nccl_data.json.gz"};
  if (!std::filesystem::exists(dir + "/" + files[0])) GTEST_SKIP() << "no traces in " << dir;
  for (const char* f : files) {
    for (bool hta : {false, true}) {
      auto read = ReadTrace(dir + "/" + f);
      ASSERT_TRUE(read.ok()) << read.error().message;
      RankTrace t = std::move(read).value();
      AnalysisOptions options;
      options.hta_compat = hta;
      Timeline tl = PrepareTimeline(t, options);
      auto start = std::chrono::steady_clock::now();
      StepBreakdown b = ComputeStepBreakdown(t, tl);
      HostAttribution h = AttributeGpuIdle(t, tl);
      std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
      ASSERT_FALSE(b.steps.empty()) << f;
      for (const StepBreakdownRow& row : b.steps) {
        EXPECT_EQ(Sum(row.times), row.times.wall_ns) << f << " step " << row.step_number;
        EXPECT_EQ(row.times.wall_ns, row.end_ns - row.begin_ns) << f;
        for (int64_t v : row.times.ns) EXPECT_GE(v, 0) << f;
      }
      EXPECT_EQ(Sum(b.total), b.total.wall_ns) << f;
      for (const DeviceIdle& d : h.devices) {
        EXPECT_EQ(Sum(d.idle), d.idle.idle_ns) << f;
        EXPECT_EQ(d.busy_ns + d.idle.idle_ns, d.window_ns) << f;
      }
      EXPECT_EQ(Sum(h.total), h.total.idle_ns) << f;
      std::printf("%s%s: %zu events, analysed in %.1f ms; %zu steps, wall %.3f ms:", f,
                  hta ? " (hta_compat)" : "", t.events.size(), took.count(), b.steps.size(),
                  static_cast<double>(b.total.wall_ns) / 1e6);
      for (size_t c = 0; c < kStepCategoryCount; ++c) {
        std::printf(" %s %.1f%%", std::string(StepCategoryName(static_cast<C>(c))).c_str(),
                    100 * b.total.Share(static_cast<C>(c)));
      }
      std::printf("\n  gpu idle %.3f ms:", static_cast<double>(h.total.idle_ns) / 1e6);
      for (size_t c = 0; c < kIdleCauseCount; ++c) {
        std::printf(" %s %.1f%%", std::string(IdleCauseName(static_cast<I>(c))).c_str(),
                    100 * h.total.Share(static_cast<I>(c)));
      }
      std::printf("; syncs %lld, %.3f ms\n", static_cast<long long>(h.syncs.count),
                  static_cast<double>(h.syncs.ns) / 1e6);
    }
  }
}

}  // namespace
}  // namespace stallscope::trace
