#include "rundir/run_follower.h"

#include "phase/event_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "diagnose/suspicion.h"

namespace stallscope::rundir {
namespace {

namespace fs = std::filesystem;
using phase::RecordKind;

constexpr int64_t kS = 1'000'000'000;
const std::string kRuns = std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/runs/";

/// A run directory that a test writes as `stallscope run` would: run.json, events.bin and
/// events.names.jsonl, appended to step by step.
class FakeRun {
 public:
  FakeRun() {
    dir_ = (fs::temp_directory_path() / fmt::format("run_follower_{}_{}", getpid(), ++serial_))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    WriteMeta(RunStatus::kRunning);
    std::ofstream(dir_ + "/events.bin", std::ios::binary).write("STLSEVT1\1\0\0\0\x20\0\0\0", 16);
    std::ofstream(dir_ + "/events.names.jsonl")
        << R"({"type":"name","pid":7,"id":1,"name":"data_loading"})"
           "\n"
        << R"({"type":"name","pid":7,"id":2,"name":"forward_pass"})"
           "\n";
  }
  ~FakeRun() { fs::remove_all(dir_); }

  void WriteMeta(RunStatus status) {
    RunMeta meta;
    meta.pid = getpid();  // alive while the test runs
    meta.status = status;
    if (status != RunStatus::kRunning) meta.exit_code = 0;
    ASSERT_TRUE(WriteRunMeta(RunPaths{dir_}, meta).ok());
  }
  /// One step of process 7 at `t_ns`: data_loading for `data_ns`, then forward_pass for
  /// `fwd_ns`, then the step record.
  void Step(int64_t t_ns, int64_t data_ns, int64_t fwd_ns) {
    Add(t_ns, RecordKind::kBegin, 1);
    Add(t_ns + data_ns, RecordKind::kEnd, 1);
    Add(t_ns + data_ns, RecordKind::kBegin, 2);
    Add(t_ns + data_ns + fwd_ns, RecordKind::kEnd, 2);
    Add(t_ns + data_ns + fwd_ns, RecordKind::kStep, 0, ++steps_);
  }
  const std::string& dir() const { return dir_; }

 private:
  void Add(int64_t ts, RecordKind kind, uint16_t id, int64_t arg = 0) {
    phase::LoggedEvent e;
    e.ts_ns = ts;
    e.arg = arg;
    e.pid = 7;
    e.tid = 7;
    e.phase_id = id;
    e.kind = kind;
    std::ofstream(dir_ + "/events.bin", std::ios::binary | std::ios::app)
        .write(reinterpret_cast<const char*>(&e), sizeof(e));
  }
  static inline int serial_ = 0;
  std::string dir_;
  int64_t steps_ = 0;
};

TEST(RunFollower, NotARunDirectoryIsAnErrorNamingIt) {
  auto f = RunFollower::Open(kRuns);  // the folder of the fixtures: no run.json
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("not a stallscope run directory"), std::string::npos);
  EXPECT_NE(f.error().message.find(kRuns), std::string::npos);
}

// Issue 27 B14: `top --run` on a run directory whose events.bin and events.names.jsonl are
// FIFOs: neither is opened for a read that waits for a writer (it hung here for good), and the
// poll says nothing rather than blocking.
TEST(RunFollower, FifosInTheRunDirectoryAreNeverWaitedOn) {
  FakeRun run;
  for (const char* name : {"/events.bin", "/events.names.jsonl"}) {
    fs::remove(run.dir() + name);
    ASSERT_EQ(mkfifo((run.dir() + name).c_str(), 0600), 0);
  }
  auto f = RunFollower::Open(run.dir());
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_FALSE(f->Poll(100 * kS).window);
  EXPECT_FALSE(f->Poll(101 * kS).window);
}

TEST(RunFollower, FinishedRunShowsItsLastNumbers) {
  for (const char* name : {"data_cpu", "gpu_throttled"}) {
    SCOPED_TRACE(name);
    auto f = RunFollower::Open(kRuns + name);
    ASSERT_TRUE(f.ok()) << f.error().message;
    const RunFollowStatus& s = f->Poll(123 * kS);
    EXPECT_EQ(s.state, RunState::kFinished);
    EXPECT_EQ(s.note.rfind("finished: exited", 0), 0u) << s.note;
    ASSERT_TRUE(s.window);
    EXPECT_GT(s.window->steps, 0u);
    EXPECT_GT(s.window->steps_per_s, 0);
    ASSERT_FALSE(s.window->phases.empty());
    EXPECT_GT(s.window->covered_share, 0);
    // Later polls change nothing: the run is over.
    const double rate = s.window->steps_per_s;
    EXPECT_EQ(f->Poll(200 * kS).window->steps_per_s, rate);
  }
}

TEST(RunFollower, DataBoundFixtureIsSuspectedOfTheInputPipeline) {
  auto f = RunFollower::Open(kRuns + "data_cpu");
  ASSERT_TRUE(f.ok());
  const RunFollowStatus& s = f->Poll(0);
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->phases.front().name, "data_loading");
  ASSERT_TRUE(s.window.has_value());
  EXPECT_EQ(diagnose::Suspect(*s.window), diagnose::Suspicion::kInputPipeline);
}

