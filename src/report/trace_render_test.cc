// Golden tests of `stallscope trace`'s reports on the checked-in trace fixtures: a real torch 1.13
// CPU trace (legacy profiler), a hand-written Kineto GPU trace and a communication trace.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "diagnose/trace_report.h"
#include "golden.h"
#include "report/trace_render.h"
#include "temp_dir.h"
#include "terminal_safe.h"

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

// Issue 12, finding 6: a kernel name or a trace's file name, with terminal escapes
// is shown escaped; the text report holds no control byte but its line ends.
TEST(TraceRender, ControlCharactersInNamesAreEscaped) {
  std::ifstream in(std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/traces/kernels_comm.json");
  std::stringstream buf;
  buf << in.rdbuf();
  std::string trace = buf.str();
  // In JSON the hostile name's bytes are \u escapes; the reader decodes them.
  const std::string json_name = "\\u001b]0;pwned\\u0007 \\u001b[31mred\\rcr\\u0000nul";
  const std::string kernel = "void at::native::vectorized_elementwise_kernel<4>(int)";
  const size_t at = trace.find(kernel);
  ASSERT_NE(at, std::string::npos);
  trace.replace(at, kernel.size(), json_name);
  testing::TempDir dir;
  const auto path = dir.path() / ("rank\x1b[31m\r.json");
  std::ofstream(path, std::ios::binary) << trace;
  auto report = diagnose::AnalyzeTraceFiles({path.string()}, {}, {}, 1);
  ASSERT_TRUE(report.ok()) << report.error().message;
  const std::string text = RenderTraceText(*report);
  EXPECT_EQ(testing::RawControlBytes(text), "");
  EXPECT_NE(text.find(testing::kHostileEscaped), std::string::npos) << text;
  EXPECT_NE(text.find("rank\\x1b[31m\\r.json"), std::string::npos) << text;
  // JSON keeps the name itself, escaped by JSON's rules.
  const std::string json = RenderTraceJson(*report);
  EXPECT_EQ(testing::RawControlBytes(json), "");
  EXPECT_NE(json.find("\\u001b]0;pwned\\u0007"), std::string::npos);
}

}  // namespace
}  // namespace stallscope::report
