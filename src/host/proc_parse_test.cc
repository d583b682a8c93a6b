#include "host/proc_parse.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stallscope::host {
namespace {

using namespace std::string_view_literals;

// A /proc/PID/stat line as Linux 6.x writes it, with the fields we read as arguments.
std::string StatLine(std::string_view comm, char state, int ppid, int utime, int stime, int threads,
                     int start, long rss) {
  return "4242 (" + std::string(comm) + ") " + state + " " + std::to_string(ppid) +
         " 4242 4242 0 -1 4194560 12000 0 12 0 " + std::to_string(utime) + " " +
         std::to_string(stime) + " 0 0 20 0 " + std::to_string(threads) + " 0 " +
         std::to_string(start) + " 8405381120 " + std::to_string(rss) +
         " 18446744073709551615 1 1 0 0 0 0 0 16781312 2 0 0 0 17 3 0 0 0 0 0\n";
}

TEST(ParsePidStat, Table) {
  struct Case {
    std::string name;
    std::string text;
    bool ok;
    std::string_view comm = {};
    char state = '?';
    int32_t ppid = 0;
    uint64_t rss_pages = 0;
  };
  const std::string full = StatLine("python", 'S', 1, 1200, 300, 3, 5000, 250000);
  const Case cases[] = {
      {"plain", full, true, "python", 'S', 1, 250000},
      {"paren_space_paren", StatLine("a) (b", 'R', 100, 1, 2, 1, 9, 10), true, "a) (b", 'R', 100,
       10},
      {"fake_fields_in_comm", StatLine("my prog) S 1 (", 'D', 7, 1, 2, 1, 9, 10), true,
       "my prog) S 1 (", 'D', 7, 10},
      {"spaces", StatLine("Web Content", 'S', 2, 1, 2, 1, 9, 10), true, "Web Content", 'S', 2, 10},
      {"empty_comm", StatLine("", 'Z', 2, 1, 2, 1, 9, 0), true, "", 'Z', 2, 0},
      {"newline_in_comm", StatLine("a\nb", 'S', 2, 1, 2, 1, 9, 5), true, "a\nb", 'S', 2, 5},
      {"negative_rss", StatLine("x", 'S', 2, 1, 2, 1, 9, -4), true, "x", 'S', 2, 0},
      {"truncated_after_state", "4242 (python) S 1 4242", false},
      {"truncated_before_rss", full.substr(0, full.find(" 8405381120")), false},
      {"no_close_paren", "4242 (python S 1 4242 4242 0 -1 0 0 0 0 0 1 2 0 0 20 0 3 0 5 6 7", false},
      {"no_pid", "(python) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 3 0 5 6 7", false},
      {"bad_pid", "42x (python) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 3 0 5 6 7", false},
      {"long_state", "1 (x) SS 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 3 0 5 6 7", false},
      {"garbage_field", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 1z 2 0 0 20 0 3 0 5 6 7", false},
      {"empty", "", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto stat = ParsePidStat(c.text);
    ASSERT_EQ(stat.has_value(), c.ok);
    if (!c.ok) continue;
    EXPECT_EQ(stat->pid, 4242);
    EXPECT_EQ(stat->comm, c.comm);
    EXPECT_EQ(stat->state, c.state);
    EXPECT_EQ(stat->ppid, c.ppid);
    EXPECT_EQ(stat->rss_pages, c.rss_pages);
  }
  auto stat = ParsePidStat(full);
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->utime_ticks, 1200u);
  EXPECT_EQ(stat->stime_ticks, 300u);
  EXPECT_EQ(stat->num_threads, 3u);
  EXPECT_EQ(stat->start_time_ticks, 5000u);
}

TEST(JoinCmdline, Table) {
  struct Case {
    std::string_view raw;
    std::string_view want;
  };
  const Case cases[] = {
      {"python\0train.py\0--epochs\0"
       "10\0"sv,
       "python train.py --epochs 10"},
      {"python\0train.py"sv, "python train.py"},  // no trailing NUL
      {""sv, ""},                                 // kernel thread or zombie
      {"\0\0"sv, ""},
      {"sshd: /usr/sbin/sshd -D\0"sv, "sshd: /usr/sbin/sshd -D"},  // setproctitle
      {"a\0\0b\0"sv, "a  b"},                                      // empty argument kept
  };
  std::string out = "stale contents";
  for (const Case& c : cases) {
    JoinCmdline(c.raw, out);
    EXPECT_EQ(out, c.want);
  }
}

TEST(ParseProcStat, Table) {
  struct Case {
    std::string name;
    std::string_view text;
    bool has_total;
    size_t cpus;
    uint32_t malformed;
  };
  const Case cases[] = {
      {"modern",
       "cpu  10 1 5 100 2 0 1 3 0 0\ncpu0 5 1 2 50 1 0 1 2 0 0\n"
       "cpu1 5 0 3 50 1 0 0 1 0 0\nintr 1 2 3\nctxt 9\n",
       true, 2, 0},
      {"linux_2_4_four_fields", "cpu  4 0 1 95\ncpu0 4 0 1 95\n", true, 1, 0},
      {"truncated_line", "cpu  4 0 1 95\ncpu0 4 0 1 95\ncpu1 77\n", true, 1, 1},
      {"cut_mid_file", "cpu  4 0 1 95\ncpu0 4 0", true, 0, 1},
      {"garbled_number", "cpu  4 0 1 95\ncpu0 4 0 x 95\n", true, 0, 1},
      {"not_cpu_lines", "cpufreq 1 2 3 4\ncpux 1 2 3 4\n", false, 0, 0},
      {"empty", "", false, 0, 0},
  };
  ProcStat stat;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ParseProcStat(c.text, stat);
    EXPECT_EQ(stat.total.has_value(), c.has_total);
    EXPECT_EQ(stat.per_cpu.size(), c.cpus);
    EXPECT_EQ(stat.malformed_lines, c.malformed);
  }
  ParseProcStat("cpu  10 1 5 100 2 3 1 4 7 7\ncpu3 1 2 3 4\n", stat);
  ASSERT_TRUE(stat.total);
  EXPECT_EQ(stat.total->Total(), 126u);  // guest fields are inside user/nice already
  EXPECT_EQ(stat.total->steal, 4u);
  ASSERT_EQ(stat.per_cpu.size(), 1u);
  EXPECT_EQ(stat.per_cpu[0].cpu_id, 3u);
  EXPECT_EQ(stat.per_cpu[0].iowait, 0u);  // missing on old kernels: 0
}

TEST(FindU64Field, Table) {
  const std::string_view status =
      "Name:\tpython\nnonvoluntary_ctxt_switches:\t7\nvoluntary_ctxt_switches:\t11\n"
      "read_bytes: 4096\ncancelled_write_bytes: 5\nwrite_bytes: 9\nnr_throttled 3\nempty:\n"
      "MemTotal:       16384000 kB";
  struct Case {
    std::string_view key;
    std::optional<uint64_t> want;
  };
  const Case cases[] = {
      {"voluntary_ctxt_switches", 11},
      {"nonvoluntary_ctxt_switches", 7},
      {"write_bytes", 9},
      {"read_bytes", 4096},
      {"nr_throttled", 3},
      {"MemTotal", 16384000},  // last line, no newline
      {"Name", std::nullopt},
      {"empty", std::nullopt},
      {"missing", std::nullopt},
      {"read", std::nullopt},  // a prefix of a key
  };
  for (const Case& c : cases) EXPECT_EQ(FindU64Field(status, c.key), c.want) << c.key;
}

TEST(ParseMeminfo, Table) {
  auto mem = ParseMeminfo("MemTotal:       16384000 kB\nMemFree: 1 kB\nMemAvailable: 1024 kB\n");
  EXPECT_EQ(mem.total_bytes, 16384000ull * 1024);
  EXPECT_EQ(mem.available_bytes, 1024ull * 1024);
  mem = ParseMeminfo("MemTotal: 2048 kB\nMemFree: 1024 kB\n");  // before Linux 3.14
  EXPECT_EQ(mem.total_bytes, 2048ull * 1024);
  EXPECT_FALSE(mem.available_bytes);
  mem = ParseMeminfo("MemTotal: lots\n");
  EXPECT_FALSE(mem.total_bytes);
}

TEST(ParseLoadavg, Table) {
  auto load = ParseLoadavg("2.50 1.75 1.00 3/456 7890\n");
  ASSERT_TRUE(load);
  EXPECT_DOUBLE_EQ(load->load1, 2.5);
  EXPECT_DOUBLE_EQ(load->load5, 1.75);
  EXPECT_DOUBLE_EQ(load->load15, 1.0);
  EXPECT_EQ(load->procs_running, 3u);
  for (std::string_view bad : {"", "0.5 0.6", "0.5 0.6 0.7 3", "a b c 1/2 3", "1 2 3 x/4 5"}) {
    EXPECT_FALSE(ParseLoadavg(bad)) << bad;
  }
}

TEST(ParsePressure, Table) {
  auto psi = ParsePressure(
      "some avg10=12.50 avg60=10.00 avg300=5.00 total=1000000\n"
      "full avg10=3.25 avg60=0.00 avg300=0.00 total=7\n");
  ASSERT_TRUE(psi);
  EXPECT_DOUBLE_EQ(psi->some_avg10_pct, 12.5);
  EXPECT_EQ(psi->some_total_us, 1000000u);
  EXPECT_EQ(psi->full_avg10_pct, 3.25);
  // cpu before Linux 5.13 has no "full" line.
  psi = ParsePressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n");
  ASSERT_TRUE(psi);
  EXPECT_FALSE(psi->full_avg10_pct);
  for (std::string_view bad : {"", "full avg10=1.00 total=3\n", "some avg10=x total=1\n",
                               "some avg60=1.00 total=1\n", "some avg10=1.00 total=-1\n"}) {
    EXPECT_FALSE(ParsePressure(bad)) << bad;
  }
}

TEST(ParseDiskstatsLine, Table) {
  struct Case {
    std::string_view line;
    bool ok;
    std::string_view name = {};
    uint64_t sectors_read = 0, sectors_written = 0;
  };
  const Case cases[] = {
      // Linux 5.5+: 20 fields (discard and flush counters).
      {" 259       0 nvme0n1 88000 1200 4000000 41000 52000 3400 2000000 98000 0 61000 139000 0 "
       "0 0 0 2100 900",
       true, "nvme0n1", 4000000, 2000000},
      {"   8       0 sda 100 0 800 10 50 0 400 20 0 30 30", true, "sda", 800, 400},  // 2.6
      {"   8      16 sdb 1 2", false},
      {"   8      16", false},
      {"x 16 sdb 100 0 800 10 50 0 400 20 0 30 30", false},
      {"8 16 sdb 100 0 8x0 10 50 0 400 20 0 30 30", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    auto disk = ParseDiskstatsLine(c.line);
    ASSERT_EQ(disk.has_value(), c.ok);
    if (!c.ok) continue;
    EXPECT_EQ(disk->name, c.name);
    EXPECT_EQ(disk->sectors_read, c.sectors_read);
    EXPECT_EQ(disk->sectors_written, c.sectors_written);
  }
}

TEST(DiskNames, Table) {
  struct Case {
    std::string_view name;
    bool is_virtual;
    bool looks_like_partition;
  };
  const Case cases[] = {
      {"nvme0n1", false, false}, {"nvme0n1p1", false, true}, {"nvme10n2p13", false, true},
      {"sda", false, false},     {"sda1", false, true},      {"sdaa12", false, true},
      {"vdb", false, false},     {"vdb2", false, true},      {"xvdf", false, false},
      {"xvdf1", false, true},    {"mmcblk0", false, false},  {"mmcblk0p2", false, true},
      {"loop0", true, false},    {"loop0p1", false, true},   {"dm-0", true, false},
      {"md127", true, false},    {"zram0", true, false},     {"ram15", true, false},
      {"sr0", true, false},      {"nbd0", false, false},     {"sdp", false, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(IsVirtualDiskName(c.name), c.is_virtual) << c.name;
    EXPECT_EQ(LooksLikePartitionName(c.name), c.looks_like_partition) << c.name;
  }
}

TEST(ParseCpuMax, Table) {
  struct Case {
    std::string_view text;
    bool ok;
    bool unlimited = false;
    uint64_t quota_us = 0, period_us = 0;
  };
  const Case cases[] = {
      {"max 100000\n", true, true, 0, 100000},
      {"200000 100000\n", true, false, 200000, 100000},  // 2 CPUs
      {"50000 100000", true, false, 50000, 100000},
      {"max\n", false},
      {"", false},
      {"abc 100000\n", false},
      {"100 0\n", false},  // a zero period would divide by zero
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto max = ParseCpuMax(c.text);
    ASSERT_EQ(max.has_value(), c.ok);
    if (!c.ok) continue;
    EXPECT_EQ(max->unlimited, c.unlimited);
    EXPECT_EQ(max->quota_us, c.quota_us);
    EXPECT_EQ(max->period_us, c.period_us);
  }
}

TEST(ParseMemoryMax, Table) {
  auto max = ParseMemoryMax("max\n");
  ASSERT_TRUE(max);
  EXPECT_FALSE(max->limit_bytes);
  max = ParseMemoryMax("68719476736\n");
  ASSERT_TRUE(max);
  EXPECT_EQ(max->limit_bytes, 68719476736u);
  EXPECT_FALSE(ParseMemoryMax(""));
  EXPECT_FALSE(ParseMemoryMax("12k\n"));
}

TEST(ParseCgroupV2Path, Table) {
  struct Case {
    std::string_view text;
    std::optional<std::string_view> want;
  };
  const Case cases[] = {
      {"0::/job.slice/train.scope\n", "/job.slice/train.scope"},
      {"0::/\n", "/"},
      {"4:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/docker/abc\n", "/docker/abc"},
      {"4:memory:/user.slice\n3:cpu,cpuacct:/user.slice\n", std::nullopt},  // v1 only
      {"", std::nullopt},
  };
  for (const Case& c : cases) EXPECT_EQ(ParseCgroupV2Path(c.text), c.want) << c.text;
}

TEST(ParseCpuList, Table) {
  struct Case {
    std::string_view text;
    bool ok;
    std::vector<uint32_t> want = {};
  };
  const Case cases[] = {
      {"0-3\n", true, {0, 1, 2, 3}},
      {"0-1,8,10-11", true, {0, 1, 8, 10, 11}},
      {"5", true, {5}},
      {"\n", true, {}},  // an empty cpuset
      {"", true, {}},
      {"3-1", false},
      {"1,,2", false},
      {"1,", false},
      {"-1", false},
      {"a-b", false},
      {"0-4294967295", false},  // hostile: would be 4 billion entries
      {"0-8191", true},
      {"0-8191,0", false},  // over the cap in total
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    std::vector<uint32_t> out = {99};
    EXPECT_EQ(ParseCpuList(c.text, out), c.ok);
    if (!c.ok) {
      EXPECT_TRUE(out.empty());
    } else if (c.text == "0-8191") {
      EXPECT_EQ(out.size(), 8192U);
    } else {
      EXPECT_EQ(out, c.want);
    }
  }
}

// /proc/PID/task/TID/children: "pid pid " with a trailing blank, empty for no children.
TEST(AppendPidList, Table) {
  struct Case {
    std::string_view text;
    std::vector<int32_t> want;
    uint32_t bad;
  };
  const Case cases[] = {
      {"", {}, 0},
      {"\n", {}, 0},
      {"4243 ", {4243}, 0},
      {"4243 4250 17 ", {4243, 4250, 17}, 0},
      {"4243 4250", {4243, 4250}, 0},              // no trailing blank
      {"4243\n4250\n", {4243, 4250}, 0},           // newlines as separators
      {"12 x 0 -5 99999999999 13 ", {12, 13}, 4},  // hostile: not pids, zero, negative, overflow
      {"12a 13 ", {13}, 1},                        // truncated mid-write
  };
  for (const Case& c : cases) {
    std::vector<int32_t> out = {1};  // appended to, not cleared
    EXPECT_EQ(AppendPidList(c.text, out), c.bad) << c.text;
    std::vector<int32_t> want = {1};
    want.insert(want.end(), c.want.begin(), c.want.end());
    EXPECT_EQ(out, want) << c.text;
  }
}

}  // namespace
}  // namespace stallscope::host
