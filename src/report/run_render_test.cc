// Golden tests: fixed run directories (tests/data/runs/, recorded with `stallscope run` on the
// example workloads and on the fake NVML) → the full report.txt and report.json, verdict included.

#include "report/run_render.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/units.h"

#include "diagnose/run_analysis.h"
#include "diagnose/verdict.h"
#include "golden.h"
#include "terminal_safe.h"

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
  auto data = rundir::LoadRun(dir);
  ASSERT_TRUE(data.ok()) << data.error().message;
  auto report = diagnose::AnalyzeRun(*data).report;
  // The checkout's path is not part of the report's content.
  testing::ExpectGolden("run_" + name + ".txt",
                        ReplaceAll(RenderRunReportText(report), dir, "RUN_DIR"));
  testing::ExpectGolden("run_" + name + ".json",
                        ReplaceAll(RenderRunReportJson(report), dir, "RUN_DIR"));
}

TEST(RunReportGolden, DataBoundCpuRun) { ExpectRunGolden("data_cpu"); }
TEST(RunReportGolden, ThrottledGpuRun) { ExpectRunGolden("gpu_throttled"); }

TEST(RunReportGolden, NotARunDirectoryIsAOneLineError) {
  auto data = rundir::LoadRun(std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/golden");
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.error().message.find("not a stallscope run directory"), std::string::npos);
  EXPECT_EQ(data.error().message.find('\n'), std::string::npos);
}

// Issue 12, finding 6: every string that came from the job (command line, phase and counter
// names, process command lines, Python notes, warnings and the verdict that quotes them) is shown
// escaped, and the process table's COMMAND column keeps its width.
TEST(RunRender, ControlCharactersFromTheJobAreEscaped) {
  const std::string dir = std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/runs/data_cpu";
  auto data = rundir::LoadRun(dir);
  ASSERT_TRUE(data.ok()) << data.error().message;
  auto r = diagnose::AnalyzeRun(*data).report;
  const std::string& bad = testing::kHostileName;
  r.meta.name = bad;
  r.meta.command.push_back(bad);
  r.dir = bad;
  ASSERT_FALSE(r.phases.phases.empty());
  r.phases.phases[0].name = bad;
  r.phases.counters_total[bad] = 3;
  ASSERT_FALSE(r.processes.empty());
  r.processes[0].cmdline = bad;
  r.no_phases.push_back(bad);
  r.warnings.push_back(bad);
  r.machine.gpu_note = bad;
  rundir::PythonProcess py;
  py.implementation = "cpython";
  py.executable = bad;
  py.backend_error = bad;
  py.hooks_noted = true;
  py.hooks_error = bad;
  r.python.push_back(py);
  ASSERT_TRUE(r.verdict.principal.has_value());
  r.verdict.principal->reason = bad;
  r.verdict.principal->evidence.front().text = bad;
  r.verdict.principal->recommendations.front().text = bad;
  r.verdict.compute_time_note = bad;

  const std::string text = RenderRunReportText(r);
  EXPECT_EQ(testing::RawControlBytes(text), "");
  EXPECT_NE(text.find(testing::kHostileEscaped), std::string::npos) << text;
  EXPECT_EQ(text.find("pwned\x07"), std::string::npos) << text;
  // The COMMAND column is cut on the escaped text, so the CPU% column stays where it was.
  const std::string row =
      fmt::format("{:>7}  main               {} {:>6.1f}", r.processes[0].pid,
                  Elide(std::string(testing::kHostileEscaped), 26), r.processes[0].cpu_mean_pct);
  EXPECT_NE(text.find(row), std::string::npos) << text;
  EXPECT_EQ(testing::RawControlBytes(RenderRunReportJson(r)), "");
}

// Issue 27 B08: phases of a rank's side processes (forked children, a daemon) were analysed and
// then dropped. They are shown apart, under their pid, and in --json "phases" marked as theirs;
// the rank's own phases are unchanged.
TEST(RunRender, SideProcessPhasesAreShownApartUnderTheirPid) {
  const std::string dir = std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/runs/data_cpu";
  auto data = rundir::LoadRun(dir);
  ASSERT_TRUE(data.ok()) << data.error().message;
  auto r = diagnose::AnalyzeRun(*data).report;
  const std::string text_before = RenderRunReportText(r);
  const size_t main_phases = r.phases.phases.size();
  analysis::ProcessPhases side;
  side.pid = 4242;
  side.rank = 0;
  analysis::PhaseStats child;
  child.name = "child_work";
  child.count = 40;
  child.total_s = 1.2;
  child.share = 0.98;
  child.mean_s = 0.03;
  child.max_s = 0.04;
  side.phases.push_back(child);
  r.phases.other_processes.push_back(side);

  const std::string text = RenderRunReportText(r);
  EXPECT_NE(text.find("Phases (pid 4242)"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0: a side process"), std::string::npos) << text;
  EXPECT_NE(text.find("  child_work              40    1.20 s  98.0%   30.0 ms   40.0 ms"),
            std::string::npos)
      << text;
  auto json = nlohmann::json::parse(RenderRunReportJson(r));
  ASSERT_EQ(json["phases"].size(), main_phases + 1);
  for (size_t i = 0; i < main_phases; ++i) EXPECT_FALSE(json["phases"][i].contains("pid"));
  const auto& last = json["phases"].back();
  EXPECT_EQ(last["name"], "child_work");
  EXPECT_EQ(last["pid"], 4242);
  EXPECT_EQ(last["side_process"], true);
  EXPECT_EQ(last["count"], 40);
  EXPECT_NE(text_before.find("Phases (rank 0)"), std::string::npos);
  EXPECT_EQ(text_before.find("side process"), std::string::npos);
}

}  // namespace
}  // namespace stallscope::report
