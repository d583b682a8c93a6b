// The C ABI (stallscope_rec.h) against the C++ reader: what the Python package's ctypes backend
// relies on. Runs under ASan+UBSan in CI (linked statically here; the .so is the same code).

#include "phase/stallscope_rec.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.h"

#include "phase/phase_reader.h"

namespace stallscope::phase {
namespace {

namespace fs = std::filesystem;
using stallscope::testing::TempDir;

struct WriterDeleter {
  void operator()(stallscope_writer* w) const { stallscope_writer_free(w); }
};
using WriterPtr = std::unique_ptr<stallscope_writer, WriterDeleter>;

WriterPtr NewWriter(const std::string& dir, int32_t rank = 2, int32_t world = 4) {
  return WriterPtr(stallscope_writer_new(dir.data(), dir.size(), rank, world, 1024));
}

uint16_t Id(stallscope_writer* w, std::string_view name) {
  return stallscope_name_id(w, name.data(), name.size());
}

std::string RingPath(const stallscope_writer* w) {
  char buf[4096];
  size_t n = stallscope_writer_ring_path(w, buf, sizeof buf);
  EXPECT_LT(n, sizeof buf);
  return buf;
}

std::vector<PhaseRecord> ReadAll(const std::string& path) {
  auto reader = PhaseReader::Open(path);
  EXPECT_TRUE(reader.ok()) << (reader.ok() ? "" : reader.error().message);
  if (!reader.ok()) return {};
  return reader->ReadAll();
}

TEST(StallscopeRec, VersionsMatchTheHeaderAndTheFormat) {
  EXPECT_EQ(stallscope_rec_abi_version(), static_cast<uint32_t>(STALLSCOPE_REC_ABI_VERSION));
  EXPECT_EQ(stallscope_rec_ring_version(), kRingVersion);
}

TEST(StallscopeRec, RecordsReachTheRingInOrder) {
  TempDir dir;
  WriterPtr w = NewWriter(dir.Sub("phases"));
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(RingPath(w.get()), "") << "no file before the first event";
  const uint16_t fwd = Id(w.get(), "forward_pass");
  const uint16_t syncs = Id(w.get(), "host_sync.item");
  EXPECT_EQ(Id(w.get(), "forward_pass"), fwd) << "interned";
  stallscope_begin(w.get(), fwd);
  stallscope_end(w.get(), fwd);
  stallscope_begin_at(w.get(), fwd, 1000);
  stallscope_end_at(w.get(), fwd, 2000);
  stallscope_counter(w.get(), syncs, 3);
  EXPECT_EQ(stallscope_step(w.get()), 1);
  EXPECT_EQ(stallscope_step(w.get()), 2);
  stallscope_gpu_span(w.get(), fwd, 1000, 4567);

  auto reader = PhaseReader::Open(RingPath(w.get()));
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  EXPECT_EQ(reader->info().rank, 2);
  EXPECT_EQ(reader->info().world_size, 4);
  EXPECT_EQ(reader->info().pid, getpid());
  std::vector<PhaseRecord> r = reader->ReadAll();
  ASSERT_EQ(r.size(), 8u);
  EXPECT_EQ(r[0].kind, RecordKind::kBegin);
  EXPECT_EQ(reader->Name(r[0].phase_id), "forward_pass");
  EXPECT_EQ(r[1].kind, RecordKind::kEnd);
  EXPECT_GE(r[1].ts_ns, r[0].ts_ns);
  EXPECT_EQ(r[2].ts_ns, 1000) << "begin_at keeps the given time";
  EXPECT_EQ(r[3].ts_ns, 2000);
  EXPECT_EQ(r[3].kind, RecordKind::kEnd);
  EXPECT_EQ(r[4].kind, RecordKind::kCounter);
  EXPECT_EQ(r[4].arg, 3);
  EXPECT_EQ(reader->Name(r[4].phase_id), "host_sync.item");
  EXPECT_EQ(r[6].kind, RecordKind::kStep);
  EXPECT_EQ(r[6].arg, 2);
  EXPECT_EQ(r[7].kind, RecordKind::kGpuSpan);
  EXPECT_EQ(r[7].ts_ns, 1000);
  EXPECT_EQ(r[7].arg, 4567);
}

TEST(StallscopeRec, MarkAndInfoWriteMetaLines) {
  TempDir dir;
  WriterPtr w = NewWriter(dir.Sub("phases"));
  char err[256] = "untouched";
  const std::string json = R"({"epoch":3})";
  ASSERT_EQ(
      stallscope_mark(w.get(), Id(w.get(), "eval"), json.data(), json.size(), err, sizeof err), 0);
  EXPECT_STREQ(err, "untouched") << "no error text on success";
  const std::string kind = "dataloader";
  ASSERT_EQ(stallscope_info(w.get(), kind.data(), kind.size(), "{}", 2, err, sizeof err), 0);
  char meta[4096];
  stallscope_writer_meta_path(w.get(), meta, sizeof meta);
  std::ifstream in(meta);
  std::string line1, line2;
  std::getline(in, line1);
  std::getline(in, line2);
  EXPECT_NE(line1.find(R"("kind":"mark","name":"eval","data":{"epoch":3})"), std::string::npos)
      << line1;
  EXPECT_NE(line2.find(R"("kind":"info","name":"dataloader")"), std::string::npos) << line2;
}

TEST(StallscopeRec, AWriterThatCannotCreateItsRingTurnsOffAndSaysWhy) {
  TempDir dir;
  const std::string file = dir.Sub("a_file");
  std::ofstream(file) << "x";
  const std::string bad = file + "/phases";  // a directory under a regular file
  WriterPtr w = NewWriter(bad);
  EXPECT_EQ(stallscope_writer_enabled(w.get()), 1);
  stallscope_begin(w.get(), Id(w.get(), "x"));  // never fails, never throws
  EXPECT_EQ(stallscope_writer_enabled(w.get()), 0);
  EXPECT_EQ(stallscope_writer_open(w.get()), 0);
  char why[512];
  size_t n = stallscope_writer_error(w.get(), why, sizeof why);
  EXPECT_GT(n, 0u);
  EXPECT_NE(std::string(why).find(bad), std::string::npos) << why;
}

TEST(StallscopeRec, StringsOutAreCutToTheBufferAndReportTheirLength) {
  TempDir dir;
  WriterPtr w = NewWriter(dir.Sub("phases"));
  ASSERT_EQ(stallscope_writer_open(w.get()), 1);
  char small[8];
  const size_t full = stallscope_writer_ring_path(w.get(), small, sizeof small);
  EXPECT_GT(full, sizeof small);
  EXPECT_EQ(std::string(small).size(), sizeof small - 1) << "cut and NUL-terminated";
  EXPECT_EQ(stallscope_writer_ring_path(w.get(), nullptr, 0), full);
}

TEST(StallscopeRec, FromEnvNeedsADirectory) {
  unsetenv("STALLSCOPE_RUN_DIR");
  EXPECT_EQ(stallscope_writer_from_env(nullptr, 0), nullptr);
  TempDir dir;
  setenv("STALLSCOPE_RUN_DIR", dir.path().c_str(), 1);
  setenv("RANK", "5", 1);
  WriterPtr w(stallscope_writer_from_env(nullptr, 0));
  unsetenv("STALLSCOPE_RUN_DIR");
  unsetenv("RANK");
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(stallscope_writer_open(w.get()), 1);
  auto reader = PhaseReader::Open(RingPath(w.get()));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(reader->info().rank, 5);
  EXPECT_EQ(fs::path(RingPath(w.get())).parent_path(), fs::path(dir.Sub("phases")));
  const std::string other = dir.Sub("other");
  WriterPtr explicit_dir(stallscope_writer_from_env(other.data(), other.size()));
  ASSERT_EQ(stallscope_writer_open(explicit_dir.get()), 1);
  EXPECT_EQ(fs::path(RingPath(explicit_dir.get())).parent_path(), fs::path(other));
}

TEST(StallscopeRec, ProfilerSumsWindows) {
  TempDir dir;
  WriterPtr w = NewWriter(dir.Sub("phases"));
  stallscope_profiler* p = stallscope_profiler_new(w.get());
  const uint16_t data = Id(w.get(), "data_loading");
  const uint16_t syncs = Id(w.get(), "syncs");
  for (int i = 0; i < 3; ++i) {
    stallscope_begin_at(w.get(), data, 1000 * i);
    stallscope_end_at(w.get(), data, 1000 * i + 400);
    stallscope_counter(w.get(), syncs, 2);
    stallscope_step(w.get());
  }
  stallscope_total phases[4], counters[4];
  size_t n_counters = 99;
  uint64_t steps = 0, unmatched = 9, lost = 9;
  size_t n =
      stallscope_profiler_take(p, phases, 4, counters, 4, &n_counters, &steps, &unmatched, &lost);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(phases[0].count, 3u);
  EXPECT_EQ(phases[0].total_ns, 1200);
  EXPECT_EQ(phases[0].max_ns, 400);
  char name[64];
  stallscope_profiler_name(p, phases[0].id, name, sizeof name);
  EXPECT_STREQ(name, "data_loading");
  ASSERT_EQ(n_counters, 1u);
  EXPECT_EQ(counters[0].total_ns, 6) << "a counter's total is the sum of its deltas";
  EXPECT_EQ(steps, 3u);
  EXPECT_EQ(unmatched, 0u);
  EXPECT_EQ(lost, 0u);
  // The next window is empty; rows beyond the caller's capacity are not written.
  n = stallscope_profiler_take(p, nullptr, 0, nullptr, 0, &n_counters, &steps, nullptr, nullptr);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(steps, 0u);
  stallscope_profiler_free(p);
}

TEST(StallscopeRec, AForkedChildWritesItsOwnRing) {
  TempDir dir;
  WriterPtr w = NewWriter(dir.Sub("phases"));
  const uint16_t id = Id(w.get(), "parent_and_child");
  stallscope_begin(w.get(), id);
  const std::string parent_ring = RingPath(w.get());
  pid_t child = fork();
  if (child == 0) {
    stallscope_writer_after_fork_in_child(w.get());
    stallscope_end(w.get(), id);
    _exit(RingPath(w.get()) == parent_ring ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's ring is not the parent's";
  EXPECT_EQ(ReadAll(parent_ring).size(), 1u) << "the child wrote nothing into the parent's ring";
  EXPECT_TRUE(fs::exists(dir.Sub("phases") + "/" + std::to_string(child) + ".ring"));
}

}  // namespace
}  // namespace stallscope::phase
