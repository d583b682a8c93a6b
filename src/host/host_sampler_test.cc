#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/clock.h"
#include "host/file_reader.h"
#include "host/host.h"
#include "host/proc_parse.h"
#include "host_test_util.h"

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

// Issue 28: with a slow period the slow files are read at most once per period; CPU shares come
// every sample, and rates and deltas span the time since the slow files' last read.
TEST(HostSampler, SlowFilesAtMostOncePerSlowPeriod) {
  TempDir tmp;
  HostSampler sampler(CopyNodeA(tmp.path()));
  sampler.SetSlowPeriod(kNsPerSec);
  HostSample s;
  sampler.Sample(kT0, s);
  EXPECT_TRUE(s.slow_read);
  EXPECT_TRUE(s.mem_total_bytes);
  AdvanceNodeA(tmp.path());
  sampler.Sample(kT0 + kNsPerSec / 2, s);  // half a period: CPU only
  EXPECT_FALSE(s.slow_read);
  ASSERT_TRUE(s.cpu);
  EXPECT_FALSE(s.mem_total_bytes);
  EXPECT_FALSE(s.load1);
  EXPECT_FALSE(s.psi_cpu);
  EXPECT_FALSE(s.disk_read_bps);
  EXPECT_FALSE(s.cgroup_nr_throttled_delta);
  HostSample carried = s;
  HostSample before;
  sampler.Sample(kT0 + 2 * kNsPerSec - kNsPerSec / 20, s);  // a little early: within the slack
  EXPECT_TRUE(s.slow_read);
  // nvme0n1: +40960 sectors read since the last slow read, 1.95 s before.
  EXPECT_EQ(s.disk_read_bps, static_cast<uint64_t>(40960.0 * 512 / 1.95 + 0.5));
  EXPECT_EQ(s.cgroup_nr_throttled_delta, 4u);
  ASSERT_TRUE(s.psi_cpu);
  EXPECT_EQ(s.psi_cpu->some_stall_us_delta, 250000u);
  // A live view carries the last values into a sample that did not read them.
  CarrySlowFields(s, carried);
  EXPECT_EQ(carried.mem_total_bytes, s.mem_total_bytes);
  EXPECT_EQ(carried.disk_read_bps, s.disk_read_bps);
  CarrySlowFields(before, s);  // a sample that read them keeps its own
  EXPECT_TRUE(s.mem_total_bytes);
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

// Regression: fixture files are regular files; a kept fd would still see the file a test
// replaced by rename. They are opened on every sample.
TEST(HostSampler, FixtureReplacedByRenameIsSeen) {
  TempDir tmp;
  HostSampler sampler(CopyNodeA(tmp.path()));
  HostSample s;
  sampler.Sample(kT0, s);
  EXPECT_EQ(s.load1, 2.5);
  const fs::path loadavg = tmp.path() / "proc" / "loadavg";
  WriteFile(tmp.path() / "loadavg.new", "7.25 1.75 1.00 3/456 7890\n");
  fs::rename(tmp.path() / "loadavg.new", loadavg);
  sampler.Sample(kT0 + kNsPerSec, s);
  EXPECT_EQ(s.load1, 7.25);
}

// Absent files are probed once, then again only after kReprobeNs (a cgroup file can appear).
TEST(HostSampler, AbsentFileIsProbedAgainAfterAMinute) {
  TempDir tmp;
  ProcFs pfs = CopyNodeA(tmp.path());
  fs::rename(tmp.path() / "proc" / "pressure", tmp.path() / "pressure.away");
  HostSampler sampler(pfs);
  HostSample s;
  sampler.Sample(kT0, s);
  EXPECT_FALSE(s.psi_cpu);
  fs::rename(tmp.path() / "pressure.away", tmp.path() / "proc" / "pressure");
  sampler.Sample(kT0 + kNsPerSec, s);
  EXPECT_FALSE(s.psi_cpu);  // not tried again yet
  sampler.Sample(kT0 + HostSampler::kReprobeNs - 1, s);
  EXPECT_FALSE(s.psi_cpu);
  sampler.Sample(kT0 + HostSampler::kReprobeNs, s);
  ASSERT_TRUE(s.psi_cpu);
  EXPECT_DOUBLE_EQ(s.psi_cpu->some_avg10_pct, 12.5);
  EXPECT_TRUE(s.psi_memory);
  // Present files are read on every sample meanwhile.
  EXPECT_EQ(s.load1, 2.5);
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

/// fd -> path of this process's open files.
std::map<int, std::string> OpenFds() {
  std::map<int, std::string> fds;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd", ec)) {
    std::error_code link_ec;
    const fs::path target = fs::read_symlink(entry.path(), link_ec);
    if (link_ec) continue;  // the directory's own fd, closed by now
    fds[std::stoi(entry.path().filename().string())] = target.string();
  }
  return fds;
}

TEST(HostSamplerLive, KeepsFilesOpenAcrossSamples) {
  SystemClock clock;
  HostSampler sampler(ProcFs{});
  HostSample s;
  const std::map<int, std::string> before = OpenFds();
  sampler.Sample(clock.MonotonicNs(), s);
  const std::map<int, std::string> kept = OpenFds();
  std::map<std::string, int> kept_by_path;
  for (const auto& [fd, path] : kept) {
    auto it = before.find(fd);
    if (it == before.end() || it->second != path) kept_by_path[path] = fd;
  }
  EXPECT_LE(kept.size() - before.size(), 10u);
  for (const char* path : {"/proc/stat", "/proc/meminfo", "/proc/loadavg"}) {
    EXPECT_EQ(kept_by_path.count(path), 1u) << path << " is not kept open";
  }
  std::vector<uint64_t> mem_available;
  for (int i = 0; i < 10; ++i) {
    SCOPED_TRACE(i);
    usleep(30 * 1000);  // > 1 jiffy summed over the CPUs at any CONFIG_HZ
    sampler.Sample(clock.MonotonicNs(), s);
    EXPECT_EQ(OpenFds(), kept);  // same fds, same files: nothing reopened, nothing leaked
    // Rates need /proc/stat counters that moved since the previous pread.
    ASSERT_TRUE(s.cpu);
    EXPECT_EQ(s.per_cpu.size(), s.cpu_count);
    EXPECT_TRUE(s.load1);
    ASSERT_TRUE(s.mem_available_bytes);
    EXPECT_EQ(s.malformed_records, 0u);
  }
}

/// The text of the file open at `fd`, re-read with pread from offset 0.
std::string PreadAll(FileReader& reader, int fd) {
  EXPECT_EQ(reader.ReadFd(fd), 0);
  return std::string(reader.data());
}

void BurnCpu(int64_t ns) {
  timespec start{}, now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  do {
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  } while ((now.tv_sec - start.tv_sec) * kNsPerSec + (now.tv_nsec - start.tv_nsec) < ns);
}

// What HostSampler relies on: a procfs or cgroupfs file kept open makes its content anew on
// each pread from offset 0. Checked for each kind of file it keeps.
TEST(HostSamplerLive, PreadAtZeroSeesNewContent) {
  FileReader reader;
  auto open_file = [](const std::string& path) {
    return ScopedFd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  };

  // /proc/stat: cpu ticks and ctxt grow (we sleep, so we switch).
  ScopedFd stat = open_file("/proc/stat");
  ASSERT_TRUE(stat.valid());
  const std::string stat1 = PreadAll(reader, stat.get());
  usleep(30 * 1000);
  const std::string stat2 = PreadAll(reader, stat.get());
  ProcStat p1, p2;
  ParseProcStat(stat1, p1);
  ParseProcStat(stat2, p2);
  ASSERT_TRUE(p1.total && p2.total);
  EXPECT_GT(p2.total->Total(), p1.total->Total());

  // /proc/loadavg: its last field is the last pid made; a fork makes a new one.
  ScopedFd loadavg = open_file("/proc/loadavg");
  ASSERT_TRUE(loadavg.valid());
  const std::string load1 = PreadAll(reader, loadavg.get());
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);
  const std::string load2 = PreadAll(reader, loadavg.get());
  EXPECT_NE(load1, load2);
  EXPECT_TRUE(ParseLoadavg(load2));

  // /proc/meminfo: MemFree drops when we touch 64 MiB.
  ScopedFd meminfo = open_file("/proc/meminfo");
  ASSERT_TRUE(meminfo.valid());
  const std::string mem1 = PreadAll(reader, meminfo.get());
  constexpr size_t kTouch = 64 << 20;
  void* mem = mmap(nullptr, kTouch, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  std::memset(mem, 1, kTouch);
  const std::string mem2 = PreadAll(reader, meminfo.get());
  munmap(mem, kTouch);
  EXPECT_NE(mem1, mem2);
  EXPECT_TRUE(ParseMeminfo(mem2).total_bytes);

  // diskstats and pressure need no activity to check: they parse on a second pread.
  ScopedFd diskstats = open_file("/proc/diskstats");
  if (diskstats.valid()) {
    PreadAll(reader, diskstats.get());
    size_t pos = 0;
    const std::string again = PreadAll(reader, diskstats.get());
    auto line = NextLine(again, pos);
    ASSERT_TRUE(line);
    EXPECT_TRUE(ParseDiskstatsLine(*line));
  }
  for (const char* path : {"/proc/pressure/cpu", "/proc/pressure/io", "/proc/pressure/memory"}) {
    ScopedFd psi = open_file(path);
    if (!psi.valid()) continue;  // no PSI on this kernel
    PreadAll(reader, psi.get());
    EXPECT_TRUE(ParsePressure(PreadAll(reader, psi.get()))) << path;
  }

  // cgroup v2 cpu.stat usage_usec and v1 cpuacct.usage grow when we use CPU.
  std::vector<std::string> cgroup_files = {
      "/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/unified/cpu.stat",
      "/sys/fs/cgroup/cpuacct/cpuacct.usage", "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage"};
  if (reader.ReadPath("/proc", "/self/cgroup") == 0) {
    if (auto rel = ParseCgroupV2Path(reader.data()); rel && *rel != "/") {
      cgroup_files.push_back("/sys/fs/cgroup" + std::string(*rel) + "/cpu.stat");
    }
  }
  int cgroup_checked = 0;
  for (const std::string& path : cgroup_files) {
    ScopedFd file = open_file(path);
    if (!file.valid()) continue;
    const std::string before = PreadAll(reader, file.get());
    BurnCpu(20'000'000);
    EXPECT_NE(before, PreadAll(reader, file.get())) << path;
    ++cgroup_checked;
  }
  RecordProperty("cgroup_files_checked", cgroup_checked);
}

}  // namespace
}  // namespace stallscope::host
