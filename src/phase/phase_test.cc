#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fakes/fake_clock.h"
#include "temp_dir.h"

#include "phase/phase_reader.h"
#include "phase/phase_writer.h"

namespace stallscope::phase {
namespace {

namespace fs = std::filesystem;
using stallscope::testing::TempDir;

WriterOptions Options(const TempDir& dir, uint32_t capacity = 1024) {
  WriterOptions options;
  options.phases_dir = dir.Sub("phases");
  options.capacity = capacity;
  options.rank = 3;
  options.world_size = 8;
  return options;
}

std::vector<PhaseRecord> DrainAll(PhaseReader& reader, DrainStats* stats = nullptr,
                                  DrainMode mode = DrainMode::kLive) {
  std::vector<PhaseRecord> records;
  DrainStats got = reader.Drain([&](const PhaseRecord& r) { records.push_back(r); }, mode);
  if (stats != nullptr) *stats = got;
  return records;
}

PhaseReader OpenOrDie(const std::string& path) {
  Result<PhaseReader> reader = PhaseReader::Open(path);
  EXPECT_TRUE(reader.ok()) << (reader.ok() ? "" : reader.error().message);
  return std::move(reader).value();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST(WriterOptionsTest, FromEnv) {
  struct Case {
    std::map<std::string, std::string> env;
    std::string phases_dir;
    int32_t rank;
    int32_t world_size;
    uint32_t capacity = kDefaultCapacity;
  };
  const std::vector<Case> cases = {
      {{}, "", 0, 1},
      {{{"STALLSCOPE_RUN_DIR", "/r"}}, "/r/phases", 0, 1},
      {{{"RANK", "5"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "16"}}, "", 5, 16},
      {{{"LOCAL_RANK", "2"}}, "", 2, 1},
      {{{"RANK", "x"}, {"LOCAL_RANK", "2"}, {"WORLD_SIZE", "0"}}, "", 2, 1},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "4x"}}, "", 0, 1},
      {{{"STALLSCOPE_RING_RECORDS", "5000"}}, "", 0, 1, 5000},
      {{{"STALLSCOPE_RING_RECORDS", "-5"}}, "", 0, 1},
  };
  for (const Case& c : cases) {
    WriterOptions options = WriterOptionsFromEnv([&](const char* name) {
      auto it = c.env.find(name);
      return it == c.env.end() ? std::nullopt : std::optional<std::string>(it->second);
    });
    EXPECT_EQ(options.phases_dir, c.phases_dir);
    EXPECT_EQ(options.rank, c.rank);
    EXPECT_EQ(options.world_size, c.world_size);
    EXPECT_EQ(options.capacity, c.capacity);
  }
}

