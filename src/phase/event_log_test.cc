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

class ReadEventLogTest : public ::testing::Test {
 protected:
  /// One training iteration: a phase, then a step boundary (3 records).
  void Iteration(uint16_t id) {
    job_.writer.Begin(id);
    clock_.Advance(10);
    job_.writer.End(id);
    job_.writer.Step();
  }

  EventLog Read() {
    auto log = ReadEventLog(dir_.path().string());
    EXPECT_TRUE(log.ok()) << log.error().message;
    return log.ok() ? std::move(log).value() : EventLog{};
  }

  TempDir dir_;
  FakeClock clock_{1'000};
  Job job_{dir_.path().string(), clock_};
  const uint16_t fwd_ = job_.writer.NameId("forward_pass");
};

// Issue 12, finding 7: a monitor killed mid-run left 41 of 100 steps in events.bin although the
// rings held them all. The rest is read from the rings, once each, with a warning.
TEST_F(ReadEventLogTest, ReadsWhatTheMonitorHadNotSavedFromTheRings) {
  for (int i = 0; i < 41; ++i) Iteration(fwd_);
  job_.Drain();  // then the monitor is killed; the job goes on
  const uint16_t late = job_.writer.NameId("checkpointing");  // a name it never saw
  for (int i = 41; i < 100; ++i) Iteration(i % 20 == 0 ? late : fwd_);

  EventLog log = Read();
  EXPECT_EQ(CountSteps(log), 100);
  EXPECT_EQ(log.events.size(), 300u);
  EXPECT_EQ(log.lost_records, 0u);
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_NE(log.warnings[0].find("177 records the monitor had not saved"), std::string::npos)
      << log.warnings[0];
  int checkpoints = 0;
  for (const LoggedEvent& e : log.events)
    checkpoints += e.kind == RecordKind::kBegin && log.NameOf(e) == "checkpointing";
  EXPECT_EQ(checkpoints, 2);  // iterations 60 and 80, after the monitor stopped
}

// Killed before its first drain (the job was still importing torch): events.bin holds its
// header only, and every record of the rings is one the monitor had not saved.
TEST_F(ReadEventLogTest, AMonitorKilledBeforeItsFirstDrainIsSaidToo) {
  for (int i = 0; i < 10; ++i) Iteration(fwd_);
  EventLog log = Read();
  EXPECT_EQ(CountSteps(log), 10);
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_NE(log.warnings[0].find("30 records the monitor had not saved"), std::string::npos)
      << log.warnings[0];
  EXPECT_EQ(log.NameOf(log.events.front()), "forward_pass");
}

// After a clean end the monitor drained everything: nothing is added, nothing is said.
TEST_F(ReadEventLogTest, AFinishedRunReadsEventsBinAlone) {
  for (int i = 0; i < 10; ++i) Iteration(fwd_);
  job_.Drain();
  EventLog log = Read();
  EXPECT_EQ(CountSteps(log), 10);
  EXPECT_EQ(log.events.size(), 30u);
  EXPECT_TRUE(log.warnings.empty()) << log.warnings[0];
}

// The ring lapped after the monitor stopped: what was overwritten is counted as lost.
TEST_F(ReadEventLogTest, ATailOverwrittenInTheRingIsCountedLost) {
  job_.writer.Begin(fwd_);
  job_.Drain();                                       // 1 record saved
  for (int i = 0; i < 1500; ++i) job_.writer.Step();  // 1,500 more in a 1,024-slot ring
  EventLog log = Read();
  EXPECT_EQ(log.events.size(), 1u + 1024u);
  EXPECT_EQ(log.lost_records, 1500u - 1024u);
}

}  // namespace
}  // namespace stallscope::phase
