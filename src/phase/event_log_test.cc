#include "phase/event_log.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/file_read.h"
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

/// The first warning containing `text`, or "" (a test failure names what was said instead).
std::string WarningWith(const EventLog& log, std::string_view text) {
  for (const std::string& w : log.warnings) {
    if (w.find(text) != std::string::npos) return w;
  }
  ADD_FAILURE() << "no warning contains \"" << text << "\"; got "
                << ::testing::PrintToString(log.warnings);
  return "";
}

void WriteLogFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Issue 27 B09: without events.names.jsonl (or with it empty, garbage or a FIFO) every phase
// became unnamed_<id> and the verdict changed, while the ring still held its name table. The
// ring names them now, and a warning names the file and what was wrong with it.
TEST_F(ReadEventLogTest, DamagedNamesFileNamesComeFromTheRings) {
  for (int i = 0; i < 5; ++i) Iteration(fwd_);
  job_.Drain();
  const std::string names = dir_.Sub("events.names.jsonl");
  struct Case {
    const char* name;
    std::function<void()> damage;
    const char* said;
  };
  const std::vector<Case> cases = {
      {"missing", [&] { std::filesystem::remove(names); }, "missing"},
      {"empty", [&] { WriteLogFile(names, ""); }, "empty"},
      {"garbage",
       [&] { WriteLogFile(names, "\x93\xff garbage\n{\"type\":\"name\",\"pid\":\"x\"}\n"); },
       "no valid line in 2 lines"},
      {"fifo",
       [&] {
         std::filesystem::remove(names);
         ASSERT_EQ(mkfifo(names.c_str(), 0644), 0);
       },
       "not a regular file (a FIFO)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::filesystem::remove(names);
    c.damage();
    EventLog log = Read();
    ASSERT_EQ(log.events.size(), 15u);
    for (const LoggedEvent& e : log.events) {
      if (e.kind == RecordKind::kBegin) {
        EXPECT_EQ(log.NameOf(e), "forward_pass");
      }
    }
    const std::string w = WarningWith(log, "read from the rings in phases/");
    EXPECT_EQ(w.rfind(names + ": " + c.said, 0), 0u) << w;
  }
}

// Where no ring is left either, the phase is really unknown: said, naming the names file.
TEST_F(ReadEventLogTest, APhaseNamedNowhereIsSaid) {
  for (int i = 0; i < 5; ++i) Iteration(fwd_);
  job_.Drain();
  std::filesystem::remove(dir_.Sub("events.names.jsonl"));
  std::filesystem::remove(job_.writer.ring_path());
  EventLog log = Read();
  EXPECT_EQ(log.events.size(), 15u);
  EXPECT_EQ(WarningWith(log, "unnamed_<id>"),
            dir_.Sub("events.names.jsonl") +
                ": missing; 1 phase id of 1 process named neither there nor in a ring in "
                "phases/: shown as unnamed_<id>");
}

// Issue 27 B10: an events.bin of random bytes (or one that cannot be read) hid the rings: the
// phases were lost and the verdict stayed confident. The rings are read instead, and the damage
// is kept for the verdict's caveat.
TEST_F(ReadEventLogTest, DamagedEventsBinFallsBackToTheRings) {
  for (int i = 0; i < 5; ++i) Iteration(fwd_);
  job_.Drain();
  const std::string bin = dir_.Sub("events.bin");
  std::string random(4096, '\0');
  for (size_t i = 0; i < random.size(); ++i) random[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::string other_size = "STLSEVT1";
  other_size += std::string("\x01\0\0\0\x28\0\0\0", 8) + std::string(80, '\0');
  struct Case {
    const char* name;
    std::function<void()> damage;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"random bytes", [&] { WriteLogFile(bin, random); }, "not a stallscope event log"},
      {"another record size", [&] { WriteLogFile(bin, other_size); },
       "record size 40 (expected 32)"},
      {"fifo", [&] { ASSERT_EQ(mkfifo(bin.c_str(), 0644), 0); }, "not a regular file (a FIFO)"},
      {"directory", [&] { std::filesystem::create_directory(bin); },
       "not a regular file (a directory)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::filesystem::remove_all(bin);
    c.damage();
    EventLog log = Read();
    EXPECT_EQ(CountSteps(log), 5);
    EXPECT_EQ(log.events.size(), 15u);
    EXPECT_EQ(log.NameOf(log.events.front()), "forward_pass");
    EXPECT_NE(log.events_bin_damage.find(c.reason), std::string::npos) << log.events_bin_damage;
    EXPECT_EQ(WarningWith(log, "instead"),
              bin + ": " + log.events_bin_damage +
                  "; the phases were read from the rings in phases/ instead");
  }
}

// Issue 27 B16: a 50 MB line in a meta file cost ~4x its size. Lines over the cap are skipped
// unread and counted; the lines around them are kept.
TEST_F(ReadEventLogTest, OverlongMetaAndNamesLinesAreSkippedAndCounted) {
  ASSERT_TRUE(job_.writer.Info("dataloader", R"({"num_workers":2})").ok());
  Iteration(fwd_);
  job_.Drain();
  const std::string meta =
      job_.writer.ring_path().substr(0, job_.writer.ring_path().size() - 5) + ".meta.jsonl";
  const std::string huge = "{\"pad\":\"" + std::string(kMaxJsonLineBytes, 'x') + "\"}\n";
  {
    std::ofstream(meta, std::ios::app) << huge;
    std::ofstream(dir_.Sub("events.names.jsonl"), std::ios::app) << huge;
  }
  ASSERT_TRUE(job_.writer.Info("dataloader", R"({"num_workers":4})").ok());
  EventLog log = Read();
  ASSERT_EQ(log.meta.size(), 2u);
  EXPECT_EQ(log.meta[1].data_json, R"({"num_workers":4})");
  EXPECT_EQ(WarningWith(log, meta), OverlongLinesWarning(meta, 1));
  EXPECT_EQ(WarningWith(log, "events.names.jsonl"),
            OverlongLinesWarning(dir_.Sub("events.names.jsonl"), 1));
  EXPECT_EQ(log.NameOf(log.events.front()), "forward_pass");
}

// Issue 27 B11: a process that names more than 255 phases has no id for the rest; its ring's
// header counts those events, and the report said nothing. A warning gives the count, the cause
// and the remedy; they are no ring overrun.
TEST_F(ReadEventLogTest, EventsDroppedForAFullNameTableAreSaid) {
  for (int i = 0; i < 300; ++i) {
    const uint16_t id = job_.writer.NameId(fmt::format("name_{}", i));
    job_.writer.Begin(id);
    job_.writer.End(id);
  }
  job_.Drain();
  EventLog log = Read();
  // Ids 1..255 hold the fixture's forward_pass and name_0..name_253: name_254..299 dropped.
  EXPECT_EQ(log.writer_dropped, 2u * 46);
  EXPECT_EQ(log.writer_dropped_pids, std::vector<int32_t>{getpid()});
  EXPECT_EQ(log.lost_records, 0u);
  const std::string w = WarningWith(log, "phase events were dropped");
  EXPECT_NE(w.find("92 phase events"), std::string::npos) << w;
  EXPECT_NE(w.find("name table"), std::string::npos) << w;
  EXPECT_NE(w.find(std::to_string(getpid())), std::string::npos) << w;
  EXPECT_NE(w.find("fixed set of names"), std::string::npos) << w;
}

// Issue 27 B20: a process whose ring could not be created (disk full) leaves a ring_error line
// in its meta file: the log names the process and the cause, and warns with the remedy.
TEST_F(ReadEventLogTest, ARingThatCouldNotBeCreatedIsSaid) {
  Iteration(fwd_);
  job_.Drain();
  {
    std::ofstream(dir_.Sub("phases/77.meta.jsonl"))
        << R"({"ts_ns":5,"pid":77,"rank":1,"kind":"info","name":"ring_error","data":{"error":)"
        << R"("phase ring x: allocate failed: No space left on device","errno":"ENOSPC"}})"
        << "\n";
  }
  EventLog log = Read();
  ASSERT_EQ(log.ring_errors.size(), 1u);
  EXPECT_EQ(log.ring_errors[0],
            "process 77 (rank 1): phase ring x: allocate failed: No space left on device");
  const std::string w = WarningWith(log, "process 77 (rank 1) recorded no phases");
  EXPECT_NE(w.find("the disk is full"), std::string::npos) << w;
  EXPECT_NE(w.find("--out"), std::string::npos) << w;
  EXPECT_EQ(CountSteps(log), 1) << "the other process is read as before";
}

// Issue 27 B08: a process forked without exec says so in its ring; the monitor's process line
// carries it to the report, which never makes such a process its rank's main one.
TEST_F(ReadEventLogTest, AForkedProcessIsKnownAsForked) {
  Iteration(fwd_);
  job_.Drain();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    job_.writer.AfterForkInChild();
    job_.writer.Begin(fwd_);
    job_.writer.End(fwd_);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  auto opened = PhaseReader::Open(fmt::format("{}/{}.ring", dir_.Sub("phases"), child));
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  PhaseReader& forked = *opened;
  ASSERT_EQ(forked.info().forked_from, getpid());
  forked.Drain([&](const PhaseRecord& r) { job_.log.Add(forked, r); });
  ASSERT_TRUE(job_.log.Flush().ok());
  std::stringstream names;
  names << std::ifstream(dir_.Sub("events.names.jsonl")).rdbuf();
  EXPECT_NE(names.str().find(fmt::format(R"("pid":{},)", child)), std::string::npos);
  EXPECT_NE(names.str().find(fmt::format(R"("forked_from":{})", getpid())), std::string::npos)
      << names.str();
  EventLog log = Read();
  bool forked_seen = false;
  for (const EventProcess& p : log.processes) {
    if (p.pid == child) forked_seen = p.forked_from == getpid();
    if (p.pid == getpid()) {
      EXPECT_EQ(p.forked_from, 0);
    }
  }
  EXPECT_TRUE(forked_seen);
}

}  // namespace
}  // namespace stallscope::phase
