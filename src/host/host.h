#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace stallscope::host {

/// Where /proc, /sys/fs/cgroup, /dev/shm and /sys are. Tests point these at fixtures
/// (tests/data/proc/...); production uses the real paths.
struct ProcFs {
  std::string proc_root = "/proc";
  std::string cgroup_root = "/sys/fs/cgroup";  ///< cgroup v2 unified mount
  std::string shm_path = "/dev/shm";
  /// sysfs: a disk in <sys_root>/block is a whole disk (partitions are not listed there). When
  /// <sys_root>/block does not exist, partitions are told apart by name (nvme0n1p1, sda1, ...).
  std::string sys_root = "/sys";
};

/// CPU time shares over the interval since the previous sample, in percent of that CPU's time
/// (0..100). For the total, percent of all CPUs together.
struct CpuShares {
  double busy_pct = 0;    ///< 100 - idle - iowait
  double user_pct = 0;    ///< user + nice
  double system_pct = 0;  ///< system + irq + softirq
  double iowait_pct = 0;
  double steal_pct = 0;
};

/// Pressure stall information (/proc/pressure/*): "some" avg10 and the total stall delta.
struct Pressure {
  double some_avg10_pct = 0;
  std::optional<double> full_avg10_pct;  ///< cpu has no "full" line on older kernels
  uint64_t some_stall_us_delta =
      0;  ///< growth of some total= since the previous sample (0 the first time)
};

/// Whole-host reading. Fields that could not be read are empty.
struct HostSample {
  uint32_t cpu_count = 0;          ///< online CPUs seen in /proc/stat
  std::optional<CpuShares> cpu;    ///< empty on the first sample (needs a delta)
  std::vector<CpuShares> per_cpu;  ///< empty on the first sample
  std::optional<uint64_t> mem_total_bytes;
  std::optional<uint64_t> mem_available_bytes;
  std::optional<uint64_t> mem_used_bytes;  ///< total - available
  std::optional<double> load1, load5, load15;
  std::optional<uint32_t> procs_running;  ///< runnable tasks, from /proc/loadavg
  std::optional<Pressure> psi_cpu, psi_io, psi_memory;
  std::optional<uint64_t> disk_read_bps;  ///< bytes/s summed over whole disks (not partitions)
  std::optional<uint64_t> disk_write_bps;
  std::optional<double> cgroup_cpu_quota_cpus;        ///< cpu.max quota/period; empty = "max"
  std::optional<uint64_t> cgroup_nr_throttled_delta;  ///< cpu.stat since previous sample
  std::optional<uint64_t> cgroup_throttled_us_delta;
  std::optional<uint64_t> cgroup_mem_limit_bytes;  ///< memory.max; empty = "max"
  std::optional<uint64_t> shm_total_bytes;         ///< /dev/shm (statvfs)
  std::optional<uint64_t> shm_used_bytes;
  /// Lines or files that exist but could not be parsed in this sample (skipped, not fatal).
  uint32_t malformed_records = 0;
  /// Whether this sample read the slow files (HostSampler::SetSlowPeriod); when not, the fields
  /// from mem_total_bytes to shm_used_bytes are empty.
  bool slow_read = false;

  /// Empties every field, keeping container capacity.
  void Clear();
};

/// For live views (top, serve): when `now` did not read the slow files, their last values come
/// from `before` (the view's previous state). Recordings keep samples as read.
void CarrySlowFields(const HostSample& before, HostSample& now);

/// One process of the followed tree.
struct ProcessSample {
  int32_t pid = 0;
  int32_t ppid = 0;
  std::string comm;     ///< from /proc/PID/stat, between the first '(' and the LAST ')'
  std::string cmdline;  ///< argv joined with spaces; empty for kernel threads / zombies
  char state = '?';     ///< R, S, D, Z, T, I, ...
  std::optional<double>
      cpu_pct;  ///< (utime+stime) delta / interval; 100 = one core; empty first time
  uint64_t rss_bytes = 0;
  uint32_t threads = 0;
  /// Cumulative counters from /proc/PID/io (empty on permission error) and /proc/PID/status,
  /// refreshed at most once a second (ProcessTracker::kSlowRefreshNs): in between, a sample
  /// repeats the last values read. A process seen for the first time has them read at once.
  std::optional<uint64_t> read_bytes;
  std::optional<uint64_t> write_bytes;
  std::optional<uint64_t> voluntary_ctxt_switches;
  std::optional<uint64_t> nonvoluntary_ctxt_switches;
  /// Threads of this process by state at sample time (from /proc/PID/task/*/stat).
  uint32_t threads_running = 0;
  uint32_t threads_blocked = 0;  ///< state D
};

