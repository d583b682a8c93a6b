#include "doctor/data_probe.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "temp_dir.h"

namespace stallscope::doctor {
namespace {

namespace fs = std::filesystem;

/// `n` files of `bytes` each in `dir`/a and `dir`/b/c.
void MakeDataset(const fs::path& dir, int n, size_t bytes) {
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b" / "c");
  const std::string content(bytes, 'x');
  for (int i = 0; i < n; ++i) {
    std::ofstream(dir / (i % 2 == 0 ? "a" : "b/c") / ("sample_" + std::to_string(i) + ".bin"))
        << content;
  }
  std::ofstream(dir / "a" / "empty.txt");  // size 0: not a sample
}

DataProbeOptions Quick() {
  DataProbeOptions o;
  o.time_budget_ns = 400'000'000;
  o.threads = 2;
  return o;
}

TEST(ProbeData, ReadsADirectoryInBoundedTime) {
  stallscope::testing::TempDir dir;
  MakeDataset(dir.path(), 40, 100'000);
  const auto start = std::chrono::steady_clock::now();
  const DataFacts d = ProbeData(dir.path().string(), Quick());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(d.error, "");
  EXPECT_EQ(d.files, 40U);
  EXPECT_EQ(d.total_bytes, 40U * 100'000);
  EXPECT_FALSE(d.scan_truncated);
  EXPECT_EQ(d.threads, 2U);
  EXPECT_EQ(d.files_read, 40U) << "a small set is read whole before the time is up";
  EXPECT_EQ(d.bytes_read, 40U * 100'000);
  EXPECT_GT(d.read_seconds, 0);
  EXPECT_GT(d.random_reads, 0U);
  EXPECT_GT(d.random_latency_p99_us, 0);
  EXPECT_LE(d.random_latency_p50_us, d.random_latency_p99_us);
  EXPECT_EQ(d.read_errors, 0U);
  EXPECT_FALSE(d.fs_type.empty());
  if (!d.direct_io) {
    EXPECT_FALSE(d.io_note.empty());
  }
}

TEST(ProbeData, BufferedFallback) {
  stallscope::testing::TempDir dir;
  MakeDataset(dir.path(), 6, 10'000);
  DataProbeOptions o = Quick();
  o.force_buffered = true;
  const DataFacts d = ProbeData(dir.path().string(), o);
  EXPECT_FALSE(d.direct_io);
  EXPECT_EQ(d.io_note, "buffered reads (forced)");
  EXPECT_EQ(d.files_read, 6U);
  EXPECT_EQ(d.bytes_read, 60'000U);
}

TEST(ProbeData, NeverWritesIntoTheDirectory) {
  stallscope::testing::TempDir dir;
  MakeDataset(dir.path(), 4, 5000);
  const auto before = fs::last_write_time(dir.path() / "a" / "sample_0.bin");
  const DataFacts d = ProbeData(dir.path().string(), Quick());
  EXPECT_EQ(d.read_errors, 0U);
  EXPECT_EQ(fs::last_write_time(dir.path() / "a" / "sample_0.bin"), before);
  size_t entries = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) entries += e.is_regular_file();
  EXPECT_EQ(entries, 5U);
}

TEST(ProbeData, ScanStopsAtTheFileLimit) {
  stallscope::testing::TempDir dir;
  MakeDataset(dir.path(), 30, 100);
  DataProbeOptions o = Quick();
  o.max_files = 10;
  const DataFacts d = ProbeData(dir.path().string(), o);
  EXPECT_TRUE(d.scan_truncated);
  EXPECT_EQ(d.files, 10U);
}

TEST(ProbeData, Errors) {
  stallscope::testing::TempDir dir;
  EXPECT_EQ(ProbeData(dir.Sub("missing"), Quick()).error, "No such file or directory");
  std::ofstream(dir.Sub("file")) << "x";
  EXPECT_EQ(ProbeData(dir.Sub("file"), Quick()).error, "not a directory");
  fs::create_directories(dir.path() / "empty");
  const DataFacts empty = ProbeData(dir.Sub("empty"), Quick());
  EXPECT_EQ(empty.error, "");
  EXPECT_EQ(empty.files, 0U);
  EXPECT_EQ(empty.files_read, 0U);
}

}  // namespace
}  // namespace stallscope::doctor
