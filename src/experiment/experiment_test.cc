#include "experiment/experiment.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "diagnose/run_analysis.h"

namespace stallscope::experiment {
namespace {

namespace fs = std::filesystem;

const fs::path kRun = fs::path(STALLSCOPE_SOURCE_DIR) / "tests/data/runs/data_cpu";

rundir::RunData Load() {
  auto data = rundir::LoadRun(kRun.string());
  EXPECT_TRUE(data.ok()) << data.error().message;
  return data.ok() ? std::move(data).value() : rundir::RunData{};
}

RunDigest Digest(const rundir::RunData& data, int64_t skip_through_step = 0) {
  return DigestRun(data, diagnose::AnalyzeRun(data), skip_through_step);
}

TEST(DigestRun, EveryRankWithItsStepsVariationAndPhases) {
  const rundir::RunData data = Load();
  const RunDigest d = Digest(data, 3);
  ASSERT_EQ(d.ranks.size(), 1u);
  const RankDigest& r = d.ranks[0];
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.steps, static_cast<int64_t>(d.step_s.size()));
  ASSERT_FALSE(d.step_s.empty());
  double mean = 0;
  for (double s : d.step_s) mean += s / static_cast<double>(d.step_s.size());
  double var = 0;
  for (double s : d.step_s) var += (s - mean) * (s - mean) / static_cast<double>(d.step_s.size());
  EXPECT_NEAR(r.variation_ratio, std::sqrt(var) / mean, 1e-9);
  EXPECT_GT(r.median_step_s, 0);
  ASSERT_FALSE(r.phases.empty());
  EXPECT_EQ(std::get<0>(r.phases.front()), "data_loading");  // the data-bound run's largest
  for (size_t i = 1; i < r.phases.size(); ++i)
    EXPECT_GE(std::get<2>(r.phases[i - 1]), std::get<2>(r.phases[i]));
  // An ordinary step's loading: the median over the steady steps numbered 4 and on.
  const diagnose::RunReport report = diagnose::BuildRunReport(data);
  std::vector<double> loading;
  for (const auto& step : report.phases.ranks[0].steps) {
    if (step.index <= 3) continue;
    const auto& phase_s = step.phase_s;
    auto it = phase_s.find("data_loading");
    loading.push_back(it == phase_s.end() ? 0 : it->second);
  }
  std::sort(loading.begin(), loading.end());
  ASSERT_EQ(loading.size(), d.step_s.size());
  const size_t n = loading.size();
  const double median =
      n % 2 == 1 ? loading[n / 2] : (loading[n / 2 - 1] + loading[n / 2]) / 2;  // n is even here
  ASSERT_TRUE(r.median_phase_s.contains("data_loading"));
  EXPECT_DOUBLE_EQ(r.median_phase_s.at("data_loading"), median);
  EXPECT_GT(r.median_phase_s.at("data_loading"), 0.5 * r.median_step_s);
}

/// Three GPUs, all busy; `listed` names which list a process of the job (pid 4242), and `other`
/// which list someone else's.
rundir::RunData WithGpus(std::vector<size_t> listed, std::vector<size_t> other) {
  rundir::RunData data = Load();
  data.recording.header.gpus.clear();
  for (uint32_t i = 0; i < 3; ++i) {
    gpu::GpuStatic g;
    g.index = i;
    data.recording.header.gpus.push_back(g);
  }
  auto process = [](uint32_t pid) {
    gpu::GpuProcess p;
    p.pid = pid;
    return p;
  };
  for (auto& s : data.recording.samples) {
    s.has_processes = true;
    s.processes.resize(1);
    s.processes[0].pid = 4242;
    s.gpus.assign(3, {});
    for (uint32_t i = 0; i < 3; ++i) s.gpus[i].util_gpu_pct = 20 + 30 * i;
    for (size_t g : listed) s.gpus[g].processes.push_back(process(4242));
    for (size_t g : other) s.gpus[g].processes.push_back(process(777));
  }
  return data;
}

TEST(DigestRun, TheJobsGpusAreThoseThatListItsProcesses) {
  ASSERT_FALSE(Load().recording.samples.empty());
  RunDigest d = Digest(WithGpus({1}, {2}));
  ASSERT_EQ(d.job_gpus.size(), 1u);
  EXPECT_EQ(d.job_gpus[0].index, 1u);
  EXPECT_NEAR(d.job_gpus[0].util_pct, 50, 1e-9);
  // PIDs of another namespace: the GPUs that list any process.
  d = Digest(WithGpus({}, {0, 2}));
  ASSERT_EQ(d.job_gpus.size(), 2u);
  EXPECT_EQ(d.job_gpus[1].index, 2u);
  // No process lists at all: the busy GPUs (here all three).
  EXPECT_EQ(Digest(WithGpus({}, {})).job_gpus.size(), 3u);
}

}  // namespace
}  // namespace stallscope::experiment
