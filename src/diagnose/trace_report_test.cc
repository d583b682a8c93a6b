// The trace → verdict path: hand-built timelines whose bottleneck is known, through the same
// rules engine `run` uses.
#include "diagnose/trace_report.h"

#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "diagnose/verdict.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace stallscope::diagnose {
namespace {

using trace::Event;
using trace::EventKind;
using trace::RankTrace;

constexpr int64_t kUs = 1000;

/// Builds a one-GPU rank trace; times in µs.
class TraceBuilder {
 public:
  explicit TraceBuilder(int32_t rank = 0) { t_.rank = rank; }

  TraceBuilder& Host(EventKind kind, std::string_view name, int64_t ts_us, int64_t dur_us,
                     int64_t correlation = -1) {
    Event e;
    e.kind = kind;
    e.name_id = t_.names.Intern(name);
    e.ts_ns = ts_us * kUs;
    e.set_dur_ns(dur_us * kUs);
    e.pid = 100;
    e.tid = 100;
    e.correlation = correlation;
    t_.events.push_back(e);
    return *this;
  }
  /// A kernel on stream 7 of GPU 0, launched by a cudaLaunchKernel 5 µs long starting at
  /// `launch_us`.
  TraceBuilder& Kernel(std::string_view name, int64_t launch_us, int64_t ts_us, int64_t dur_us) {
    int64_t corr = next_corr_++;
    Host(EventKind::kRuntime, "cudaLaunchKernel", launch_us, 5, corr);
    Event e;
    e.kind = EventKind::kKernel;
    e.name_id = t_.names.Intern(name);
    e.ts_ns = ts_us * kUs;
    e.set_dur_ns(dur_us * kUs);
    e.pid = 0;
    e.tid = 7;
    e.correlation = corr;
    t_.events.push_back(e);
    return *this;
  }
  TraceBuilder& Step(int64_t n, int64_t ts_us, int64_t dur_us) {
    return Host(EventKind::kUserAnnotation, "ProfilerStep#" + std::to_string(n), ts_us, dur_us);
  }
  RankTrace Build() { return std::move(t_); }

