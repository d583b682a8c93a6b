#include "diagnose/run_report.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "diagnose/run_analysis.h"
#include "diagnose/verdict.h"
#include "temp_dir.h"

namespace stallscope::diagnose {
namespace {

namespace fs = std::filesystem;

const fs::path kFixture = fs::path(STALLSCOPE_SOURCE_DIR) / "tests/data/runs/data_cpu";

struct Diagnosed {
  rundir::RunData data;
  RunReport report;
};

Diagnosed Load(const fs::path& dir) {
  auto data = rundir::LoadRun(dir.string());
  EXPECT_TRUE(data.ok()) << data.error().message;
  Diagnosed d{data.ok() ? std::move(data).value() : rundir::RunData{}, {}};
  d.report = AnalyzeRun(d.data).report;
  return d;
}

// Issue 12, finding 8: 600 bytes overwritten in the middle of events.bin gave no warning, a
// 0.6 s job with 97.9 s steps and a confident verdict. Records that cannot be the run's are
// skipped with a warning, the steps stay what they were, and no finding is confident.
TEST(LoadRun, CorruptEventsAreSkippedWarnedAndNoVerdictIsConfident) {
  testing::TempDir dir("corrupt_events");
  const fs::path run = dir.path() / "run";
  fs::copy(kFixture, run, fs::copy_options::recursive);
  const Diagnosed clean = Load(run);
  ASSERT_TRUE(clean.report.verdict.principal.has_value());
  ASSERT_GT(clean.report.verdict.principal->confidence, 0.5);
  ASSERT_EQ(clean.data.implausible_events, 0);
  ASSERT_FALSE(clean.report.phases.ranks.empty());
  const double clean_step = clean.report.phases.ranks[0].mean_step_s;

  // A deterministic pseudo-random pattern over 600 bytes from record 100 on.
  std::fstream f(run / "events.bin", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(16 + 32 * 100 + 5);
  uint32_t x = 12345;
  for (int i = 0; i < 600; ++i) {
    x = x * 1103515245u + 12345u;
    f.put(static_cast<char>(x >> 24));
  }
  f.close();

  const Diagnosed bad = Load(run);
  EXPECT_GT(bad.data.implausible_events, 10);
  bool warned = false;
  for (const auto& w : bad.report.warnings) warned |= w.find("may be corrupt") != std::string::npos;
  EXPECT_TRUE(warned);
  ASSERT_FALSE(bad.report.phases.ranks.empty());
  EXPECT_NEAR(bad.report.phases.ranks[0].mean_step_s, clean_step, clean_step * 0.25);
  ASSERT_TRUE(bad.report.verdict.principal.has_value());
  EXPECT_LE(bad.report.verdict.principal->confidence, 0.3);
  auto corrupt = [](const Diagnosed& d) {
    return std::count_if(d.report.verdict.caveats.begin(), d.report.verdict.caveats.end(),
                         [](const std::string& c) {
                           return c.find("corrupt phase records were skipped") != std::string::npos;
                         });
  };
  EXPECT_EQ(corrupt(bad), 1);
  EXPECT_EQ(corrupt(clean), 0);
  for (const Finding& f2 : bad.report.verdict.secondary) EXPECT_LE(f2.confidence, 0.3);
}

}  // namespace
}  // namespace stallscope::diagnose
