// Golden tests of `stallscope trace`'s reports on the checked-in trace fixtures: a real torch 1.13
// CPU trace (legacy profiler), a hand-written Kineto GPU trace and a communication trace.
#include <filesystem>

#include <gtest/gtest.h>

#include "diagnose/trace_report.h"
#include "golden.h"
#include "report/trace_render.h"

namespace stallscope::report {
namespace {

void ExpectTraceGolden(const std::string& fixture, const std::string& golden) {
  // Relative paths: the reports name the file, and the golden files must not depend on where the
  // checkout lives.
  std::filesystem::current_path(STALLSCOPE_SOURCE_DIR);
  auto report = diagnose::AnalyzeTraceFiles({"tests/data/traces/" + fixture}, {}, {}, 1);
  ASSERT_TRUE(report.ok()) << report.error().message;
  testing::ExpectGolden("trace_" + golden + ".txt", RenderTraceText(*report));
  testing::ExpectGolden("trace_" + golden + ".json", RenderTraceJson(*report));
}

TEST(TraceGolden, Torch113CpuTrace) {
  ExpectTraceGolden("steps_torch113_cpu.json", "torch113_cpu");
}
TEST(TraceGolden, KinetoGpuTrace) { ExpectTraceGolden("steps_kineto_gpu.json", "kineto_gpu"); }
TEST(TraceGolden, CommunicationTrace) { ExpectTraceGolden("kernels_comm.json", "kernels_comm"); }

}  // namespace
}  // namespace stallscope::report
