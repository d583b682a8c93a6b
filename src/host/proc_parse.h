#pragma once

// Pure parsers for /proc, cgroup v2 and sysfs text. No I/O and no allocation beyond the output
// containers the caller passes (reused between samples). A parser returns an empty optional for
// input it cannot read; callers count that as a malformed record and go on.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stallscope::host {

/// Splits `text` at '\n'. Returns the next line (without '\n') and advances `pos`; empty
/// optional at the end. The last line needs no trailing newline.
std::optional<std::string_view> NextLine(std::string_view text, size_t& pos);

/// The unsigned integer at the start of `text` after leading blanks; empty when there is none.
std::optional<uint64_t> ParseU64(std::string_view text);

/// Finds the line that starts with `key` followed by ':' or a blank, and parses the integer
/// after it ("MemTotal:  123 kB", "read_bytes: 5", "nr_throttled 3"). Empty when absent or bad.
std::optional<uint64_t> FindU64Field(std::string_view text, std::string_view key);

/// Jiffies of one "cpu" / "cpuN" line of /proc/stat (proc(5)). user includes guest and nice
/// includes guest_nice, so guest fields are not read.
struct CpuTimes {
  uint32_t cpu_id = 0;  ///< N of "cpuN"; 0 for the aggregate line
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;

  uint64_t Total() const { return user + nice + system + idle + iowait + irq + softirq + steal; }
};

/// The CPU lines of /proc/stat.
struct ProcStat {
  std::optional<CpuTimes> total;  ///< the "cpu" line
  std::vector<CpuTimes> per_cpu;  ///< "cpuN" lines in file order
  uint32_t malformed_lines = 0;   ///< cpu lines with fewer than 4 numbers (skipped)
};

/// Parses /proc/stat into `out` (cleared first, capacity kept). Lines with at least the four
/// fields of Linux 2.4 (user nice system idle) count; later fields missing read as 0.
void ParseProcStat(std::string_view text, ProcStat& out);

/// /proc/meminfo levels in bytes.
struct MemInfo {
  std::optional<uint64_t> total_bytes;
  std::optional<uint64_t> available_bytes;  ///< MemAvailable: Linux >= 3.14
};
MemInfo ParseMeminfo(std::string_view text);

/// /proc/loadavg: "0.52 0.58 0.59 2/1234 56789".
struct LoadAvg {
  double load1 = 0, load5 = 0, load15 = 0;
  uint32_t procs_running = 0;
};
std::optional<LoadAvg> ParseLoadavg(std::string_view text);

/// One /proc/pressure/* file (Documentation/accounting/psi.rst):
/// "some avg10=0.00 avg60=0.00 avg300=0.00 total=0" and, except cpu on old kernels, "full ...".
struct PsiReading {
  double some_avg10_pct = 0;
  uint64_t some_total_us = 0;
  std::optional<double> full_avg10_pct;
};
std::optional<PsiReading> ParsePressure(std::string_view text);

/// One /proc/diskstats line (Documentation/admin-guide/iostats.rst).
struct DiskLine {
  uint32_t major = 0, minor = 0;
  std::string_view name;         ///< points into the parsed text
  uint64_t sectors_read = 0;     ///< field 6; sectors are 512 bytes whatever the device
  uint64_t sectors_written = 0;  ///< field 10
};
/// Parses one line; empty when it has fewer than the 14 fields of Linux 2.6.
std::optional<DiskLine> ParseDiskstatsLine(std::string_view line);

/// Devices whose I/O is also counted on a physical disk (loop, ram, zram, device mapper, md
/// RAID) or that are not data disks (sr, fd). Excluded from the disk rates.
bool IsVirtualDiskName(std::string_view name);

/// Name heuristic for partitions when /sys/block is not available: "<...digit>p<digits>"
/// (nvme0n1p1, mmcblk0p2) or "(sd|vd|xvd|hd)<letters><digits>" (sda1, xvdb3).
bool LooksLikePartitionName(std::string_view name);

/// cgroup v2 cpu.max: "$MAX $PERIOD", where $MAX may be "max".
struct CpuMax {
  bool unlimited = false;
  uint64_t quota_us = 0;
  uint64_t period_us = 0;
};
std::optional<CpuMax> ParseCpuMax(std::string_view text);

/// cgroup v2 memory.max: a byte count or "max".
struct MemoryMax {
  std::optional<uint64_t> limit_bytes;  ///< empty = "max" (no limit)
};
std::optional<MemoryMax> ParseMemoryMax(std::string_view text);

/// The cgroup v2 path of a process from /proc/PID/cgroup: the "0::/path" line. Empty on
/// cgroup-v1-only hosts.
std::optional<std::string_view> ParseCgroupV2Path(std::string_view text);

/// Parses a kernel CPU list ("0-3,8,10-11\n": Cpus_allowed_list of /proc/PID/status, sysfs
/// cpulist files; Documentation/admin-guide/cgroup-v2.rst "cpuset.cpus") into `out` (cleared
/// first), ascending as written. An empty list is valid. False when malformed, when a range
/// runs backwards, or past kMaxCpuListCpus CPUs (a hostile "0-4294967295").
bool ParseCpuList(std::string_view text, std::vector<uint32_t>& out);
/// The most CPUs ParseCpuList accepts (Linux's NR_CPUS is at most 8192).
inline constexpr uint32_t kMaxCpuListCpus = 8192;

/// The fields of /proc/PID/stat (proc(5)) that we use.
struct PidStat {
  int32_t pid = 0;
  std::string_view comm;  ///< between the first '(' and the LAST ')': comm may hold both
  char state = '?';
  int32_t ppid = 0;
  uint64_t utime_ticks = 0, stime_ticks = 0;  ///< fields 14, 15
  uint32_t num_threads = 0;                   ///< field 20
  uint64_t start_time_ticks = 0;              ///< field 22: tells a reused pid apart
  uint64_t rss_pages = 0;                     ///< field 24; negative values read as 0
};
/// Parses /proc/PID/stat (also /proc/PID/task/TID/stat). Empty when truncated or malformed.
std::optional<PidStat> ParsePidStat(std::string_view text);

/// Appends the pids of a blank-separated list ("123 456 ", /proc/PID/task/TID/children) to `out`.
/// Returns how many tokens were not pids (skipped).
uint32_t AppendPidList(std::string_view text, std::vector<int32_t>& out);

/// Writes /proc/PID/cmdline (NUL-separated argv, usually NUL-terminated) into `out` with the
/// separators as spaces and no trailing space. Reuses `out`'s capacity.
void JoinCmdline(std::string_view raw, std::string& out);

}  // namespace stallscope::host