// STALLSCOPE_RING_RECORDS=4294967295 once mapped 2 GiB in every process of the job: a requested
// capacity is clamped to kMaxCapacity (and raised to kMinCapacity).
TEST(PhaseWriterTest, RingSizeIsBounded) {
  for (const auto& [requested, slots] : {std::pair{UINT32_MAX, kMaxCapacity},
                                         std::pair{5000u, 8192u}, std::pair{1u, kMinCapacity}}) {
    TempDir dir;
    FakeClock clock(1'000);
    PhaseWriter writer(Options(dir, requested), &clock);
    writer.Begin(writer.NameId("forward_pass"));
    std::vector<std::string> rings;
    for (const auto& e : std::filesystem::directory_iterator(dir.Sub("phases")))
      rings.push_back(e.path().string());
    ASSERT_EQ(rings.size(), 1u) << requested;
    EXPECT_EQ(std::filesystem::file_size(rings[0]), RingFileBytes(slots)) << requested;
  }
}

TEST(PhaseWriterTest, GpuSpanCarriesTheHostBeginAndTheGpuTime) {
  TempDir dir;
  FakeClock clock(9'000);
  PhaseWriter writer(Options(dir), &clock);
  const uint16_t fwd = writer.NameId("forward_pass");
  writer.GpuSpan(fwd, 1'234, 56'789);
  PhaseReader reader = OpenOrDie(writer.ring_path());
  DrainStats stats;
  std::vector<PhaseRecord> records = DrainAll(reader, &stats);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(stats.lost(), 0u);
  EXPECT_EQ(records[0].kind, RecordKind::kGpuSpan);
  EXPECT_EQ(records[0].phase_id, fwd);
  EXPECT_EQ(records[0].ts_ns, 1'234) << "the instance's host begin, not the clock";
  EXPECT_EQ(records[0].arg, 56'789);
}

TEST(PhaseWriterTest, RoundTrip) {
  TempDir dir;
  FakeClock clock(5'000);
  PhaseWriter writer(Options(dir), &clock);
  const uint16_t fwd = writer.NameId("forward");
  const uint16_t syncs = writer.NameId("host_syncs");
  EXPECT_EQ(writer.NameId("forward"), fwd);
  EXPECT_TRUE(writer.ring_path().empty()) << "created lazily, not by NameId";
  EXPECT_FALSE(fs::exists(dir.Sub("phases")));

  writer.Begin(fwd);
  clock.Advance(100);
  writer.Counter(syncs, 2);
  writer.End(fwd, 7);
  EXPECT_EQ(writer.Step(), 1);
  ASSERT_TRUE(writer.Mark(writer.NameId("eval_start"), R"({"epoch":3})").ok());
  ASSERT_TRUE(writer.Info("dataloader", R"({"num_workers":4})").ok());

  const std::string path = writer.ring_path();
  EXPECT_EQ(path, fmt::format("{}/{}.ring", dir.Sub("phases"), getpid()));
  PhaseReader reader = OpenOrDie(path);
  EXPECT_EQ(reader.info().pid, getpid());
  EXPECT_EQ(reader.info().rank, 3);
  EXPECT_EQ(reader.info().world_size, 8);
  EXPECT_EQ(reader.info().capacity, 1024u);
  EXPECT_EQ(reader.info().start_monotonic_ns, 5'000);

  DrainStats stats;
  std::vector<PhaseRecord> records = DrainAll(reader, &stats);
  EXPECT_EQ(stats.read, 5u);
  EXPECT_EQ(stats.lost(), 0u);
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(records[0].kind, RecordKind::kBegin);
  EXPECT_EQ(records[0].phase_id, fwd);
  EXPECT_EQ(records[0].ts_ns, 5'000);
  EXPECT_EQ(records[0].tid, static_cast<uint32_t>(gettid()));
  EXPECT_EQ(records[1].kind, RecordKind::kCounter);
  EXPECT_EQ(records[1].arg, 2);
  EXPECT_EQ(records[2].kind, RecordKind::kEnd);
  EXPECT_EQ(records[2].ts_ns, 5'100);
  EXPECT_EQ(records[2].flags, 7);
  EXPECT_EQ(records[3].kind, RecordKind::kStep);
  EXPECT_EQ(records[3].arg, 1);
  EXPECT_EQ(records[4].kind, RecordKind::kMark);
  EXPECT_EQ(records[4].arg, 0) << "serial of the meta line";
  EXPECT_EQ(reader.Name(fwd), "forward");
  EXPECT_EQ(reader.Name(records[4].phase_id), "eval_start");
  EXPECT_EQ(reader.Name(200), "");
  EXPECT_TRUE(DrainAll(reader).empty()) << "cursor moved past everything";

  EXPECT_EQ(writer.meta_path(), fmt::format("{}/{}.meta.jsonl", dir.Sub("phases"), getpid()));
  EXPECT_EQ(ReadFile(writer.meta_path()),
            fmt::format("{{\"ts_ns\":5100,\"pid\":{0},\"rank\":3,\"serial\":0,\"kind\":\"mark\","
                        "\"name\":\"eval_start\",\"data\":{{\"epoch\":3}}}}\n"
                        "{{\"ts_ns\":5100,\"pid\":{0},\"rank\":3,\"serial\":1,\"kind\":\"info\","
                        "\"name\":\"dataloader\",\"data\":{{\"num_workers\":4}}}}\n",
                        getpid()));
}

TEST(PhaseWriterTest, DisabledWithoutDirectory) {
  PhaseWriter writer(WriterOptions{});
  EXPECT_FALSE(writer.enabled());
  writer.Begin(writer.NameId("x"));
  EXPECT_TRUE(writer.Mark(1, "{}").ok());
  EXPECT_TRUE(writer.ring_path().empty());
  ASSERT_TRUE(writer.error().has_value());
  EXPECT_FALSE(writer.Open().ok());
}

TEST(PhaseWriterTest, UnwritableDirectoryTurnsOffWithoutCrash) {
  WriterOptions options;
  options.phases_dir = "/dev/null/phases";
  PhaseWriter writer(options);
  EXPECT_TRUE(writer.enabled());
  writer.Begin(writer.NameId("x"));
  writer.End(writer.NameId("x"));
  EXPECT_FALSE(writer.enabled());
  ASSERT_TRUE(writer.error().has_value());
  EXPECT_NE(writer.error()->message.find("/dev/null/phases"), std::string::npos)
      << writer.error()->message;
}

// Issue 27 B20: a ring that cannot be created (here: a file size limit stands in for a full disk,
// which a test cannot make) turns the writer off and leaves one ring_error info line saying why,
// where the report finds it.
TEST(PhaseWriterTest, ARingThatCannotBeCreatedLeavesARingErrorLine) {
  TempDir dir;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);  // the limit fails the allocation with EFBIG instead
    struct rlimit limit {
      20 * 1024, 20 * 1024  // under the 48 KiB ring, over the note
    };
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(3);
    PhaseWriter writer(Options(dir));
    writer.Step();
    _exit(!writer.enabled() && writer.error().has_value() ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const std::string meta = fmt::format("{}/{}.meta.jsonl", dir.Sub("phases"), child);
  const std::string line = ReadFile(meta);
  EXPECT_NE(line.find(R"("kind":"info","name":"ring_error")"), std::string::npos) << line;
  EXPECT_NE(line.find("allocate failed"), std::string::npos) << line;
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
  bool any_ring = false;
  for (const auto& e : fs::directory_iterator(dir.Sub("phases"))) {
    any_ring = any_ring || e.path().string().find(".ring") != std::string::npos;
  }
  EXPECT_FALSE(any_ring) << "no ring file, not even the temp one, is left";
}

TEST(PhaseWriterTest, NamesTable) {
  TempDir dir;
  PhaseWriter writer(Options(dir));
  const uint16_t before = writer.NameId("before_open");
  writer.Step();  // creates the ring
  const uint16_t after = writer.NameId("after_open");
  // 46 ASCII bytes then a 2-byte character: the cut at 47 bytes must not split it.
  const std::string long_name = std::string(46, 'a') + "\xc3\xa9" + "tail";
  const uint16_t long_id = writer.NameId(long_name);
  PhaseReader reader = OpenOrDie(writer.ring_path());
  EXPECT_EQ(reader.Name(0), "");
  EXPECT_EQ(reader.Name(before), "before_open");
  EXPECT_EQ(reader.Name(after), "after_open");
  EXPECT_EQ(reader.Name(long_id), std::string(46, 'a'));
  EXPECT_EQ(reader.Names().size(), 4u);

  for (int i = 0; i < 300; ++i) writer.NameId(fmt::format("n{}", i));
  EXPECT_EQ(reader.Names().size(), kNameCapacity);
  const uint16_t overflow = writer.NameId("one_too_many");
  EXPECT_EQ(overflow, kNoName);
  writer.Begin(overflow);
  writer.Counter(overflow, 1);
  EXPECT_EQ(reader.writer_dropped(), 2u);
  EXPECT_EQ(reader.Name(255), "n251");
}

TEST(PhaseWriterTest, SecondRingOfTheSamePidGetsASuffix) {
  TempDir dir;
  PhaseWriter first(Options(dir));
  PhaseWriter second(Options(dir));
  first.Step();
  second.Step();
  EXPECT_EQ(first.ring_path(), fmt::format("{}/{}.ring", dir.Sub("phases"), getpid()));
  EXPECT_EQ(second.ring_path(), fmt::format("{}/{}.1.ring", dir.Sub("phases"), getpid()));
  EXPECT_EQ(second.meta_path(), fmt::format("{}/{}.1.meta.jsonl", dir.Sub("phases"), getpid()));
}

TEST(PhaseWriterTest, MultiThreadedWritersNoTornRecords) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100'000;
  TempDir dir;
  PhaseWriter writer(Options(dir, 512 * 1024));
  std::vector<uint16_t> ids;
  for (int t = 0; t < kThreads; ++t) ids.push_back(writer.NameId(fmt::format("t{}", t)));
  ASSERT_TRUE(writer.Open().ok());
  PhaseReader reader = OpenOrDie(writer.ring_path());

  // Each thread counts 0, 1, 2, ... under its own id: any torn or misplaced record breaks
  // the per-thread sequence.
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) writer.Counter(ids[t], i);
    });
  }
  std::map<uint16_t, int64_t> next;
  std::map<uint16_t, uint32_t> tid_of;
  uint64_t bad = 0;
  auto check = [&](const PhaseRecord& r) {
    if (r.kind != RecordKind::kCounter || r.arg != next[r.phase_id]) ++bad;
    next[r.phase_id] = r.arg + 1;
    auto [it, inserted] = tid_of.emplace(r.phase_id, r.tid);
    if (!inserted && it->second != r.tid) ++bad;
  };
  DrainStats total;
  for (bool done = false; !done;) {  // drain live while the threads write
    done = reader.write_index() >= uint64_t{kThreads} * kPerThread;
    total += reader.Drain(check);
  }
  for (auto& thread : threads) thread.join();
  total += reader.Drain(check, DrainMode::kFinal);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(total.read, uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(total.lost(), 0u);
  for (uint16_t id : ids) EXPECT_EQ(next[id], kPerThread);
}

TEST(PhaseReaderTest, LappedReaderCountsLost) {
  TempDir dir;
  PhaseWriter writer(Options(dir, 1024));
  const uint16_t id = writer.NameId("c");
  for (int i = 0; i < 5000; ++i) writer.Counter(id, i);
  PhaseReader reader = OpenOrDie(writer.ring_path());
  DrainStats stats;
  std::vector<PhaseRecord> records = DrainAll(reader, &stats);
  EXPECT_EQ(stats.read, 1024u);
  EXPECT_EQ(stats.overwritten, 5000u - 1024u);
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.front().arg, 5000 - 1024);
  EXPECT_EQ(records.back().arg, 4999);
  for (int i = 0; i < 10; ++i) writer.Counter(id, i);
  EXPECT_EQ(DrainAll(reader, &stats).size(), 10u);
  EXPECT_EQ(stats.lost(), 0u);
  EXPECT_EQ(reader.totals().read, 1034u);
}

TEST(PhaseReaderTest, ConcurrentLappingNeverDeliversATornRecord) {
  TempDir dir;
  PhaseWriter writer(Options(dir, 1024));
  const uint16_t id = writer.NameId("c");
  ASSERT_TRUE(writer.Open().ok());
  PhaseReader reader = OpenOrDie(writer.ring_path());
  constexpr int64_t kRecords = 300'000;
  std::thread producer([&] {
    for (int64_t i = 0; i < kRecords; ++i) writer.Counter(id, i);
  });
  uint64_t bad = 0;
  DrainStats total;
  auto check = [&](const PhaseRecord& r) {
    // The writer puts its write index in arg: a record is whole iff they agree.
    if (r.arg != static_cast<int64_t>(r.index) || r.kind != RecordKind::kCounter) ++bad;
  };
  while (reader.write_index() < kRecords) total += reader.Drain(check);
  producer.join();
  total += reader.Drain(check, DrainMode::kFinal);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(total.read + total.lost(), static_cast<uint64_t>(kRecords));
}

TEST(PhaseReaderTest, UncommittedSlotWaitsThenCounts) {
  TempDir dir;
  PhaseWriter writer(Options(dir));
  writer.Step();
  // Simulate a writer that died between claiming a slot and committing it.
  {
    const int fd = open(writer.ring_path().c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    void* map = mmap(nullptr, kHeaderBlockBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(map, MAP_FAILED);
    static_cast<RingHeader*>(map)->write_index.fetch_add(1);
    munmap(map, kHeaderBlockBytes);
  }
  writer.Step();  // index 2, after the hole at index 1
  FakeClock clock;
  Result<PhaseReader> opened = PhaseReader::Open(writer.ring_path(), &clock);
  ASSERT_TRUE(opened.ok());
  PhaseReader& reader = *opened;
  DrainStats stats;
  std::vector<PhaseRecord> all = reader.ReadAll(&stats);
  EXPECT_EQ(all.size(), 2u);
  EXPECT_EQ(stats.incomplete, 1u);
  EXPECT_EQ(DrainAll(reader, &stats).size(), 1u) << "stops at the hole";
  for (int poll = 0; poll < 5; ++poll) {
    EXPECT_EQ(DrainAll(reader, &stats).size(), 0u) << "waits: a live writer may commit yet";
  }
  clock.Advance(kNsPerSec);
  std::vector<PhaseRecord> rest = DrainAll(reader, &stats);
  ASSERT_EQ(rest.size(), 1u) << "gives up on the hole after a few polls";
  EXPECT_EQ(rest[0].arg, 2);
  EXPECT_EQ(stats.incomplete, 1u);
}

TEST(PhaseReaderTest, TruncatedMidRecordKeepsWholeRecords) {
  TempDir dir;
  PhaseWriter writer(Options(dir));
  const uint16_t id = writer.NameId("c");
  for (int i = 0; i < 100; ++i) writer.Counter(id, i);
  const std::string cut = dir.Sub("cut.ring");
  WriteFile(cut, ReadFile(writer.ring_path()).substr(0, kSlotsOffset + 50 * kSlotBytes + 7));
  PhaseReader reader = OpenOrDie(cut);
  EXPECT_EQ(reader.info().readable_slots, 50u);
  DrainStats stats;
  std::vector<PhaseRecord> records = reader.ReadAll(&stats);
  ASSERT_EQ(records.size(), 50u);
  EXPECT_EQ(records.back().arg, 49);
  EXPECT_EQ(stats.incomplete, 50u);
  EXPECT_EQ(reader.Name(id), "c");
  EXPECT_EQ(DrainAll(reader, &stats, DrainMode::kFinal).size(), 50u);
}

// Issue 27 B05: a ring file that shrinks while a reader has it open (the job truncated it) used
// to SIGBUS the monitor through its mapping. It now reads what the file still holds, counts the
// rest incomplete and says once that the file shrank.
TEST(PhaseReaderTest, RingThatShrinksWhileOpenIsReadNotCrashedOn) {
  struct Case {
    const char* name;
    uint64_t cut_to;       // bytes left in the file
    uint64_t expect_read;  // of the 90 records written after the first drain
    uint64_t expect_lost;
  };
  const std::vector<Case> cases = {
      {"mid_records", kSlotsOffset + 60 * kSlotBytes + 5, 50, 40},  // slots 10..59 survive
      {"in_names", kSlotsOffset - 100, 0, 90},  // the header still says 100 were written
      {"empty", 0, 0, 0},                       // nothing says how many: none counted
  };
  TempDir dir;
  for (const Case& c : cases) {
    PhaseWriter writer(Options(dir));
    const uint16_t id = writer.NameId("c");
    for (int i = 0; i < 10; ++i) writer.Counter(id, i);
    // A copy: truncating the writer's own file would fault the writer (this test).
    const std::string path = dir.Sub(std::string(c.name) + ".ring");
    WriteFile(path, ReadFile(writer.ring_path()));
    PhaseReader reader = OpenOrDie(path);
    EXPECT_EQ(DrainAll(reader).size(), 10u) << c.name;
    EXPECT_EQ(reader.Name(id), "c");
    EXPECT_FALSE(reader.shrunk());
    for (int i = 10; i < 100; ++i) writer.Counter(id, i);
    WriteFile(path, ReadFile(writer.ring_path()));  // rewritten in place: the reader's file
    ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(c.cut_to)), 0);
    DrainStats stats;
    const std::vector<PhaseRecord> rest = DrainAll(reader, &stats, DrainMode::kFinal);
    EXPECT_TRUE(reader.shrunk()) << c.name;
    EXPECT_EQ(stats.read, c.expect_read) << c.name;
    EXPECT_EQ(stats.lost(), c.expect_lost) << c.name;
    if (!rest.empty()) {
      EXPECT_EQ(rest.back().arg, 59) << c.name;
    }
    EXPECT_EQ(reader.shrunk_to_bytes(), c.cut_to) << c.name;
    std::optional<Error> said = reader.TakeShrunkError();
    ASSERT_TRUE(said.has_value()) << c.name;
    EXPECT_NE(said->message.find(path), std::string::npos) << said->message;
    EXPECT_NE(said->message.find("shrank"), std::string::npos) << said->message;
    EXPECT_FALSE(reader.TakeShrunkError().has_value()) << "said once";
    EXPECT_EQ(reader.Name(id), "c") << "names read before the cut stay known";
    DrainStats all;
    // Post-mortem, from index 0: what the cut file holds, no crash either.
    EXPECT_EQ(reader.ReadAll(&all).size(), c.expect_read ? 60u : 0u) << c.name;
  }
}

// The watcher passes a shrink on as an error of its poll, once, and goes on draining the rest.
TEST(RingDirWatcherTest, SaysOnceThatARingShrank) {
  TempDir dir;
  const std::string phases = dir.Sub("phases");
  fs::create_directories(phases);
  PhaseWriter writer(Options(dir));
  writer.Step();
  const std::string copy = phases + "/7.7.ring";
  WriteFile(copy, ReadFile(writer.ring_path()));
  RingDirWatcher watcher(phases, [](int32_t) { return true; });
  uint64_t seen = 0;
  auto count = [&](PhaseReader&, const PhaseRecord&) { ++seen; };
  RingDirWatcher::PollResult result = watcher.Poll(count);
  EXPECT_EQ(result.new_rings, 2u);
  EXPECT_TRUE(result.new_errors.empty());
  ASSERT_EQ(truncate(copy.c_str(), 0), 0);
  writer.Step();
  result = watcher.Poll(count);
  ASSERT_EQ(result.new_errors.size(), 1u);
  EXPECT_NE(result.new_errors[0].message.find("7.7.ring"), std::string::npos);
  EXPECT_EQ(result.stats.read, 1u) << "the other ring is drained as before";
  result = watcher.Poll(count);
  EXPECT_TRUE(result.new_errors.empty()) << "said once";
  EXPECT_EQ(seen, 3u);
}

TEST(PhaseReaderTest, BadFilesAreClearErrors) {
  TempDir dir;
  PhaseWriter writer(Options(dir));
  writer.Step();
  const std::string good = ReadFile(writer.ring_path());
  std::string garbage(good.size(), '\x5a');
  std::string newer = good;
  newer[8] = 2;  // version
  std::string bad_capacity = good;
  bad_capacity[20] = 3;  // capacity 1024 + 3: not a power of two
  struct Case {
    std::string name;
    std::string bytes;
    ErrorCode code;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"empty", "", ErrorCode::kParse, "cut before the first record"},
      {"header_only", good.substr(0, 100), ErrorCode::kParse, "cut before the first record"},
      {"names_cut", good.substr(0, kSlotsOffset - 1), ErrorCode::kParse, "cut before"},
      {"garbage", garbage, ErrorCode::kParse, "bad magic"},
      {"newer", newer, ErrorCode::kUnsupported, "version 2"},
      {"capacity", bad_capacity, ErrorCode::kParse, "bad capacity"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.Sub(std::string(c.name) + ".ring");
    WriteFile(path, c.bytes);
    Result<PhaseReader> reader = PhaseReader::Open(path);
    ASSERT_FALSE(reader.ok()) << c.name;
    EXPECT_EQ(reader.error().code, c.code) << c.name;
    EXPECT_NE(reader.error().message.find(path), std::string::npos) << reader.error().message;
    EXPECT_NE(reader.error().message.find(c.message_part), std::string::npos)
        << reader.error().message;
  }
  Result<PhaseReader> missing = PhaseReader::Open(dir.Sub("missing.ring"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

TEST(PhaseCrashTest, KilledWriterLeavesAReadableRing) {
  TempDir dir;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PhaseWriter writer(Options(dir, 4096));
    const uint16_t id = writer.NameId("train_step");
    for (int i = 0; i < 1000; ++i) {
      writer.Begin(id);
      writer.End(id);
    }
    writer.Step();
    raise(SIGKILL);  // no destructors, no munmap, no flush
    _exit(1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  PhaseReader reader = OpenOrDie(fmt::format("{}/{}.ring", dir.Sub("phases"), child));
  EXPECT_EQ(reader.info().pid, child);
  DrainStats stats;
  std::vector<PhaseRecord> records = reader.ReadAll(&stats);
  EXPECT_EQ(records.size(), 2001u);
  EXPECT_EQ(stats.lost(), 0u);
  EXPECT_EQ(reader.Name(records[0].phase_id), "train_step");
  EXPECT_EQ(records.back().kind, RecordKind::kStep);
}

TEST(PhaseCrashTest, ForkedChildGetsItsOwnRing) {
  TempDir dir;
  PhaseWriter writer(Options(dir));
  const uint16_t id = writer.NameId("load");
  writer.Begin(id);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    writer.AfterForkInChild();
    for (int i = 0; i < 10; ++i) writer.Counter(id, i);
    _exit(writer.ring_path() == fmt::format("{}/{}.ring", dir.Sub("phases"), getpid()) ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  writer.End(id);

  PhaseReader parent = OpenOrDie(writer.ring_path());
  EXPECT_EQ(parent.ReadAll().size(), 2u) << "the child never wrote into the parent's ring";
  EXPECT_EQ(parent.info().forked_from, 0);
  PhaseReader forked = OpenOrDie(fmt::format("{}/{}.ring", dir.Sub("phases"), child));
  // Issue 27 B08: the child's ring says whom it was forked from (a daemon is never the main).
  EXPECT_EQ(forked.info().forked_from, getpid());
  std::vector<PhaseRecord> records = forked.ReadAll();
  ASSERT_EQ(records.size(), 10u);
  EXPECT_EQ(forked.Name(records[0].phase_id), "load") << "ids survive the fork";
  EXPECT_EQ(records[0].tid, static_cast<uint32_t>(child)) << "tid cache refreshed";
}

TEST(RingDirWatcherTest, FindsNewRingsAndReportsBadOnesOnce) {
  TempDir dir;
  RingDirWatcher watcher(dir.Sub("phases"));
  uint64_t seen = 0;
  auto count = [&](PhaseReader&, const PhaseRecord&) { ++seen; };
  RingDirWatcher::PollResult result = watcher.Poll(count);
  EXPECT_EQ(result.new_rings, 0u) << "missing directory is fine";

  PhaseWriter a(Options(dir));
  PhaseWriter b(Options(dir));
  a.Step();
  b.Step();
  b.Step();
  WriteFile(dir.Sub("phases") + "/999.ring", "garbage");
  WriteFile(dir.Sub("phases") + "/.123.ring.tmp", "in progress");
  result = watcher.Poll(count);
  EXPECT_EQ(result.new_rings, 2u);
  ASSERT_EQ(result.new_errors.size(), 1u);
  EXPECT_NE(result.new_errors[0].message.find("999.ring"), std::string::npos);
  EXPECT_EQ(result.stats.read, 3u);
  EXPECT_EQ(seen, 3u);

  a.Step();
  result = watcher.Poll(count);
  EXPECT_EQ(result.new_rings, 0u);
  EXPECT_TRUE(result.new_errors.empty());
  EXPECT_EQ(result.stats.read, 1u);
  EXPECT_EQ(watcher.rings().size(), 2u);
}

// A ring whose process is gone is read to its end once more (its last records are not lost),
// handed to the retire callback, closed and never opened again: the watcher's memory follows
// the live processes, not the run's length.
TEST(RingDirWatcherTest, RetiresRingsOfGoneProcessesAfterTheirLastRecord) {
  TempDir dir;
  bool alive = true;
  RingDirWatcher watcher(dir.Sub("phases"), [&](int32_t) { return alive; });
  PhaseWriter writer(Options(dir));
  writer.Step();
  uint64_t seen = 0;
  std::vector<int32_t> retired;
  auto count = [&](PhaseReader&, const PhaseRecord&) { ++seen; };
  auto retire = [&](PhaseReader& ring) { retired.push_back(ring.info().pid); };
  RingDirWatcher::PollResult result = watcher.Poll(count, DrainMode::kLive, retire);
  EXPECT_EQ(result.retired_rings, 0u);
  EXPECT_EQ(watcher.rings().size(), 1u);

  writer.Step();
  writer.Step();
  alive = false;  // the process exited after its last two records
  result = watcher.Poll(count, DrainMode::kLive, retire);
  EXPECT_EQ(result.stats.read, 2u) << "its last records are read before it is closed";
  EXPECT_EQ(result.retired_rings, 1u);
  EXPECT_EQ(retired, std::vector<int32_t>{getpid()});
  EXPECT_TRUE(watcher.rings().empty());

  result = watcher.Poll(count, DrainMode::kLive, retire);
  EXPECT_EQ(result.new_rings, 0u) << "a retired ring's file is not opened again";
  EXPECT_EQ(seen, 3u);
}

}  // namespace
}  // namespace stallscope::phase
