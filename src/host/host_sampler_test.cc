#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "base/clock.h"
#include "host/host.h"
#include "host/host_test_util.h"

namespace stallscope::host {
namespace {

namespace fs = std::filesystem;
using testing::CopyFixture;
using testing::DataPath;
using testing::FixtureFs;
using testing::TempDir;
using testing::WriteFile;

constexpr uint64_t kKiB = 1024;
constexpr int64_t kT0 = 10 * kNsPerSec;

/// Read-only ProcFs straight on the checked-in fixtures.
ProcFs NodeA() {
  ProcFs fs;
  fs.proc_root = DataPath("proc/node_a").string();
  fs.cgroup_root = DataPath("cgroup/node_a").string();
  fs.sys_root = DataPath("proc/node_a_sysfs").string();
  fs.shm_path = DataPath("proc").string();
  return fs;
}

/// A writable copy of node_a under `dir`; `with_sysfs` false leaves out /sys/block.
ProcFs CopyNodeA(const fs::path& dir, bool with_sysfs = true) {
  CopyFixture("proc/node_a", dir / "proc");
  CopyFixture("cgroup/node_a", dir / "cgroup");
  if (with_sysfs) CopyFixture("proc/node_a_sysfs", dir / "sys");
  return FixtureFs(dir);
}

/// Applies the node_a_next overlay: the counters 2 s later.
void AdvanceNodeA(const fs::path& dir) {
  CopyFixture("proc/node_a_next", dir / "proc");
  CopyFixture("cgroup/node_a_next", dir / "cgroup");
}

TEST(HostSampler, NodeAFirstSampleHasLevelsOnly) {
  HostSampler sampler(NodeA());
  HostSample s;
  sampler.Sample(kT0, s);
  EXPECT_EQ(s.cpu_count, 4u);
  EXPECT_FALSE(s.cpu);  // rates need two samples
  EXPECT_TRUE(s.per_cpu.empty());
  EXPECT_EQ(s.mem_total_bytes, 16384000 * kKiB);
  EXPECT_EQ(s.mem_available_bytes, 12288000 * kKiB);
  EXPECT_EQ(s.mem_used_bytes, 4096000 * kKiB);
  EXPECT_EQ(s.load1, 2.5);
  EXPECT_EQ(s.load5, 1.75);
  EXPECT_EQ(s.load15, 1.0);
  EXPECT_EQ(s.procs_running, 3u);
  ASSERT_TRUE(s.psi_cpu);
  EXPECT_DOUBLE_EQ(s.psi_cpu->some_avg10_pct, 12.5);
  EXPECT_EQ(s.psi_cpu->full_avg10_pct, 0.0);
  EXPECT_EQ(s.psi_cpu->some_stall_us_delta, 0u);
  ASSERT_TRUE(s.psi_io);
  EXPECT_EQ(s.psi_io->full_avg10_pct, 25.0);
  EXPECT_TRUE(s.psi_memory);
  EXPECT_FALSE(s.disk_read_bps);
  EXPECT_FALSE(s.disk_write_bps);
  // self/cgroup says /job.slice/train.scope: its cpu.max is "200000 100000".
  EXPECT_EQ(s.cgroup_cpu_quota_cpus, 2.0);
  EXPECT_FALSE(s.cgroup_nr_throttled_delta);
  EXPECT_FALSE(s.cgroup_throttled_us_delta);
  EXPECT_EQ(s.cgroup_mem_limit_bytes, 64ull << 30);
  EXPECT_TRUE(s.shm_total_bytes);
  EXPECT_TRUE(s.shm_used_bytes);
  EXPECT_EQ(s.malformed_records, 0u);
}

TEST(HostSampler, OldKernelLeavesNewFieldsEmpty) {
  TempDir tmp;
  ProcFs fs;
  fs.proc_root = DataPath("proc/old_kernel").string();
  fs.cgroup_root = (tmp.path() / "no_cgroup2").string();
  fs.sys_root = (tmp.path() / "no_sys").string();
  fs.shm_path = tmp.path().string();
  HostSampler sampler(fs);
  HostSample s;
  sampler.Sample(kT0, s);
  EXPECT_EQ(s.cpu_count, 2u);  // cpu2's line is truncated: skipped and counted
  EXPECT_EQ(s.mem_total_bytes, 2048000 * kKiB);
  EXPECT_FALSE(s.mem_available_bytes);  // no MemAvailable before Linux 3.14
  EXPECT_FALSE(s.mem_used_bytes);
  EXPECT_EQ(s.load15, 0.3);
  EXPECT_FALSE(s.psi_cpu);  // no /proc/pressure before Linux 4.20
  EXPECT_FALSE(s.psi_io);
  EXPECT_FALSE(s.psi_memory);
  EXPECT_FALSE(s.cgroup_cpu_quota_cpus);
  EXPECT_FALSE(s.cgroup_mem_limit_bytes);
  EXPECT_EQ(s.malformed_records, 2u);  // "cpu2 77" and the 5-field sdb line
}

TEST(HostSampler, DeltasAfterTwoSeconds) {
  TempDir tmp;
  HostSampler sampler(CopyNodeA(tmp.path()));
  HostSample s;
  sampler.Sample(kT0, s);
  AdvanceNodeA(tmp.path());
  sampler.Sample(kT0 + 2 * kNsPerSec, s);

  // All CPUs: 4000 jiffies, user+nice 1000, system+irq+softirq 400, idle 2400, iowait 150,
  // steal 50 (see tests/data/proc/node_a_next/stat).
  ASSERT_TRUE(s.cpu);
  EXPECT_DOUBLE_EQ(s.cpu->user_pct, 25.0);
  EXPECT_DOUBLE_EQ(s.cpu->system_pct, 10.0);
  EXPECT_DOUBLE_EQ(s.cpu->iowait_pct, 3.75);
  EXPECT_DOUBLE_EQ(s.cpu->steal_pct, 1.25);
  EXPECT_DOUBLE_EQ(s.cpu->busy_pct, 36.25);
  struct PerCpu {
    double busy, user, system, iowait, steal;
  };
  const PerCpu want[] = {
      {75, 60, 10, 5, 5}, {20, 10, 10, 10, 0}, {50, 30, 20, 0, 0}, {0, 0, 0, 0, 0}};
  ASSERT_EQ(s.per_cpu.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    EXPECT_DOUBLE_EQ(s.per_cpu[i].busy_pct, want[i].busy);
    EXPECT_DOUBLE_EQ(s.per_cpu[i].user_pct, want[i].user);
    EXPECT_DOUBLE_EQ(s.per_cpu[i].system_pct, want[i].system);
    EXPECT_DOUBLE_EQ(s.per_cpu[i].iowait_pct, want[i].iowait);
    EXPECT_DOUBLE_EQ(s.per_cpu[i].steal_pct, want[i].steal);
  }
  // nvme0n1 only: +40960 sectors read, +20480 written in 2 s. nvme0n1p1 and loop0 moved too.
  EXPECT_EQ(s.disk_read_bps, 40960u * 512 / 2);
  EXPECT_EQ(s.disk_write_bps, 20480u * 512 / 2);
  ASSERT_TRUE(s.psi_cpu);
  EXPECT_EQ(s.psi_cpu->some_stall_us_delta, 250000u);
  EXPECT_DOUBLE_EQ(s.psi_cpu->some_avg10_pct, 14.0);
  ASSERT_TRUE(s.psi_io);
  EXPECT_EQ(s.psi_io->some_stall_us_delta, 0u);  // unchanged file
  EXPECT_EQ(s.cgroup_nr_throttled_delta, 4u);
  EXPECT_EQ(s.cgroup_throttled_us_delta, 30000u);
  EXPECT_EQ(s.malformed_records, 0u);
}

// Without /sys/block, partitions are told apart by name; the rates must not change.
TEST(HostSampler, DiskRatesWithoutSysfs) {
  TempDir tmp;
  HostSampler sampler(CopyNodeA(tmp.path(), /*with_sysfs=*/false));
  HostSample s;
  sampler.Sample(kT0, s);
  AdvanceNodeA(tmp.path());
  sampler.Sample(kT0 + 2 * kNsPerSec, s);
  EXPECT_EQ(s.disk_read_bps, 40960u * 512 / 2);
  EXPECT_EQ(s.disk_write_bps, 20480u * 512 / 2);
}

TEST(HostSampler, CountersGoingBackwardsGiveNoRates) {
  TempDir tmp;
  ProcFs fs = CopyNodeA(tmp.path());
  HostSampler sampler(fs);
  HostSample s;
  AdvanceNodeA(tmp.path());
  sampler.Sample(kT0, s);
  CopyFixture("proc/node_a", tmp.path() / "proc");  // counters step back (e.g. a restore)
  sampler.Sample(kT0 + kNsPerSec, s);
  EXPECT_FALSE(s.cpu);
  EXPECT_TRUE(s.per_cpu.empty());
  EXPECT_EQ(s.disk_read_bps, 0u);
  sampler.Sample(kT0 + kNsPerSec, s);  // no time passed: no disk rate
  EXPECT_FALSE(s.disk_read_bps);
}

TEST(HostSampler, PressureFilesAbsent) {
  TempDir tmp;
  ProcFs fs = CopyNodeA(tmp.path());
  fs::remove_all(tmp.path() / "proc" / "pressure");
  HostSampler sampler(fs);
  HostSample s;
  sampler.Sample(kT0, s);
  EXPECT_FALSE(s.psi_cpu);
  EXPECT_FALSE(s.psi_io);
  EXPECT_FALSE(s.psi_memory);
  EXPECT_EQ(s.malformed_records, 0u);  // absent is not malformed
}

TEST(HostSampler, CgroupLimitsTable) {
  struct Case {
    std::string cpu_max;
    std::string memory_max;
    std::optional<double> want_cpus;
    std::optional<uint64_t> want_mem;
    uint32_t malformed;
  };
  const Case cases[] = {
      {"max 100000\n", "max\n", std::nullopt, std::nullopt, 0},
      {"200000 100000\n", "1073741824\n", 2.0, 1ull << 30, 0},
      {"150000 100000\n", "max\n", 1.5, std::nullopt, 0},
      {"50000 100000\n", "max\n", 0.5, std::nullopt, 0},
      {"lots\n", "1G\n", std::nullopt, std::nullopt, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.cpu_max + c.memory_max);
    TempDir tmp;
    ProcFs fs = CopyNodeA(tmp.path());
    WriteFile(tmp.path() / "proc" / "self" / "cgroup", "0::/\n");
    WriteFile(tmp.path() / "cgroup" / "cpu.max", c.cpu_max);
    WriteFile(tmp.path() / "cgroup" / "memory.max", c.memory_max);
    HostSampler sampler(fs);
    HostSample s;
    sampler.Sample(kT0, s);
    EXPECT_EQ(s.cgroup_cpu_quota_cpus, c.want_cpus);
    EXPECT_EQ(s.cgroup_mem_limit_bytes, c.want_mem);
    EXPECT_EQ(s.malformed_records, c.malformed);
  }
}

// Inside a container without a cgroup namespace, /proc/self/cgroup names a path that does not
// exist under the container's /sys/fs/cgroup: the mount root is our cgroup.
TEST(HostSampler, CgroupFallsBackToRoot) {
  TempDir tmp;
  ProcFs fs = CopyNodeA(tmp.path());
  WriteFile(tmp.path() / "proc" / "self" / "cgroup", "0::/kubepods/pod123/ctr\n");
  WriteFile(tmp.path() / "cgroup" / "cpu.max", "300000 100000\n");
  HostSampler sampler(fs);
  HostSample s;
  sampler.Sample(kT0, s);
  EXPECT_EQ(s.cgroup_cpu_quota_cpus, 3.0);
  EXPECT_FALSE(s.cgroup_mem_limit_bytes);  // root memory.max is "max"
}

TEST(HostSample, ClearEmptiesAndKeepsCapacity) {
  HostSampler sampler(NodeA());
  HostSample s;
  sampler.Sample(kT0, s);
  s.per_cpu.resize(8);
  s.malformed_records = 3;
  const size_t capacity = s.per_cpu.capacity();
  s.Clear();
  EXPECT_EQ(s.cpu_count, 0u);
  EXPECT_TRUE(s.per_cpu.empty());
  EXPECT_EQ(s.per_cpu.capacity(), capacity);
  EXPECT_FALSE(s.mem_total_bytes);
  EXPECT_FALSE(s.psi_cpu);
  EXPECT_FALSE(s.cgroup_cpu_quota_cpus);
  EXPECT_FALSE(s.shm_total_bytes);
  EXPECT_EQ(s.malformed_records, 0u);
}

TEST(HostSamplerLive, RealProc) {
  SystemClock clock;
  HostSampler sampler(ProcFs{});
  HostSample s;
  sampler.Sample(clock.MonotonicNs(), s);
  EXPECT_GE(s.cpu_count, 1u);
  ASSERT_TRUE(s.mem_total_bytes);
  EXPECT_GT(*s.mem_total_bytes, 0u);
  EXPECT_TRUE(s.load1);
  EXPECT_TRUE(s.shm_total_bytes);
  EXPECT_EQ(s.malformed_records, 0u);
  usleep(200 * 1000);  // > 1 jiffy on every CPU at any CONFIG_HZ
  sampler.Sample(clock.MonotonicNs(), s);
  ASSERT_TRUE(s.cpu);
  EXPECT_GE(s.cpu->busy_pct, 0.0);
  EXPECT_LE(s.cpu->busy_pct, 100.0 + 1e-9);
  EXPECT_EQ(s.per_cpu.size(), s.cpu_count);
}

}  // namespace
}  // namespace stallscope::host
