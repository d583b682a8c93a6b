#include "diagnose/run_analysis.h"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_check_fixture.h"
#include "verdict_test_util.h"

namespace stallscope::diagnose {
namespace {

namespace fs = std::filesystem;

/// A run directory of the H100 gpu-check (shared/gpu/h100-2026-11-26), analysed; skips the test
/// when the shared folder is absent.
#define LOAD_H100_RUN(var, name)                                              \
  const auto h100_dir = testing::H100GpuCheckDir();                           \
  if (!h100_dir) GTEST_SKIP() << "shared/gpu/h100-2026-11-26 is not present"; \
  auto var##_loaded = LoadAndAnalyzeRun((*h100_dir / (name)).string());       \
  ASSERT_TRUE(var##_loaded.ok()) << var##_loaded.error().message;             \
  const RunReport& var = var##_loaded->analysis.report

const LifePart* Part(const std::vector<LifePart>& parts, LifePartKind kind) {
  for (const auto& p : parts) {
    if (p.kind == kind) return &p;
  }
  return nullptr;
}

std::string Class(const Verdict& v) {
  return v.principal ? std::string(FindingClassName(v.principal->cls)) : "none";
}

// Issue 26: on the H100, `run compute` spent 18 s starting (imports, CUDA, four forkserver
// workers, a 5.6 s first batch) and trained 150 steps in about a second at 80-90% GPU
// utilization; the whole-run verdict was data_bound_io ("waits 77% of each step loading data").
TEST(AnalyzeRunH100, ComputeIsGpuBoundInItsSteadyState) {
  LOAD_H100_RUN(r, "run-compute");
  EXPECT_EQ(Class(r.verdict), "gpu_bound") << r.verdict.principal->reason;
  for (const auto& f : r.verdict.secondary) {
    EXPECT_NE(f.cls, FindingClass::kDataBoundIo);
    EXPECT_NE(f.cls, FindingClass::kSmallBatch);
  }
  const RunLife& l = r.life;
  ASSERT_TRUE(l.has_steps);
  EXPECT_NEAR(l.startup_s, 18.0, 0.5);
  EXPECT_TRUE(l.mostly_startup);
  EXPECT_FALSE(l.sure) << "about 1 s of steady steps";
  EXPECT_GE(l.steady_steps, 140);
  const LifePart* batch = Part(l.startup, LifePartKind::kFirstBatch);
  ASSERT_NE(batch, nullptr);
  EXPECT_NEAR(batch->seconds, 5.6, 0.1);
  EXPECT_EQ(batch->count, 4) << "four DataLoader workers started";
  const LifePart* torch = Part(l.startup, LifePartKind::kImportTorch);
  ASSERT_NE(torch, nullptr);
  EXPECT_NEAR(torch->seconds, 3.9, 0.1);
  // The steady state's own numbers: ~146 steps/s, a data_loading that is no bottleneck, and the
  // GPU's sub-second samples of those steps (the recording shows 78-89% while it trained).
  ASSERT_EQ(r.phases.ranks.size(), 1u);
  EXPECT_GT(r.phases.ranks[0].per_second, 120.0);
  for (const auto& p : r.phases.phases) {
    if (p.name == "data_loading") {
      EXPECT_LT(p.share, 0.10);
    }
  }
  ASSERT_EQ(r.machine.gpus.size(), 1u);
  EXPECT_GT(r.machine.gpus[0].util_fine_pct.mean(), 75.0);
  EXPECT_GT(r.machine.gpus[0].util_fine_pct.min(), 50.0) << "no idle start-up sample in it";
}

// `run periodic` (small_batch, "GPU averages 9%", on the whole run): its steady state checkpoints
// inside the steps, and the verdict names it.
TEST(AnalyzeRunH100, PeriodicNamesTheCheckpointing) {
  LOAD_H100_RUN(r, "run-periodic");
  ASSERT_EQ(Class(r.verdict), "periodic_side_work");
  EXPECT_NE(r.verdict.principal->reason.find("checkpoint"), std::string::npos)
      << r.verdict.principal->reason;
  EXPECT_TRUE(r.life.has_steps);
  EXPECT_TRUE(r.life.mostly_startup);
  EXPECT_GT(r.life.startup_s, 9.0);
}

// The two presets that were right stay right.
TEST(AnalyzeRunH100, DataCpuAndLoggingKeepTheirVerdicts) {
  {
    LOAD_H100_RUN(r, "run-data_cpu");
    EXPECT_EQ(Class(r.verdict), "data_bound_cpu");
  }
  {
    const auto dir = testing::H100GpuCheckDir();
    auto run = LoadAndAnalyzeRun((*dir / "run-logging").string());
    ASSERT_TRUE(run.ok());
    EXPECT_EQ(Class(run->analysis.report.verdict), "host_sync_or_logging");
  }
}

// Issue 39: every run of the H100 gpu-check has a ledger that adds up to 1 on every rank and a
// verdict; compute is the GPU's busy time by CUDA events.
TEST(AnalyzeRunH100, EveryRunHasALedgerThatAddsUpAndAVerdict) {
  const auto dir = testing::H100GpuCheckDir();
  if (!dir) GTEST_SKIP() << "shared/gpu/h100-2026-11-26 is not present";
  for (const char* name : {"run-compute", "run-data_cpu", "run-logging", "run-periodic"}) {
    SCOPED_TRACE(name);
    auto run = LoadAndAnalyzeRun((*dir / name).string());
    ASSERT_TRUE(run.ok()) << run.error().message;
    const RunReport& r = run->analysis.report;
    ASSERT_FALSE(r.ledger.empty());
    auto sum = [](const analysis::StepLedger& l) {
      return std::accumulate(l.parts.begin(), l.parts.end(), 0.0);
    };
    EXPECT_NEAR(sum(r.ledger.job), 1.0, 1e-9);
    for (const auto& rank : r.ledger.ranks) EXPECT_NEAR(sum(rank), 1.0, 1e-9);
    EXPECT_TRUE(r.ledger.job.compute_on_gpu);
    ASSERT_TRUE(r.verdict.principal.has_value());
  }
  auto compute = LoadAndAnalyzeRun((*dir / "run-compute").string());
  ASSERT_TRUE(compute.ok());
  const analysis::StepLedger& j = compute->analysis.report.ledger.job;
  // The events: backward 61.6%, forward 28.9%, optimizer 2.0% of the step on the GPU.
  ASSERT_TRUE(j.gpu_busy);
  EXPECT_NEAR(*j.gpu_busy, 0.925, 0.005);
  EXPECT_NEAR(j.Share(analysis::LedgerPart::kCompute), *j.gpu_busy, 1e-9);
  EXPECT_NEAR(j.host_wait, 0.229, 0.005) << "other and data_loading were the GPU working";
}

// ---------------------------------------------------------------------------------------------
// Issue 39, no cliffs: a measured share moved by 3 points keeps the principal class, unless the
// move makes another class's share the principal one; then both verdicts name both classes.
// ---------------------------------------------------------------------------------------------

/// `report` with `phase`'s share (host, and GPU where timed) moved by `delta` on every rank, the
/// rank's other phases scaled so its shares add up as before.
RunReport Moved(const RunReport& report, const std::string& phase, double delta) {
  RunReport r = report;
  for (const analysis::RankSteps& rank : r.phases.ranks) {
    double old_share = 0;
    for (const auto& p : r.phases.phases) {
      if (p.rank == rank.rank && p.name == phase) old_share = p.share;
    }
    const double new_share = std::clamp(old_share + delta, 0.0, 1.0);
    const double scale = old_share < 1.0 ? (1.0 - new_share) / (1.0 - old_share) : 1.0;
    for (auto& p : r.phases.phases) {
      if (p.rank != rank.rank) continue;
      const double to = p.name == phase ? new_share : p.share * scale;
      if (p.gpu) p.gpu->share = std::max(0.0, p.gpu->share + (to - p.share));
      p.share = to;
      p.total_s = to * rank.duration_s;
    }
  }
  return r;
}

std::set<std::string> Named(const Verdict& v) {
  std::set<std::string> out;
  for (const Finding& f : v.secondary) out.insert(std::string(FindingClassName(f.cls)));
  return out;
}

/// Every phase of `data`'s run moved by ±3 points: the property above.
void ExpectNoCliff(const rundir::RunData& data, const RunReport& report) {
  const Verdict base = Diagnose(BuildRunFacts(data, report));
  ASSERT_TRUE(base.principal.has_value());
  const std::string cls = Class(base);
  std::set<std::string> phases;
  for (const auto& p : report.phases.phases) phases.insert(p.name);
  for (const std::string& phase : phases) {
    for (double delta : {-0.03, 0.03}) {
      SCOPED_TRACE(phase + (delta > 0 ? " +3 points" : " -3 points"));
      const Verdict moved = Diagnose(BuildRunFacts(data, Moved(report, phase, delta)));
      ASSERT_TRUE(moved.principal.has_value()) << "none with steady steps";
      const std::string now = Class(moved);
      if (now == cls) continue;
      EXPECT_TRUE(Named(moved).count(cls)) << cls << " → " << now << ": " << cls << " not named";
      EXPECT_TRUE(Named(base).count(now)) << cls << " → " << now << ": " << now << " was not named";
    }
  }
}

TEST(VerdictNoCliff, EveryRecordedRunKeepsItsClassWhenASharesMovesThreePoints) {
  const fs::path runs = fs::path(STALLSCOPE_SOURCE_DIR) / "tests/data/runs";
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(runs)) dirs.push_back(e.path());
  if (const auto h100 = testing::H100GpuCheckDir()) {
    for (const char* name : {"run-compute", "run-data_cpu", "run-logging", "run-periodic"})
      dirs.push_back(*h100 / name);
  }
  std::sort(dirs.begin(), dirs.end());
  ASSERT_GE(dirs.size(), 10u);
  for (const fs::path& dir : dirs) {
    SCOPED_TRACE(dir.filename().string());
    auto run = LoadAndAnalyzeRun(dir.string());
    ASSERT_TRUE(run.ok()) << run.error().message;
    ExpectNoCliff(run->data, run->analysis.report);
  }
}

// The same property on synthetic CPU-only runs over a grid of data, compute and host-work shares
// (5-point steps), each share moved by ±3 points: every run gets a verdict, and a class changes
// only where both verdicts name both.
TEST(VerdictNoCliff, SyntheticShareGrid) {
  using verdict_testing::FakeRun;
  using verdict_testing::MakeRank;
  using verdict_testing::Steady;
  int changed = 0, runs = 0;
  for (int d = 0; d <= 100; d += 5) {
    for (int o = 0; d + o <= 100; o += 5) {
      const double data = d / 100.0, other = o / 100.0, compute = 1.0 - data - other;
      FakeRun run;
      run.Cpus(2)
          .Steps({MakeRank(0, FakeRun::kMainPid,
                           Steady(40, {{"data_loading", 0.1 * data + 1e-6},
                                       {"forward_pass", 0.04 * compute + 1e-6},
                                       {"backward_pass", 0.06 * compute + 1e-6},
                                       {"other", 0.1 * other + 1e-6}}),
                           {{"host_sync.item", 2}})})
          .Main(100, 1);
      run.Loader(0);
      run.report().machine = analysis::Summarize(run.data().recording);
      run.data().info = rundir::DecodeInfoRecords(run.data().events);
      SCOPED_TRACE(fmt::format("data {}% other {}%", d, o));
      ++runs;
      const std::string before = Class(run.Diagnose());
      ExpectNoCliff(run.data(), run.report());
      for (double delta : {-0.03, 0.03}) {
        const Verdict v =
            Diagnose(BuildRunFacts(run.data(), Moved(run.report(), "data_loading", delta)));
        changed += Class(v) != before;
      }
    }
  }
  EXPECT_EQ(runs, 231);
  EXPECT_GT(changed, 0) << "the grid crosses from compute to data somewhere";
}

// One entry point: the facts AnalyzeRun hands out are the ones its verdict was made of.
TEST(AnalyzeRun, TheFactsAreTheVerdicts) {
  const fs::path dir = fs::path(STALLSCOPE_SOURCE_DIR) / "tests/data/runs/data_cpu";
  auto run = LoadAndAnalyzeRun(dir.string());
  ASSERT_TRUE(run.ok()) << run.error().message;
  const RunAnalysis& a = run->analysis;
  EXPECT_EQ(a.facts.steps, a.report.phases.ranks.at(0).count);
  EXPECT_NEAR(a.facts.Share("data_loading"), a.report.phases.phases.at(0).share, 1e-12);
  EXPECT_TRUE(a.report.life.has_steps);
  EXPECT_FALSE(LoadAndAnalyzeRun("/nonexistent/run").ok());
}

}  // namespace
}  // namespace stallscope::diagnose