/// Samples whole-host metrics. Keeps previous counters to compute rates; the first call gives
/// levels only (rates empty). Not thread-safe.
///
/// Per sample it reads /proc/{stat,meminfo,loadavg,diskstats,pressure/*} and the cgroup's
/// cpu.max, cpu.stat and memory.max (the cgroup is found once, on the first sample), and
/// statfs()s /dev/shm (kept open when it is a tmpfs, so there is no path lookup per sample). On
/// procfs and cgroupfs those files stay open (up to 10 fds) and are re-read with pread from offset
/// 0, which makes their content anew: one syscall per file instead of open, read, read, close. A
/// kept file whose read fails is closed and opened again on the next sample. Files on other
/// filesystems (fixtures) are opened on every sample, so a file rewritten or replaced by rename
/// between samples is seen. A file that cannot be opened because it is not there (ENOENT, ENOTDIR,
/// EOPNOTSUPP, EACCES, EPERM: no PSI before Linux 4.20 or with psi=0, no cgroup v2 files on a v1
/// host) is not tried again for kReprobeNs. Each disk is classified (whole disk or not, by
/// /sys/block/NAME) once, when first seen.
class HostSampler {
 public:
  explicit HostSampler(ProcFs fs);
  /// Reads everything readable into `out` (cleared first). `now_ns`: monotonic time, for rates
  /// and for the re-probe of absent files.
  void Sample(int64_t now_ns, HostSample& out);

  /// Reads the slow files (memory, load, pressure, disks, cgroup, /dev/shm) at most once per
  /// `period_ns`: CPU shares still come every sample, the other fields only on the samples that
  /// read them (disk rates and pressure/cgroup deltas are since the last read). 0 (the
  /// default): every sample. Issue 28: loadavg and PSI avg10 are themselves 1 min and 10 s
  /// averages, and /proc reads are most of a 10 Hz sample's cost beside NVML's cheap fields.
  void SetSlowPeriod(int64_t period_ns);

  /// An absent file is tried again this long (in `now_ns` time) after it was found absent, in
  /// case it appears (a cgroup controller enabled later): one failed open per file a minute.
  static constexpr int64_t kReprobeNs = 60'000'000'000;

 private:
  struct State;
  ProcFs fs_;
  std::shared_ptr<State> state_;
};

/// How ProcessTracker finds the processes of the tree. Either way the tree is found again every
/// ProcessTracker::kRediscoverNs, and on the sample after one whose processes changed; in
/// between, the processes of the last sample are read again (a process that exited, or whose
/// parent left the tree, drops out at once). So a new process appears within kRediscoverNs.
enum class TreeDiscovery {
  /// Children files when the kernel has them (probed once on the root), else the full scan.
  kAuto,
  /// Breadth-first from the root over /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN, Linux
  /// >= 3.5), every thread of every process: a child is listed under the thread that forked it.
  /// Reads only the tree. proc(5) calls these files unreliable while the tree changes: a
  /// process forked, or re-parented into the tree, during the walk may be missed until the next
  /// walk. Without the files, only the root is found.
  kChildrenFiles,
  /// Every /proc/[0-9]*/stat, linked by ppid. Costs one stat read per process on the host.
  kFullScan,
};

/// Follows the process tree under a root PID (the training job): root, children, grandchildren.
/// Processes appear and vanish between samples without errors. Not thread-safe.
///
/// Per process and sample it reads stat and the task/*/stat files of multithreaded processes
/// (single-threaded ones take the thread state from stat); status and io once per
/// kSlowRefreshNs; when finding the tree by children files, the children file of every thread
/// (once per kRediscoverNs, see TreeDiscovery). cmdline is cached per process (pid +
/// start time, so a reused pid is a new process) and read again when comm changes (exec) or
/// after 10 s (kStaticRefreshNs); so is whether io is readable. On procfs the per-process files
/// stay open between samples and are re-read from offset 0, for up to 64 processes and a
/// quarter of RLIMIT_NOFILE (4 fds each); they are closed when the process leaves the tree.
/// /proc itself stays open too, when it is procfs.
/// Once the buffers and caches have grown, a sample of a steady tree does not allocate.
class ProcessTracker {
 public:
  ProcessTracker(ProcFs fs, int32_t root_pid, TreeDiscovery discovery = TreeDiscovery::kAuto);
  /// Reads the tree into `out` (resized; entries reused). Order: root first, then by pid.
  /// A root that has exited gives an empty tree. `now_ns`: monotonic time, for rates and for
  /// the cache refresh.
  void Sample(int64_t now_ns, std::vector<ProcessSample>& out);
  int32_t root_pid() const { return root_pid_; }
  /// How the last Sample found the tree: kChildrenFiles or kFullScan (kAuto before any sample,
  /// or when /proc could not be opened).
  TreeDiscovery last_discovery() const { return last_discovery_; }
  /// Processes skipped so far (since construction) because their /proc/PID/stat could not be
  /// parsed, plus children-file entries that were not pids. Always 0 on a sane kernel; counts
  /// bad fixtures and kernel surprises.
  uint64_t malformed_records() const;

  /// cmdline and io readability older than this are read again.
  static constexpr int64_t kStaticRefreshNs = 10'000'000'000;
  /// The cumulative counters of status and io (ProcessSample::read_bytes, ...) older than this
  /// are read again; younger ones are repeated. status is the costliest file per process.
  static constexpr int64_t kSlowRefreshNs = 1'000'000'000;
  /// The tree is found again (children walk or full scan) at least this often; see
  /// TreeDiscovery.
  static constexpr int64_t kRediscoverNs = 500'000'000;

 private:
  struct State;
  ProcFs fs_;
  int32_t root_pid_;
  TreeDiscovery discovery_;
  TreeDiscovery last_discovery_ = TreeDiscovery::kAuto;
  std::shared_ptr<State> state_;
};

}  // namespace stallscope::host
