#include "phase/event_log.h"

#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fakes/fake_clock.h"
#include "phase/phase_reader.h"
#include "phase/phase_writer.h"
#include "temp_dir.h"

namespace stallscope::phase {
namespace {

using stallscope::testing::TempDir;

/// A job process's writer in `run_dir`/phases, and the monitor's log of it.
struct Job {
  explicit Job(const std::string& run_dir, FakeClock& clock)
      : writer(Options(run_dir), &clock), log(std::move(EventLogWriter::Open(run_dir)).value()) {}

  static WriterOptions Options(const std::string& run_dir) {
    WriterOptions o;
    o.phases_dir = run_dir + "/phases";
    o.capacity = 1024;
    return o;
  }

  /// The monitor drains everything written so far into events.bin.
  void Drain() {
    if (!reader) reader.emplace(std::move(PhaseReader::Open(writer.ring_path())).value());
    reader->Drain([&](const PhaseRecord& r) { log.Add(*reader, r); }, DrainMode::kLive);
    ASSERT_TRUE(log.Flush().ok());
  }

  PhaseWriter writer;
  EventLogWriter log;
  std::optional<PhaseReader> reader;
};

int CountSteps(const EventLog& log) {
  int steps = 0;
  for (const LoggedEvent& e : log.events) steps += e.kind == RecordKind::kStep;
  return steps;
}

// Issue 12, finding 7: a monitor killed mid-run left 41 of 100 steps in events.bin although the
// rings held them all. The rest is read from the rings, once each, with a warning.
TEST(ReadEventLog, ReadsWhatTheMonitorHadNotSavedFromTheRings) {
  TempDir dir;
  FakeClock clock(1'000);
  Job job(dir.path().string(), clock);
  const uint16_t fwd = job.writer.NameId("forward_pass");
  for (int i = 0; i < 41; ++i) {
    job.writer.Begin(fwd);
    clock.Advance(10);
    job.writer.End(fwd);
    job.writer.Step();
  }
  job.Drain();  // then the monitor is killed; the job goes on
  const uint16_t late = job.writer.NameId("checkpointing");  // a name it never saw
  for (int i = 41; i < 100; ++i) {
    job.writer.Begin(i % 20 == 0 ? late : fwd);
    clock.Advance(10);
    job.writer.End(i % 20 == 0 ? late : fwd);
    job.writer.Step();
  }

  auto log = ReadEventLog(dir.path().string());
  ASSERT_TRUE(log.ok()) << log.error().message;
  EXPECT_EQ(CountSteps(*log), 100);
  EXPECT_EQ(log->events.size(), 300u);
  EXPECT_EQ(log->lost_records, 0u);
  ASSERT_EQ(log->warnings.size(), 1u);
  EXPECT_NE(log->warnings[0].find("177 records the monitor had not saved"), std::string::npos)
      << log->warnings[0];
  int checkpoints = 0;
  for (const LoggedEvent& e : log->events)
    checkpoints += e.kind == RecordKind::kBegin && log->NameOf(e) == "checkpointing";
  EXPECT_EQ(checkpoints, 2);  // iterations 60 and 80, after the monitor stopped
}

// After a clean end the monitor drained everything: nothing is added, nothing is said.
TEST(ReadEventLog, AFinishedRunReadsEventsBinAlone) {
  TempDir dir;
  FakeClock clock(1'000);
  Job job(dir.path().string(), clock);
  const uint16_t fwd = job.writer.NameId("forward_pass");
  for (int i = 0; i < 10; ++i) {
    job.writer.Begin(fwd);
    job.writer.End(fwd);
    job.writer.Step();
  }
  job.Drain();
  auto log = ReadEventLog(dir.path().string());
  ASSERT_TRUE(log.ok()) << log.error().message;
  EXPECT_EQ(CountSteps(*log), 10);
  EXPECT_EQ(log->events.size(), 30u);
  EXPECT_TRUE(log->warnings.empty()) << log->warnings[0];
}

// The ring lapped after the monitor stopped: what was overwritten is counted as lost.
TEST(ReadEventLog, ATailOverwrittenInTheRingIsCountedLost) {
  TempDir dir;
  FakeClock clock(1'000);
  Job job(dir.path().string(), clock);
  const uint16_t fwd = job.writer.NameId("forward_pass");
  job.writer.Begin(fwd);
  job.Drain();                                       // 1 record saved
  for (int i = 0; i < 1500; ++i) job.writer.Step();  // 1,500 more in a 1,024-slot ring
  auto log = ReadEventLog(dir.path().string());
  ASSERT_TRUE(log.ok()) << log.error().message;
  EXPECT_EQ(log->events.size(), 1u + 1024u);
  EXPECT_EQ(log->lost_records, 1500u - 1024u);
}

}  // namespace
}  // namespace stallscope::phase
