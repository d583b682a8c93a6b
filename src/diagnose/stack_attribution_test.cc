#include "diagnose/stack_attribution.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/units.h"
#include "diagnose/run_analysis.h"

namespace stallscope::diagnose {
namespace {

using phase::RecordKind;

constexpr int64_t kStart = 7'000 * kNsPerMs;
constexpr int32_t kPid = 100;
constexpr int32_t kWorkerPid = 101;

/// A run of 40 steps of 100 ms: data_loading 0-10 ms, forward_pass 10-40 ms, then 60 ms in no
/// phase ("other"); the main thread sampled every 5 ms, a DataLoader worker every 20 ms.
class StackRun {
 public:
  StackRun() {
    data_.meta.start_mono_ns = kStart;
    data_.events.processes.push_back({kPid, 0, 1, kStart});
    data_.events.names[{kPid, 1}] = "data_loading";
    data_.events.names[{kPid, 2}] = "forward_pass";
    frames({{"/home/u/proj/train.py", "train", 141, "probs = logits.softmax(1).cpu().numpy()"},
            {"/home/u/proj/train.py", "train", 143, "order = np.argsort(probs)"},
            {"/venv/lib/python3.12/site-packages/numpy/core/fromnumeric.py", "argsort", 1133, ""},
            {"/home/u/proj/model.py", "Net.forward", 10, "return self.fc(x)"},
            {"/home/u/proj/train.py", "<module>", 200, "main()"},
            {"/venv/lib/python3.12/site-packages/PIL/Image.py", "Image.resize", 2192, ""},
            {"/home/u/proj/dataset.py", "Images.__getitem__", 58, "img = img.resize((224, 224))"}});
    data_.stacks.stacks = {{0, 4}, {2, 1, 4}, {3, 4}, {5, 6}, {6}};
    stacks::StackProcess main_process, worker;
    main_process.pid = kPid;
    main_process.cwd = "/home/u/proj";
    worker.pid = kWorkerPid;
    worker.worker = true;
    worker.forked_from = kPid;
    data_.stacks.processes = {main_process, worker};
    data_.stacks.main_hz = 200;
    for (int step = 0; step < 40; ++step) Step(step);
  }
  /// One GPU whose driver samples (every 20 ms) say it idles in "other" (40-100 ms of a step).
  void GpuIdleInOther() {
    for (int half = 0; half < 2; ++half) {
      sample::Sample s;
      s.mono_ns = s.wall_ns = kStart + (half + 1) * 2000 * kNsPerMs;
      gpu::GpuSample& g = s.gpus.emplace_back();
      for (int64_t ms = half * 2000 + 20; ms <= (half + 1) * 2000; ms += 20) {
        const int64_t in_step = ms % 100 == 0 ? 100 : ms % 100;
        g.util_samples[g.util_sample_count++] = {(kStart + ms * kNsPerMs) / 1000,
                                                 in_step > 40 ? 0u : 90u};
      }
      data_.recording.samples.push_back(std::move(s));
    }
  }
  rundir::RunData& data() { return data_; }

