// Golden tests: fixed run directories (tests/data/runs/, recorded with `stallscope run` on the
// example workloads and on the fake NVML) → the full report.txt and report.json, verdict included.

#include "report/run_render.h"

#include <gtest/gtest.h>

#include "diagnose/verdict.h"
#include "golden.h"

namespace stallscope::report {
namespace {

std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

void ExpectRunGolden(const std::string& name) {
  std::string dir = std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/runs/" + name;
  auto data = diagnose::LoadRun(dir);
  ASSERT_TRUE(data.ok()) << data.error().message;
  auto report = diagnose::BuildRunReport(*data);
  report.verdict = diagnose::Diagnose(*data, report);
  // The checkout's path is not part of the report's content.
  testing::ExpectGolden("run_" + name + ".txt",
                        ReplaceAll(RenderRunReportText(report), dir, "RUN_DIR"));
  testing::ExpectGolden("run_" + name + ".json",
                        ReplaceAll(RenderRunReportJson(report), dir, "RUN_DIR"));
}

TEST(RunReportGolden, DataBoundCpuRun) { ExpectRunGolden("data_cpu"); }
TEST(RunReportGolden, ThrottledGpuRun) { ExpectRunGolden("gpu_throttled"); }

TEST(RunReportGolden, NotARunDirectoryIsAOneLineError) {
  auto data = diagnose::LoadRun(std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/golden");
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.error().message.find("not a stallscope run directory"), std::string::npos);
  EXPECT_EQ(data.error().message.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace stallscope::report
