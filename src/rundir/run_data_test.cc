#include "rundir/run_data.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "temp_dir.h"

namespace stallscope::rundir {
namespace {

namespace fs = std::filesystem;

const fs::path kDataCpuRun = fs::path(STALLSCOPE_SOURCE_DIR) / "tests/data/runs/data_cpu";

bool AnyWarningHas(const RunData& d, const std::string& text) {
  for (const auto& w : d.warnings) {
    if (w.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(LoadRun, ARecordedRunHasItsMetaSamplesEventsAndInterpreters) {
  auto d = LoadRun(kDataCpuRun.string() + "/");
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->paths.dir, kDataCpuRun.string());  // trailing '/' dropped
  EXPECT_FALSE(d->meta.command.empty());
  EXPECT_FALSE(d->recording.samples.empty());
  EXPECT_FALSE(d->events.events.empty());
  EXPECT_EQ(d->implausible_events, 0);
}

TEST(LoadRun, NotARunDirectoryIsOneLineNamingIt) {
  testing::TempDir dir("not_a_run");
  auto missing = LoadRun((dir.path() / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("no such run directory"), std::string::npos);
  auto empty = LoadRun(dir.path().string());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find(dir.path().string()), std::string::npos)
      << empty.error().message;
  EXPECT_EQ(empty.error().message.find('\n'), std::string::npos);
}

TEST(LoadRun, MissingRecordingAndEventsAreWarningsNotFailures) {
  testing::TempDir dir("bare_run");
  const fs::path run = dir.path() / "run";
  fs::create_directories(run);
  fs::copy_file(kDataCpuRun / "run.json", run / "run.json");
  auto d = LoadRun(run.string());
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_TRUE(d->recording.samples.empty());
  EXPECT_TRUE(d->events.events.empty());
  EXPECT_FALSE(d->warnings.empty());
}

TEST(LoadRun, MalformedPythonNotesAreCountedInTheWarnings) {
  testing::TempDir dir("bad_notes");
  const fs::path run = dir.path() / "run";
  fs::copy(kDataCpuRun, run, fs::copy_options::recursive);
  std::ofstream(run / kPythonNotesFile, std::ios::app) << "{not json\n";
  auto d = LoadRun(run.string());
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_TRUE(AnyWarningHas(*d, "1 malformed line(s) skipped"));
}

}  // namespace
}  // namespace stallscope::rundir