 private:
  void frames(std::vector<stacks::StackFrame> f) { data_.stacks.frames = std::move(f); }
  void Event(RecordKind kind, uint16_t id, int64_t ms, int64_t arg = 0) {
    phase::LoggedEvent e;
    e.ts_ns = kStart + ms * kNsPerMs;
    e.pid = kPid;
    e.tid = kPid;
    e.phase_id = id;
    e.kind = kind;
    e.arg = arg;
    data_.events.events.push_back(e);
  }
  void Sample(int64_t ms, int32_t pid, uint32_t stack) {
    data_.stacks.samples.push_back({kStart + ms * kNsPerMs + 1, pid, pid, stack});
  }
  void Step(int step) {
    const int64_t t = step * 100;
    Event(RecordKind::kBegin, 1, t);
    Event(RecordKind::kEnd, 1, t + 10);
    Event(RecordKind::kBegin, 2, t + 10);
    Event(RecordKind::kEnd, 2, t + 40);
    Event(RecordKind::kStep, 0, t + 100, step + 1);
    for (int64_t ms = t; ms < t + 100; ms += 5) {
      // other (40-100 ms): 2 of 3 samples at line 141, 1 of 3 in numpy under line 143
      const uint32_t stack = ms - t < 40 ? 2 : ((ms - t) / 5) % 3 == 2 ? 1 : 0;
      Sample(ms, kPid, stack);
    }
    for (int64_t ms = t; ms < t + 100; ms += 20) Sample(ms, kWorkerPid, ms - t < 80 ? 3 : 4);
  }
  rundir::RunData data_;
};

TEST(StackAttribution, SamplesLandInThePhaseOfTheirStepAndCountTheJobsOwnLines) {
  StackRun run;
  const RunAnalysis a = AnalyzeRun(run.data());
  const StackReport& s = a.report.stacks;
  ASSERT_TRUE(s.present);
  EXPECT_EQ(s.samples, static_cast<int64_t>(run.data().stacks.samples.size()));
  ASSERT_GE(s.phases.size(), 2u);
  EXPECT_EQ(s.phases[0].name, "other");  // 12 of 20 samples per step
  const StackGroup& other = s.phases[0];
  ASSERT_EQ(other.lines.size(), 2u);
  EXPECT_EQ(other.lines[0].where, "train.py:141");
  EXPECT_EQ(other.lines[0].text, "probs = logits.softmax(1).cpu().numpy()");
  EXPECT_NEAR(other.lines[0].share, 8.0 / 12, 0.02);
  EXPECT_TRUE(other.lines[0].via.empty());
  EXPECT_EQ(other.lines[1].where, "train.py:143");
  EXPECT_EQ(other.lines[1].via, "numpy/core/fromnumeric.py:1133 argsort");
  EXPECT_DOUBLE_EQ(other.lines[1].via_share, 1.0);
  const StackGroup& fwd = s.phases[1];
  EXPECT_EQ(fwd.name, "forward_pass");
  EXPECT_EQ(fwd.lines.at(0).where, "model.py:10");
  EXPECT_EQ(fwd.lines.at(0).function, "Net.forward");
  // The steady steps only: warm-up steps' samples are not counted.
  int64_t counted = 0;
  for (const StackGroup& g : s.phases) counted += g.samples;
  EXPECT_EQ(counted, s.steady_samples);
  EXPECT_LT(s.steady_samples, 40 * 20);
  ASSERT_TRUE(s.workers);
  EXPECT_EQ(s.workers->lines.at(0).where, "dataset.py:58");
  EXPECT_EQ(s.workers->lines.at(0).via, "PIL/Image.py:2192 Image.resize");
  EXPECT_NEAR(s.workers->lines.at(0).via_share, 0.8, 1e-9);
}

TEST(StackAttribution, TheFindingOfAPhaseGetsTheLinesOfThatPhase) {
  StackRun run;
  const StackReport s = AnalyzeRun(run.data()).report.stacks;
  Verdict v;
  Finding logging;
  logging.cls = FindingClass::kHostSyncOrLogging;
  logging.evidence.push_back(
      {"other is 60% of step time", "phase_share.other", 0.6, "fraction", std::nullopt});
  Finding data;
  data.cls = FindingClass::kDataBoundCpu;
  data.evidence.push_back(
      {"data_loading is 10%", "phase_share.data_loading", 0.1, "fraction", std::nullopt});
  Finding gpu;  // names no phase: nothing added
  v.principal = logging;
  v.secondary = {data, gpu};
  AddStackEvidence(v, s);
  ASSERT_EQ(v.principal->evidence.size(), 2u);
  const Evidence& e = v.principal->evidence[1];
  EXPECT_EQ(e.metric, "stacks.other");
  EXPECT_NE(e.text.find("during other the main thread was at train.py:141 "
                        "`probs = logits.softmax(1).cpu().numpy()` in 67% of samples; "
                        "train.py:143 `order = np.argsort(probs)` (in "
                        "numpy/core/fromnumeric.py:1133 argsort) in 33% of samples"),
            std::string::npos)
      << e.text;
  // A data-bound finding: the main thread during data_loading, then what the workers did.
  const auto& de = v.secondary[0].evidence;
  ASSERT_EQ(de.size(), 3u);
  EXPECT_EQ(de[1].metric, "stacks.data_loading");
  EXPECT_NE(de[1].text.find("during data_loading the main thread was at model.py:10"),
            std::string::npos)
      << de[1].text;
  EXPECT_EQ(de[2].metric, "stacks.workers");
  EXPECT_NE(de[2].text.find("DataLoader workers: 80% in PIL/Image.py:2192 Image.resize ← "
                            "dataset.py:58 `img = img.resize((224, 224))`"),
            std::string::npos)
      << de[2].text;
  EXPECT_EQ(v.secondary[1].evidence.size(), 0u);
}

// Issue 31: "for the GPU-idle part of each step, the main thread's top lines" (the driver's
// sub-second utilization, on one GPU: no process list needed).
TEST(StackAttribution, TheMainThreadWhileTheGpuWasIdle) {
  StackRun run;
  RunAnalysis none = AnalyzeRun(run.data());
  EXPECT_FALSE(none.report.stacks.gpu_idle) << "no GPU samples, no group";
  run.GpuIdleInOther();
  const StackReport s = AnalyzeRun(run.data()).report.stacks;
  ASSERT_TRUE(s.gpu_idle);
  EXPECT_EQ(s.gpu_idle->name, "gpu_idle");
  // Exactly the samples of "other" in the steady steps that the driver samples cover.
  const StackGroup* other = nullptr;
  for (const StackGroup& g : s.phases) other = g.name == "other" ? &g : other;
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(s.gpu_idle->samples, other->samples);
  EXPECT_EQ(s.gpu_idle->lines.at(0).where, "train.py:141");
  Verdict v;
  v.principal = Finding{};
  AddStackEvidence(v, s);
  ASSERT_EQ(v.principal->evidence.size(), 1u);
  EXPECT_EQ(v.principal->evidence[0].metric, "stacks.gpu_idle");
  EXPECT_NE(v.principal->evidence[0].text.find(
                "while its GPU was idle (≤ 5% in the driver's sub-second samples) the main "
                "thread was at train.py:141"),
            std::string::npos)
      << v.principal->evidence[0].text;
}

TEST(StackAttribution, ARunWithoutStacksAddsNothing) {
  StackRun run;
  run.data().stacks = {};
  const RunAnalysis a = AnalyzeRun(run.data());
  EXPECT_FALSE(a.report.stacks.present);
  Verdict v;
  v.principal = Finding{};
  v.principal->evidence.push_back({"other", "phase_share.other", 0.6, "fraction", std::nullopt});
  AddStackEvidence(v, a.report.stacks);
  EXPECT_EQ(v.principal->evidence.size(), 1u);
}

// run --stacks-threads all: a rank's other threads are sampled too. Their samples are not the
// main thread's phases; they are a group of their own.
TEST(StackAttribution, OtherThreadsOfARankAreTheirOwnGroupNotItsPhases) {
  StackRun run;
  const RunAnalysis before = AnalyzeRun(run.data());
  std::vector<stacks::StackSample> more;
  for (const stacks::StackSample& s : run.data().stacks.samples) {
    if (s.pid == kPid) more.push_back({s.t_ns, kPid, kPid + 50, 1});  // a logging thread
  }
  run.data().stacks.samples.insert(run.data().stacks.samples.end(), more.begin(), more.end());
  const RunAnalysis a = AnalyzeRun(run.data());
  EXPECT_EQ(a.report.stacks.steady_samples, before.report.stacks.steady_samples);
  ASSERT_EQ(a.report.stacks.phases.size(), before.report.stacks.phases.size());
  EXPECT_EQ(a.report.stacks.phases[0].samples, before.report.stacks.phases[0].samples);
  ASSERT_TRUE(a.report.stacks.threads);
  EXPECT_EQ(a.report.stacks.threads->samples, before.report.stacks.steady_samples);
  EXPECT_EQ(a.report.stacks.threads->lines.at(0).where, "train.py:143");
  EXPECT_FALSE(before.report.stacks.threads);
}

// Issue 40 "also found": a job that marks no steps (no training loop) had no word in its report
// about where its Python was. Its main threads' samples are one group over the whole run.
TEST(StackAttribution, AJobWithoutStepsGetsItsWholeRun) {
  StackRun run;
  run.data().events.events.clear();  // no phases, no steps
  const RunAnalysis a = AnalyzeRun(run.data());
  const StackReport& s = a.report.stacks;
  ASSERT_TRUE(s.present);
  EXPECT_TRUE(s.phases.empty());
  ASSERT_TRUE(s.whole_run);
  EXPECT_EQ(s.whole_run->samples, 40 * 20);
  ASSERT_EQ(s.whole_run->lines.size(), 3u);  // 8, 8 and 4 of 20 samples per step
  EXPECT_EQ(s.whole_run->lines[0].samples, 40 * 8);
  EXPECT_EQ(s.whole_run->lines[1].samples, 40 * 8);
  EXPECT_EQ(s.whole_run->lines[2].where, "train.py:143");
  EXPECT_TRUE(s.whole_run->lines[0].where == "model.py:10" ||
              s.whole_run->lines[1].where == "model.py:10");
}

TEST(StackAttribution, LibraryFilesAndShortPaths) {
  EXPECT_TRUE(IsLibraryFile("/usr/lib/python3.11/threading.py"));
  EXPECT_TRUE(IsLibraryFile("/v/lib/python3.12/site-packages/torch/nn/modules/module.py"));
  EXPECT_TRUE(IsLibraryFile("/usr/lib/python3/dist-packages/numpy/core/fromnumeric.py"));
  EXPECT_TRUE(IsLibraryFile("<frozen importlib._bootstrap>"));
  EXPECT_TRUE(IsLibraryFile("/opt/stallscope/lib/stallscope/python/stallscope/_hooks.py"));
  EXPECT_FALSE(IsLibraryFile("train.py"));
  EXPECT_FALSE(IsLibraryFile("/home/u/proj/data/dataset.py"));
  EXPECT_EQ(ShortPath("/v/lib/python3.12/site-packages/PIL/Image.py", ""), "PIL/Image.py");
  EXPECT_EQ(ShortPath("/usr/lib/python3.11/threading.py", ""), "threading.py");
  EXPECT_EQ(ShortPath("/home/u/proj/data/dataset.py", "/home/u/proj"), "data/dataset.py");
  EXPECT_EQ(ShortPath("/home/u/projx/a.py", "/home/u/proj"), "/home/u/projx/a.py");
  EXPECT_EQ(ShortPath("train.py", "/home/u/proj"), "train.py");
}

}  // namespace
}  // namespace stallscope::diagnose