 private:
  RankTrace t_;
  int64_t next_corr_ = 1;
};

TraceReport ReportOf(std::vector<RankTrace> traces, bool hta = false) {
  trace::AnalysisOptions o;
  o.hta_compat = hta;
  std::vector<TraceRankReport> ranks;
  for (auto& t : traces) ranks.push_back(AnalyzeRank(std::move(t), o));
  return BuildTraceReport(std::move(ranks), o);
}

std::string PrincipalOf(const TraceReport& r) {
  return r.verdict.principal ? std::string(FindingClassName(r.verdict.principal->cls)) : "none";
}

// 10 steps of 10 ms: the host spends 6 ms in the DataLoader with the GPU idle, then the GPU
// computes for 4 ms.
TEST(TraceVerdict, DataLoaderWaitIsDataBound) {
  TraceBuilder b;
  for (int64_t i = 0; i < 10; ++i) {
    int64_t t0 = i * 10'000;
    b.Step(i + 1, t0, 10'000);
    b.Host(EventKind::kUserAnnotation,
           "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, 6'000);
    b.Kernel("void gemm_kernel<float>(float*)", t0 + 6'000, t0 + 6'010, 3'980);
  }
  TraceReport r = ReportOf({b.Build()});
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_EQ(r.ranks[0].timeline.steps.size(), 10u);
  EXPECT_EQ(PrincipalOf(r), "data_bound_cpu");
  ASSERT_TRUE(r.verdict.principal);
  EXPECT_NEAR(r.verdict.principal->cost_fraction, 0.6, 0.01);
  // The trace shows num_workers=0 (the single-process iterator): the fix says so.
  EXPECT_NE(r.verdict.principal->recommendations.front().text.find("num_workers=0"),
            std::string::npos);
  ASSERT_EQ(r.facts.gpus.size(), 1u);
  EXPECT_NEAR(r.facts.gpus[0].busy_share, 0.398, 0.002);
  EXPECT_NEAR(r.facts.Idle(trace::IdleCause::kDataLoader), 0.6, 0.002);
}

// The GPU is busy 97% of every step: gpu_bound, the good case.
TEST(TraceVerdict, BusyGpuIsGpuBound) {
  TraceBuilder b;
  for (int64_t i = 0; i < 10; ++i) {
    int64_t t0 = i * 10'000;
    b.Step(i + 1, t0, 10'000);
    b.Kernel("void gemm_kernel<float>(float*)", t0 - 200, t0, 9'700);
  }
  TraceReport r = ReportOf({b.Build()});
  EXPECT_EQ(PrincipalOf(r), "gpu_bound");
}

// Tiny kernels with the GPU idle while the host runs ops and launches: host_launch_bound.
TEST(TraceVerdict, TinyKernelsAreLaunchBound) {
  TraceBuilder b;
  for (int64_t i = 0; i < 10; ++i) {
    int64_t t0 = i * 10'000;
    b.Step(i + 1, t0, 10'000);
    for (int64_t k = 0; k < 50; ++k) {
      int64_t t = t0 + k * 200;
      b.Host(EventKind::kCpuOp, "aten::add", t, 190);
      b.Kernel("void elementwise_kernel<float>(float*)", t + 150, t + 160, 10);
    }
  }
  TraceReport r = ReportOf({b.Build()});
  EXPECT_EQ(PrincipalOf(r), "host_launch_bound");
  EXPECT_GT(r.verdict.principal->cost_fraction, 0.5);
}

// A synchronizing call every step with the GPU idle behind it: host_sync_or_logging.
TEST(TraceVerdict, StreamSyncsAreHostSync) {
  TraceBuilder b;
  for (int64_t i = 0; i < 10; ++i) {
    int64_t t0 = i * 10'000;
    b.Step(i + 1, t0, 10'000);
    b.Kernel("void gemm_kernel<float>(float*)", t0, t0 + 10, 5'000);
    b.Host(EventKind::kRuntime, "cudaStreamSynchronize", t0 + 20, 9'900);
  }
  TraceReport r = ReportOf({b.Build()});
  EXPECT_EQ(r.ranks[0].idle.syncs.count, 10);
  EXPECT_EQ(PrincipalOf(r), "host_sync_or_logging");
}

// Kernels launched long before they run (deep queue) with gaps between them: the GPU waits on
// a dependency, not the host.
TEST(TraceVerdict, QueuedWorkWithGapsIsCommunicationBound) {
  TraceBuilder b;
  for (int64_t i = 0; i < 10; ++i) {
    int64_t t0 = i * 10'000;
    b.Step(i + 1, t0, 10'000);
    b.Kernel("void gemm_kernel<float>(float*)", t0, t0 + 100, 2'000);
    b.Kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", t0 + 10, t0 + 2'100, 2'000);
    b.Kernel("void gemm_kernel<float>(float*)", t0 + 20, t0 + 8'000, 1'900);
  }
  TraceReport r = ReportOf({b.Build()});
  EXPECT_EQ(PrincipalOf(r), "communication_bound");
}

// ------------------------------------------------------------------------------------------
// Issue 16: which class a GPU timeline gets, by how the queue and the idle time look, and
// evidence that agrees with the class (a deep queue is never launch-bound's support).

// Per step: 40 kernels launched in 400 µs, run back to back for 4 ms (a deep queue); then
// .item() syncs (cudaMemcpy inside aten::item) until the GPU drains, and the host runs 4.5 ms of
// CPU ops before the next step's launches: the GPU idles after each sync.
RankTrace DeepQueueThenSync() {
  TraceBuilder b;
  for (int64_t i = 0; i < 10; ++i) {
    int64_t t0 = i * 10'000;
    b.Step(i + 1, t0, 10'000);
    for (int64_t k = 0; k < 40; ++k) {
      b.Kernel("void gemm_kernel<float>(float*)", t0 + k * 10, t0 + 500 + k * 100, 100);
    }
    b.Host(EventKind::kCpuOp, "aten::item", t0 + 450, 4'070);
    b.Host(EventKind::kRuntime, "cudaMemcpy", t0 + 455, 4'060);
    b.Host(EventKind::kCpuOp, "aten::add", t0 + 4'520, 4'480);
  }
  return b.Build();
}

// 50 tiny kernels per step, each launched just before it runs: a shallow queue, the GPU idle
// while the host runs ops between launches.
RankTrace ShallowQueueTinyKernels() {
  TraceBuilder b;
  for (int64_t i = 0; i < 10; ++i) {
    int64_t t0 = i * 10'000;
    b.Step(i + 1, t0, 10'000);
    for (int64_t k = 0; k < 50; ++k) {
      int64_t t = t0 + k * 200;
      b.Host(EventKind::kCpuOp, "aten::add", t, 190);
      b.Kernel("void elementwise_kernel<float>(float*)", t + 150, t + 160, 10);
    }
  }
  return b.Build();
}

// A window of CUDA start-up: 30 s in the first runtime call (lazy context creation), 8.5 s of
// cudaMalloc/cudaFree, 79 kernels — the shape of the public trace the issue quotes.
RankTrace StartupWindow() {
  TraceBuilder b;
  b.Host(EventKind::kRuntime, "cudaDeviceGetStreamPriorityRange", 0, 30'000'000);
  b.Host(EventKind::kRuntime, "cudaGetDeviceProperties_v2", 30'000'000, 50'000);
  for (int64_t k = 0; k < 85; ++k) {
    int64_t t = 30'100'000 + k * 110'000;
    b.Host(EventKind::kRuntime, k % 2 == 0 ? "cudaMalloc" : "cudaFree", t, 100'000);
  }
  for (int64_t k = 0; k < 79; ++k) {
    int64_t t = 39'500'000 + k * 1'000;
    b.Kernel("void elementwise_kernel<float>(float*)", t, t + 10, 500);
  }
  return b.Build();
}

// Every step frees and allocates device memory (cudaFree + cudaMalloc, 3 ms) with the GPU idle,
// then runs its work: allocator churn.
RankTrace MallocFreeEveryStep() {
  TraceBuilder b;
  for (int64_t i = 0; i < 10; ++i) {
    int64_t t0 = i * 10'000;
    b.Step(i + 1, t0, 10'000);
    b.Host(EventKind::kRuntime, "cudaFree", t0, 1'500);
    b.Host(EventKind::kRuntime, "cudaMalloc", t0 + 1'500, 1'500);
    for (int64_t k = 0; k < 10; ++k) {
      b.Kernel("void gemm_kernel<float>(float*)", t0 + 3'000 + k * 10, t0 + 3'200 + k * 650, 650);
    }
  }
  return b.Build();
}

// Each step starts with 3 ms of host ops (zero_grad, Python) and no launches, then launches 40
// kernels far ahead of the GPU (a deep queue): the GPU idles at every step boundary.
RankTrace DeepQueueIdleAtStepStart() {
  TraceBuilder b;
  for (int64_t i = 0; i < 10; ++i) {
    int64_t t0 = i * 10'000;
    b.Step(i + 1, t0, 10'000);
    b.Host(EventKind::kCpuOp, "aten::zero_", t0, 3'000);
    for (int64_t k = 0; k < 40; ++k) {
      b.Kernel("void gemm_kernel<float>(float*)", t0 + 3'000 + k * 10, t0 + 3'100 + k * 160, 160);
    }
  }
  return b.Build();
}

struct ClassCase {
  const char* what;
  RankTrace (*make)();
  const char* principal;
};

TEST(TraceVerdict, EachTimelineShapeGetsItsClassWithEvidenceThatAgrees) {
  const ClassCase cases[] = {
      {"deep queue + idle after a per-step sync", DeepQueueThenSync, "host_sync_or_logging"},
      {"shallow queue + tiny kernels", ShallowQueueTinyKernels, "host_launch_bound"},
      {"start-up window", StartupWindow, "startup_window"},
      {"malloc/free every step", MallocFreeEveryStep, "allocator_churn"},
      {"deep queue + idle at the step start", DeepQueueIdleAtStepStart, "host_step_boundary"},
  };
  for (const ClassCase& c : cases) {
    SCOPED_TRACE(c.what);
    TraceReport r = ReportOf({c.make()});
    EXPECT_EQ(PrincipalOf(r), c.principal);
    std::vector<Finding> all = r.verdict.secondary;
    if (r.verdict.principal) all.push_back(*r.verdict.principal);
    for (const Finding& f : all) {
      // launch-bound's queue line must show a shallow queue; any other class may cite a deep one.
      for (const Evidence& e : f.evidence) {
        if (e.metric != "trace.queue_mean") continue;
        if (f.cls == FindingClass::kHostLaunchBound) {
          EXPECT_LT(e.value, kThresholds.launch_queue_shallow.value) << e.text;
        } else {
          EXPECT_GE(e.value, kThresholds.launch_queue_shallow.value) << e.text;
        }
      }
      // No launch-bound finding on a deep queue, however idle the GPU.
      if (f.cls == FindingClass::kHostLaunchBound) {
        ASSERT_TRUE(r.facts.queue_mean.has_value());
        EXPECT_LT(*r.facts.queue_mean, kThresholds.launch_queue_shallow.value);
      }
    }
  }
}

// The start-up window is the whole verdict: no training advice from set-up calls. Its evidence
// names the calls and how much of the window they take.
TEST(TraceVerdict, StartupWindowNamesTheCallsAndHowToProfileSteadyState) {
  TraceReport r = ReportOf({StartupWindow()});
  ASSERT_TRUE(r.verdict.principal);
  const Finding& f = *r.verdict.principal;
  EXPECT_EQ(FindingClassName(f.cls), "startup_window");
  EXPECT_TRUE(r.verdict.secondary.empty());
  EXPECT_GT(f.cost_fraction, 0.9);
  ASSERT_FALSE(f.evidence.empty());
  EXPECT_NE(f.evidence[0].text.find("cudaDeviceGetStreamPriorityRange ×1 30.00 s"),
            std::string::npos)
      << f.evidence[0].text;
  bool memory_line = false;
  for (const Evidence& e : f.evidence)
    memory_line |= e.text.find("cudaMalloc ×43") != std::string::npos;
  EXPECT_TRUE(memory_line);
  ASSERT_FALSE(f.recommendations.empty());
  EXPECT_NE(f.recommendations[0].text.find("torch.profiler.schedule"), std::string::npos);
  // The idle attribution says the same: set-up and memory calls, not launch overhead.
  EXPECT_GT(r.facts.Idle(trace::IdleCause::kSetup), 0.7);
  EXPECT_GT(r.facts.Idle(trace::IdleCause::kMemory), 0.15);
  EXPECT_LT(r.facts.Idle(trace::IdleCause::kLaunchOverhead), 0.01);
}

// Churn's evidence counts the steps with memory calls and the calls per step.
TEST(TraceVerdict, AllocatorChurnCountsTheStepsAndCalls) {
  TraceReport r = ReportOf({MallocFreeEveryStep()});
  ASSERT_TRUE(r.verdict.principal);
  const Finding& f = *r.verdict.principal;
  ASSERT_EQ(FindingClassName(f.cls), "allocator_churn");
  EXPECT_NEAR(f.cost_fraction, 0.3, 0.01);
  bool counted = false;
  for (const Evidence& e : f.evidence) {
    if (e.metric == "trace.memory_calls_per_step") {
      counted = true;
      EXPECT_DOUBLE_EQ(e.value, 2.0);
      EXPECT_NE(e.text.find("10 of 10 steps"), std::string::npos) << e.text;
    }
  }
  EXPECT_TRUE(counted);
  bool expandable = false;
  for (const auto& rec : f.recommendations) {
    expandable |= rec.text.find("expandable_segments") != std::string::npos;
  }
  EXPECT_TRUE(expandable);
}

// With a deep queue the sync verdict says so, as support: the host was ahead until the sync.
TEST(TraceVerdict, DeepQueueSyncEvidenceCitesTheQueueAndTheCall) {
  TraceReport r = ReportOf({DeepQueueThenSync()});
  ASSERT_TRUE(r.verdict.principal);
  const Finding& f = *r.verdict.principal;
  ASSERT_EQ(FindingClassName(f.cls), "host_sync_or_logging");
  EXPECT_GT(r.facts.At(trace::IdlePosition::kAfterSync), 0.5);
  std::string all;
  for (const Evidence& e : f.evidence) all += e.text + "\n";
  EXPECT_NE(all.find("cudaMemcpy ×10"), std::string::npos) << all;
  EXPECT_NE(all.find("runs ahead until a sync"), std::string::npos) << all;
}

TEST(TraceVerdict, PhasesSumToStepTime) {
  TraceBuilder b;
  for (int64_t i = 0; i < 4; ++i) {
    int64_t t0 = i * 10'000;
    b.Step(i + 1, t0, 10'000);
    b.Host(EventKind::kUserAnnotation,
           "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t0, 2'000);
    b.Kernel("void gemm_kernel<float>(float*)", t0 + 2'000, t0 + 2'010, 5'000);
    b.Host(EventKind::kRuntime, "cudaDeviceSynchronize", t0 + 2'100, 6'000);
  }
  TraceReport r = ReportOf({b.Build()});
  ASSERT_EQ(r.phases.ranks.size(), 1u);
  for (const auto& s : r.phases.ranks[0].steps) {
    double sum = 0;
    for (const auto& [name, sec] : s.phase_s) sum += sec;
    EXPECT_NEAR(sum, 0.010, 1e-9) << "step " << s.index;
  }
}

TEST(TraceVerdict, CpuOnlyTraceStillGetsAVerdict) {
  TraceBuilder b;
  for (int64_t i = 0; i < 10; ++i) {
    int64_t t0 = i * 10'000;
    b.Step(i + 1, t0, 10'000);
    b.Host(EventKind::kUserAnnotation,
           "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, 7'000);
    b.Host(EventKind::kCpuOp, "aten::linear", t0 + 7'000, 2'900);
  }
  TraceReport r = ReportOf({b.Build()});
  EXPECT_FALSE(r.ranks[0].has_gpu());
  EXPECT_EQ(PrincipalOf(r), "data_bound_cpu");
}

TEST(TraceVerdict, TwoRanksOneSlowIsStraggler) {
  std::vector<RankTrace> ranks;
  for (int32_t rank = 0; rank < 2; ++rank) {
    TraceBuilder b(rank);
    int64_t step_us = rank == 1 ? 14'000 : 10'000;
    for (int64_t i = 0; i < 10; ++i) {
      int64_t t0 = i * step_us;
      b.Step(i + 1, t0, step_us);
      b.Kernel("void gemm_kernel<float>(float*)", t0 - 100, t0, step_us - 100);
    }
    ranks.push_back(b.Build());
  }
  TraceReport r = ReportOf(std::move(ranks));
  ASSERT_TRUE(r.cross);
  EXPECT_EQ(r.cross->slowest_rank, 1);
  bool straggler = false;
  auto all = r.verdict.secondary;
  if (r.verdict.principal) all.push_back(*r.verdict.principal);
  for (const auto& f : all) straggler = straggler || f.cls == FindingClass::kStraggler;
  EXPECT_TRUE(straggler);
}

}  // namespace
}  // namespace stallscope::diagnose

namespace stallscope::diagnose {
namespace {

const std::string kTraces = STALLSCOPE_SOURCE_DIR "/tests/data/traces/";

TEST(AnalyzeTraceFiles, HookSeesEveryRankBeforeTheAnalysisAndGivesTheSameReport) {
  std::vector<std::string> paths = {kTraces + "steps_kineto_gpu.json"};
  size_t seen_events = 0;
  int calls = 0;
  auto hooked = AnalyzeTraceFiles(paths, {}, {}, 1, [&](const std::vector<trace::RankTrace>& t) {
    ++calls;
    for (const auto& r : t) seen_events += r.events.size();
    return OkStatus();
  });
  auto plain = AnalyzeTraceFiles(paths, {}, {}, 1);
  ASSERT_TRUE(hooked.ok()) << hooked.error().message;
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_EQ(calls, 1);
  EXPECT_GT(seen_events, 0u);
  ASSERT_EQ(hooked->ranks.size(), plain->ranks.size());
  ASSERT_EQ(hooked->verdict.principal.has_value(), plain->verdict.principal.has_value());
  if (plain->verdict.principal) {
    EXPECT_EQ(hooked->verdict.principal->cls, plain->verdict.principal->cls);
  }
}

TEST(AnalyzeTraceFiles, HookErrorFailsTheAnalysis) {
  auto r = AnalyzeTraceFiles({kTraces + "steps_kineto_gpu.json"}, {}, {}, 1,
                             [](const std::vector<trace::RankTrace>&) -> Status {
                               return MakeError(ErrorCode::kIo, "out.json: cannot write");
                             });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "out.json: cannot write");
}

TEST(AnalyzeTraceFiles, NoTraceFilesIsAnErrorWithOrWithoutAHook) {
  int calls = 0;
  TracesHook hook = [&](const std::vector<trace::RankTrace>&) {
    ++calls;
    return OkStatus();
  };
  for (const TracesHook& h : {TracesHook{}, hook}) {
    auto r = AnalyzeTraceFiles({}, {}, {}, 1, h);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, ".: no trace files (*.json, *.json.gz)");
  }
  EXPECT_EQ(calls, 0);  // nothing to export either
}

// Issue 12 finding 10: a folder with one bad file failed whole. The others are analysed, and the
// bad one is named in a warning; a folder where every file is bad is still an error.
TEST(AnalyzeTraceFiles, AnUnreadableFileIsLeftOutWithAWarning) {
  stallscope::testing::TempDir dir("one_bad");
  std::ofstream(dir.Sub("rank0.json"))
      << stallscope::testing::Slurp(kTraces + "steps_kineto_gpu.json");
  std::ofstream(dir.Sub("rank1.json")) << "{\"traceEvents\": 12}";
  const std::string bad = dir.Sub("rank1.json");
  TracesHook hook = [](const std::vector<trace::RankTrace>&) { return OkStatus(); };
  for (const TracesHook& h : {TracesHook{}, hook}) {
    auto r = AnalyzeTraceFiles({dir.path().string()}, {}, {}, 1, h);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->ranks.size(), 1u);
    ASSERT_FALSE(r->warnings.empty());
    EXPECT_EQ(r->warnings.back(),
              bad +
                  ": not a Chrome/Kineto trace (no traceEvents array); left out, the other 1 "
                  "file(s) analysed");
  }
  std::filesystem::remove(dir.Sub("rank0.json"));
  for (const TracesHook& h : {TracesHook{}, hook}) {
    auto r = AnalyzeTraceFiles({dir.path().string()}, {}, {}, 1, h);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, bad + ": not a Chrome/Kineto trace (no traceEvents array)");
  }
}

// Issue 12 finding 9: `--steps 100:200` on a trace of steps 551..552 analysed the whole trace
// with a warning. Now an error naming the file, the range asked and the trace's steps.
TEST(AnalyzeTraceFiles, StepRangeWithNoStepIsAnErrorNamingTheTracesSteps) {
  stallscope::testing::TempDir dir("steps_range");
  std::string text = stallscope::testing::Slurp(kTraces + "steps_kineto_gpu.json");
  for (auto [from, to] : {std::pair{"ProfilerStep#1\"", "ProfilerStep#551\""},
                          std::pair{"ProfilerStep#2\"", "ProfilerStep#552\""}}) {
    text.replace(text.find(from), std::string(from).size(), to);
  }
  const std::string path = dir.Sub("t.json");
  std::ofstream(path) << text;
  const std::string no_steps = dir.Sub("no_steps.json");
  std::ofstream(no_steps) << R"({"traceEvents": [{"ph":"X","cat":"kernel","name":"k","pid":0,)"
                             R"("tid":7,"ts":10,"dur":90,"args":{"device":0,"stream":7}}]})";
  struct Case {
    std::string file;
    std::optional<int64_t> first, last;
    bool hta;
    std::string error;  // "" = analysed
  };
  const Case cases[] = {
      {path, 100, 200, false, path + ": no step in 100..200 (the trace has 551..552)"},
      {path, std::nullopt, 200, false, path + ": no step in ..200 (the trace has 551..552)"},
      {path, 553, std::nullopt, false, path + ": no step in 553.. (the trace has 551..552)"},
      {path, 552, 552, true,
       path + ": no step in 552..552 (the trace has 551..552; --hta-compat drops the last step)"},
      {path, 100, std::nullopt, false, ""},
      {path, 552, 600, false, ""},
      {no_steps, 1, 2, false,
       no_steps + ": no step in 1..2 (the trace has no ProfilerStep#N ranges)"},
      {no_steps, std::nullopt, std::nullopt, false, ""},
  };
  for (const Case& c : cases) {
    trace::AnalysisOptions o;
    o.first_step = c.first;
    o.last_step = c.last;
    o.hta_compat = c.hta;
    for (const TracesHook& hook :
         {TracesHook{}, TracesHook([](const auto&) { return OkStatus(); })}) {
      SCOPED_TRACE(c.error + (hook ? " (hook)" : ""));
      auto r = AnalyzeTraceFiles({c.file}, {}, o, 1, hook);
      if (c.error.empty()) {
        EXPECT_TRUE(r.ok()) << r.error().message;
      } else {
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.error().message, c.error);
      }
    }
  }
}

}  // namespace
}  // namespace stallscope::diagnose
