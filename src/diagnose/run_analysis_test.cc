#include "diagnose/run_analysis.h"

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "gpu_check_fixture.h"

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