TEST(RunFollower, LiveRunWindowFollowsAppendedRecords) {
  FakeRun run;
  auto f = RunFollower::Open(run.dir());
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->Poll(100 * kS).window);  // nothing yet
  EXPECT_EQ(f->status().state, RunState::kRunning);
  // 1 s of 4 steps: 150 ms data, 100 ms forward each.
  for (int i = 0; i < 4; ++i) run.Step(100 * kS + i * kS / 4, kS * 15 / 100, kS / 10);
  const RunFollowStatus& s = f->Poll(101 * kS);
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->steps, 4u);
  EXPECT_DOUBLE_EQ(s.window->steps_per_s, 4.0);
  ASSERT_EQ(s.window->phases.size(), 2u);
  EXPECT_EQ(s.window->phases[0].name, "data_loading");
  EXPECT_NEAR(s.window->data_share, 0.6, 1e-9);
  // Four steps are its warm-up as far as anyone can tell yet (analysis/life.h): no hint.
  EXPECT_EQ(s.window->stage, analysis::RunStage::kWarmup);
  ASSERT_TRUE(s.window.has_value());
  EXPECT_EQ(diagnose::Suspect(*s.window), diagnose::Suspicion::kWarmingUp);
  EXPECT_EQ(s.note, "");
  for (int i = 4; i < 8; ++i) run.Step(100 * kS + i * kS / 4, kS * 15 / 100, kS / 10);
  const RunFollowStatus& later = f->Poll(102 * kS);
  ASSERT_TRUE(later.window);
  EXPECT_EQ(later.window->stage, analysis::RunStage::kSteady);
  ASSERT_TRUE(later.window.has_value());
  EXPECT_EQ(diagnose::Suspect(*later.window), diagnose::Suspicion::kInputPipeline);
}

TEST(RunFollower, WindowIsTheLastFiveSeconds) {
  FakeRun run;
  auto f = RunFollower::Open(run.dir());
  ASSERT_TRUE(f.ok());
  f->Poll(0);
  for (int sec = 0; sec < 10; ++sec) {
    // 10 steps a second for 5 s, then 2 a second.
    const int steps = sec < 5 ? 10 : 2;
    for (int i = 0; i < steps; ++i) run.Step(sec * kS + i * kS / steps, kS / 100, kS / 100);
    f->Poll((sec + 1) * kS);
  }
  ASSERT_TRUE(f->status().window);
  EXPECT_DOUBLE_EQ(f->status().window->steps_per_s, 2.0);
  EXPECT_DOUBLE_EQ(f->status().window->window_s, 5.0);
  // No step for 5 s: nothing to show, and it says why.
  for (int sec = 10; sec < 16; ++sec) f->Poll((sec + 1) * kS);
  EXPECT_FALSE(f->status().window);
  EXPECT_EQ(f->status().note, "no step in the last 5 s");
}

TEST(RunFollower, StartUpBeforeTheFirstRecordIsNotCounted) {
  FakeRun run;
  auto f = RunFollower::Open(run.dir());
  ASSERT_TRUE(f.ok());
  for (int sec = 0; sec < 4; ++sec) f->Poll(sec * kS);  // the job imports torch
  for (int i = 0; i < 4; ++i) run.Step(4 * kS + i * kS / 4, kS / 10, kS / 10);
  ASSERT_TRUE(f->Poll(5 * kS).window);
  EXPECT_DOUBLE_EQ(f->status().window->steps_per_s, 4.0);
}

TEST(RunFollower, RunFinishingKeepsTheLastNumbers) {
  FakeRun run;
  auto f = RunFollower::Open(run.dir());
  ASSERT_TRUE(f.ok());
  f->Poll(0);
  for (int i = 0; i < 3; ++i) run.Step(i * kS / 3, kS / 10, kS / 10);
  f->Poll(kS);
  run.WriteMeta(RunStatus::kExited);
  const RunFollowStatus& s = f->Poll(2 * kS);
  EXPECT_EQ(s.state, RunState::kFinished);
  EXPECT_EQ(s.note, "finished: exited, exit 0");
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->steps, 3u);
}

TEST(RunFollower, RemovedDirectoryKeepsTheLastNumbers) {
  auto run = std::make_unique<FakeRun>();
  auto f = RunFollower::Open(run->dir());
  ASSERT_TRUE(f.ok());
  f->Poll(0);
  run->Step(0, kS / 10, kS / 10);
  f->Poll(kS);
  run.reset();  // removes the directory
  const RunFollowStatus& s = f->Poll(2 * kS);
  EXPECT_EQ(s.state, RunState::kRemoved);
  EXPECT_EQ(s.note, "run directory removed");
  ASSERT_TRUE(s.window);
  EXPECT_EQ(s.window->steps, 1u);
}

TEST(RunFollower, TornRecordAndUnfinishedNameLineWaitForTheRest) {
  FakeRun run;
  std::ofstream(run.dir() + "/events.names.jsonl", std::ios::app)
      << R"({"type":"name","pid":7,"id":3,"na)";  // torn: no newline yet
  std::ofstream(run.dir() + "/events.bin", std::ios::binary | std::ios::app).write("\1\2\3", 3);
  auto f = RunFollower::Open(run.dir());
  ASSERT_TRUE(f.ok());
  f->Poll(0);
  EXPECT_FALSE(f->status().window);
  EXPECT_EQ(f->status().state, RunState::kRunning);
}

}  // namespace
}  // namespace stallscope::rundir
