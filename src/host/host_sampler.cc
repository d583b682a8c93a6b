// HostSampler: /proc/stat, meminfo, loadavg, pressure, diskstats, cgroup v2 and /dev/shm.

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cmath>
#include <utility>

#include "base/units.h"
#include "host/file_reader.h"
#include "host/host.h"
#include "host/proc_parse.h"

namespace stallscope::host {
namespace {

constexpr uint64_t kSectorBytes = 512;  // iostats.rst: diskstats sectors are always 512 bytes

/// Shares of `cur - prev`; empty when a counter went backwards or no tick passed.
std::optional<CpuShares> Shares(const CpuTimes& prev, const CpuTimes& cur) {
  if (cur.user < prev.user || cur.nice < prev.nice || cur.system < prev.system ||
      cur.idle < prev.idle || cur.iowait < prev.iowait || cur.irq < prev.irq ||
      cur.softirq < prev.softirq || cur.steal < prev.steal) {
    return std::nullopt;
  }
  const uint64_t total = cur.Total() - prev.Total();
  if (total == 0) return std::nullopt;
  const double scale = 100.0 / static_cast<double>(total);
  auto pct = [scale](uint64_t delta) { return static_cast<double>(delta) * scale; };
  CpuShares s;
  s.user_pct = pct(cur.user - prev.user + cur.nice - prev.nice);
  s.system_pct = pct(cur.system - prev.system + cur.irq - prev.irq + cur.softirq - prev.softirq);
  s.iowait_pct = pct(cur.iowait - prev.iowait);
  s.steal_pct = pct(cur.steal - prev.steal);
  // Computed from the busy ticks, not as 100 - idle - iowait: that subtraction gives -1e-14
  // on an idle CPU (regression: HostSamplerLive.RealProc failed in CI on an idle core).
  const uint64_t idle = (cur.idle - prev.idle) + (cur.iowait - prev.iowait);
  s.busy_pct = pct(total > idle ? total - idle : 0);
  return s;
}

/// Rate per second of a counter delta over `interval_ns` (> 0), rounded to the nearest unit.
uint64_t PerSecond(uint64_t delta, int64_t interval_ns) {
  return static_cast<uint64_t>(
      std::llround(static_cast<double>(delta) * static_cast<double>(kNsPerSec) /
                   static_cast<double>(interval_ns)));
}

/// Growth of a counter; a counter that went backwards (reset, device re-added) grew by 0.
uint64_t Growth(uint64_t prev, uint64_t cur) { return cur >= prev ? cur - prev : 0; }

bool IsDirectory(const char* path) {
  struct stat st {};
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/// True for filesystems that make a file's content anew on each read from offset 0 (seq_file:
/// procfs; kernfs: cgroup v1 and v2). A kept fd of any other file (a fixture of regular files,
/// replaced by rename or rewritten between samples) could see an old or half-written file.
bool RegeneratesOnRead(int fd) {
  struct statfs sfs {};
  if (fstatfs(fd, &sfs) != 0) return false;
  return sfs.f_type == PROC_SUPER_MAGIC || sfs.f_type == CGROUP2_SUPER_MAGIC ||
         sfs.f_type == CGROUP_SUPER_MAGIC;
}

/// errnos that say a file is not there for us (no pressure files before Linux 4.20, no cgroup v2
/// controller files, EOPNOTSUPP from pressure files with psi=0), as opposed to a passing failure.
bool IsAbsent(int err) {
  return err == ENOENT || err == ENOTDIR || err == EOPNOTSUPP || err == EACCES || err == EPERM;
}

/// One file read on every sample, by absolute path.
struct SampledFile {
  std::string path;
  ScopedFd fd;               // kept open between samples (procfs/cgroupfs only), re-read with pread
  std::optional<bool> keep;  // RegeneratesOnRead, found out on the first successful open
  std::optional<int64_t> absent_since_ns;  // not opened again before kReprobeNs after this
};

struct DiskCounters {
  uint32_t major = 0, minor = 0;
  uint64_t sectors_read = 0, sectors_written = 0;
};

struct DiskClass {
  uint32_t major = 0, minor = 0;
  bool counted = false;  ///< a whole, physical disk
};

}  // namespace

struct HostSampler::State {
  explicit State(const ProcFs& fs);

  FileReader reader;
  SampledFile stat, meminfo, loadavg, diskstats;
  SampledFile pressure[3];                    // cpu, io, memory
  SampledFile cpu_max, cpu_stat, memory_max;  // paths set by ResolveCgroupDir
  std::string path;                           // scratch for sysfs lookups
  std::optional<int64_t> prev_slow_ns;        // when the slow files were last read
  int64_t slow_period_ns = 0;                 // 0: every sample
  ProcStat prev_stat, cur_stat;
  std::vector<DiskCounters> prev_disks, cur_disks;
  std::vector<DiskClass> disk_classes;  // each device is classified once
  std::optional<bool> sys_block_exists;
  std::optional<uint64_t> prev_psi_total_us[3];
  std::optional<std::string> cgroup_dir;  // resolved on the first sample
  std::optional<uint64_t> prev_nr_throttled, prev_throttled_us;
  ScopedFd shm_dir;  // the real /dev/shm (tmpfs), kept open: fstatvfs, no path walk per sample

  int64_t now_ns = 0;  // of the sample being taken

  int Read(SampledFile& file);
  void ReadCpu(HostSample& out);
  void ReadMemoryAndLoad(HostSample& out);
  void ReadPressure(HostSample& out);
  void ReadDisks(const ProcFs& fs, std::optional<int64_t> interval_ns, HostSample& out);
  bool CountDisk(const ProcFs& fs, const DiskLine& disk);
  void ResolveCgroupDir(const ProcFs& fs);
  void ReadCgroup(const ProcFs& fs, HostSample& out);
  void ReadShm(const ProcFs& fs, HostSample& out);
};

HostSampler::State::State(const ProcFs& fs) {
  stat.path = fs.proc_root + "/stat";
  meminfo.path = fs.proc_root + "/meminfo";
  loadavg.path = fs.proc_root + "/loadavg";
  diskstats.path = fs.proc_root + "/diskstats";
  pressure[0].path = fs.proc_root + "/pressure/cpu";
  pressure[1].path = fs.proc_root + "/pressure/io";
  pressure[2].path = fs.proc_root + "/pressure/memory";
}

int HostSampler::State::Read(SampledFile& file) {
  if (file.fd.valid()) {
    const int err = reader.ReadFd(file.fd.get());
    // A kept file that fails (a cgroup removed: ENODEV) is opened anew on the next sample.
    if (err != 0) file.fd = ScopedFd();
    return err;
  }
  if (file.absent_since_ns) {
    if (now_ns - *file.absent_since_ns < kReprobeNs) return ENOENT;
    file.absent_since_ns.reset();
  }
  const bool may_keep = file.keep.value_or(true);
  ScopedFd fd;
  const int err = reader.ReadAt(AT_FDCWD, file.path.c_str(), may_keep ? &fd : nullptr);
  if (err != 0) {
    if (IsAbsent(err)) file.absent_since_ns = now_ns;
    return err;
  }
  if (!file.keep) file.keep = RegeneratesOnRead(fd.get());
  if (*file.keep) file.fd = std::move(fd);
  return 0;
}

void HostSample::Clear() {
  std::vector<CpuShares> keep = std::move(per_cpu);
  keep.clear();
  *this = HostSample{};
  per_cpu = std::move(keep);
}

HostSampler::HostSampler(ProcFs fs) : fs_(std::move(fs)), state_(std::make_shared<State>(fs_)) {}

void HostSampler::SetSlowPeriod(int64_t period_ns) { state_->slow_period_ns = period_ns; }

void HostSampler::Sample(int64_t now_ns, HostSample& out) {
  out.Clear();
  State& st = *state_;
  st.now_ns = now_ns;
  st.ReadCpu(out);
  // The slow files: at most once per slow period (samples wake a little early or late: a tenth
  // of the period's slack). Their rates and deltas are since their last read.
  const int64_t slack = st.slow_period_ns / 10;
  if (st.prev_slow_ns && now_ns + slack < *st.prev_slow_ns + st.slow_period_ns) return;
  std::optional<int64_t> interval_ns;
  if (st.prev_slow_ns && now_ns > *st.prev_slow_ns) interval_ns = now_ns - *st.prev_slow_ns;
  st.ReadMemoryAndLoad(out);
  st.ReadPressure(out);
  st.ReadDisks(fs_, interval_ns, out);
  st.ReadCgroup(fs_, out);
  st.ReadShm(fs_, out);
  st.prev_slow_ns = now_ns;
  out.slow_read = true;
}

void CarrySlowFields(const HostSample& before, HostSample& now) {
  if (now.slow_read) return;
  now.mem_total_bytes = before.mem_total_bytes;
  now.mem_available_bytes = before.mem_available_bytes;
  now.mem_used_bytes = before.mem_used_bytes;
  now.load1 = before.load1;
  now.load5 = before.load5;
  now.load15 = before.load15;
  now.procs_running = before.procs_running;
  now.psi_cpu = before.psi_cpu;
  now.psi_io = before.psi_io;
  now.psi_memory = before.psi_memory;
  now.disk_read_bps = before.disk_read_bps;
  now.disk_write_bps = before.disk_write_bps;
  now.cgroup_cpu_quota_cpus = before.cgroup_cpu_quota_cpus;
  now.cgroup_nr_throttled_delta = before.cgroup_nr_throttled_delta;
  now.cgroup_throttled_us_delta = before.cgroup_throttled_us_delta;
  now.cgroup_mem_limit_bytes = before.cgroup_mem_limit_bytes;
  now.shm_total_bytes = before.shm_total_bytes;
  now.shm_used_bytes = before.shm_used_bytes;
}

void HostSampler::State::ReadShm(const ProcFs& fs, HostSample& out) {
  struct statvfs vfs {};
  bool ok = false;
  if (shm_dir.valid()) {
    ok = fstatvfs(shm_dir.get(), &vfs) == 0;
  } else {
    // A tmpfs directory (/dev/shm) is kept open; anything else (a fixture directory, which a
    // test may remove) is looked up by path on every sample.
    ScopedFd dir(::open(fs.shm_path.c_str(), O_PATH | O_CLOEXEC));
    struct statfs sfs {};
    ok = dir.valid() && fstatvfs(dir.get(), &vfs) == 0;
    if (ok && fstatfs(dir.get(), &sfs) == 0 && sfs.f_type == TMPFS_MAGIC) {
      shm_dir = std::move(dir);
    }
  }
  if (ok) {
    out.shm_total_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
    out.shm_used_bytes = static_cast<uint64_t>(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize;
  }
}

void HostSampler::State::ReadCpu(HostSample& out) {
  cur_stat.total.reset();
  cur_stat.per_cpu.clear();
  if (Read(stat) == 0) {
    ParseProcStat(reader.data(), cur_stat);
    out.malformed_records += cur_stat.malformed_lines;
  }
  out.cpu_count = static_cast<uint32_t>(cur_stat.per_cpu.size());
  if (prev_stat.total && cur_stat.total) out.cpu = Shares(*prev_stat.total, *cur_stat.total);
  // Per-CPU shares only when the same CPUs are listed in both samples (hotplug changes the list),
  // and all or nothing, so per_cpu[i] is always the i-th listed CPU.
  const auto& prev = prev_stat.per_cpu;
  const auto& cur = cur_stat.per_cpu;
  // Reserve even when no shares come out (no ticks yet), so a later sample never allocates.
  out.per_cpu.reserve(cur.size());
  bool same = !cur.empty() && prev.size() == cur.size();
  for (size_t i = 0; same && i < cur.size(); ++i) same = prev[i].cpu_id == cur[i].cpu_id;
  for (size_t i = 0; same && i < cur.size(); ++i) {
    auto shares = Shares(prev[i], cur[i]);
    if (!shares) same = false;
    if (shares) out.per_cpu.push_back(*shares);
  }
  if (!same) out.per_cpu.clear();
  std::swap(prev_stat, cur_stat);
}

void HostSampler::State::ReadMemoryAndLoad(HostSample& out) {
  if (Read(meminfo) == 0) {
    const MemInfo mem = ParseMeminfo(reader.data());
    out.mem_total_bytes = mem.total_bytes;
    out.mem_available_bytes = mem.available_bytes;
    if (mem.total_bytes && mem.available_bytes) {
      out.mem_used_bytes = Growth(*mem.available_bytes, *mem.total_bytes);
    }
    if (!mem.total_bytes) ++out.malformed_records;
  }
  if (Read(loadavg) == 0) {
    if (auto load = ParseLoadavg(reader.data())) {
      out.load1 = load->load1;
      out.load5 = load->load5;
      out.load15 = load->load15;
      out.procs_running = load->procs_running;
    } else {
      ++out.malformed_records;
    }
  }
}

void HostSampler::State::ReadPressure(HostSample& out) {
  // Linux >= 4.20 with CONFIG_PSI; a missing file or EOPNOTSUPP (psi=0) leaves the field empty.
  std::optional<Pressure>* const fields[3] = {&out.psi_cpu, &out.psi_io, &out.psi_memory};
  for (int i = 0; i < 3; ++i) {
    std::optional<uint64_t>& prev_total = prev_psi_total_us[i];
    if (Read(pressure[i]) != 0) {
      prev_total.reset();
      continue;
    }
    auto psi = ParsePressure(reader.data());
    if (!psi) {
      ++out.malformed_records;
      prev_total.reset();
      continue;
    }
    Pressure p;
    p.some_avg10_pct = psi->some_avg10_pct;
    p.full_avg10_pct = psi->full_avg10_pct;
    if (prev_total) p.some_stall_us_delta = Growth(*prev_total, psi->some_total_us);
    prev_total = psi->some_total_us;
    *fields[i] = p;
  }
}

bool HostSampler::State::CountDisk(const ProcFs& fs, const DiskLine& disk) {
  for (const DiskClass& c : disk_classes) {
    if (c.major == disk.major && c.minor == disk.minor) return c.counted;
  }
  if (!sys_block_exists) {
    path.assign(fs.sys_root).append("/block");
    sys_block_exists = IsDirectory(path.c_str());
  }
  bool counted = !IsVirtualDiskName(disk.name);
  if (counted && *sys_block_exists) {
    // /sys/block lists whole disks only; partitions live under their disk.
    path.assign(fs.sys_root).append("/block/").append(disk.name);
    counted = IsDirectory(path.c_str());
  } else if (counted) {
    counted = !LooksLikePartitionName(disk.name);
  }
  disk_classes.push_back({disk.major, disk.minor, counted});
  return counted;
}

void HostSampler::State::ReadDisks(const ProcFs& fs, std::optional<int64_t> interval_ns,
                                   HostSample& out) {
  cur_disks.clear();
  if (Read(diskstats) != 0) {
    prev_disks.clear();
    return;
  }
  const std::string_view text = reader.data();
  size_t pos = 0;
  while (auto line = NextLine(text, pos)) {
    if (line->empty()) continue;
    auto disk = ParseDiskstatsLine(*line);
    if (!disk) {
      ++out.malformed_records;
      continue;
    }
    if (!CountDisk(fs, *disk)) continue;
    cur_disks.push_back({disk->major, disk->minor, disk->sectors_read, disk->sectors_written});
  }
  if (interval_ns && !prev_disks.empty()) {
    // Match by device number so a disk that appears or vanishes does not make a jump.
    uint64_t read_sectors = 0, written_sectors = 0;
    for (const DiskCounters& cur : cur_disks) {
      for (const DiskCounters& prev : prev_disks) {
        if (prev.major != cur.major || prev.minor != cur.minor) continue;
        read_sectors += Growth(prev.sectors_read, cur.sectors_read);
        written_sectors += Growth(prev.sectors_written, cur.sectors_written);
        break;
      }
    }
    out.disk_read_bps = PerSecond(read_sectors * kSectorBytes, *interval_ns);
    out.disk_write_bps = PerSecond(written_sectors * kSectorBytes, *interval_ns);
  }
  std::swap(prev_disks, cur_disks);
}

void HostSampler::State::ResolveCgroupDir(const ProcFs& fs) {
  // Our own cgroup from /proc/self/cgroup ("0::/path"). Inside a container without a cgroup
  // namespace that path does not exist under the mount, which is then our cgroup itself.
  cgroup_dir = fs.cgroup_root;
  if (reader.ReadPath(fs.proc_root, "/self/cgroup") == 0) {
    auto rel = ParseCgroupV2Path(reader.data());
    if (rel && *rel != "/") {
      std::string candidate = fs.cgroup_root;
      candidate.append(*rel);
      if (IsDirectory(candidate.c_str())) cgroup_dir = std::move(candidate);
    }
  }
  cpu_max.path = *cgroup_dir + "/cpu.max";
  cpu_stat.path = *cgroup_dir + "/cpu.stat";
  memory_max.path = *cgroup_dir + "/memory.max";
}

void HostSampler::State::ReadCgroup(const ProcFs& fs, HostSample& out) {
  if (!cgroup_dir) ResolveCgroupDir(fs);
  if (Read(cpu_max) == 0) {
    if (auto max = ParseCpuMax(reader.data())) {
      if (!max->unlimited) {
        out.cgroup_cpu_quota_cpus =
            static_cast<double>(max->quota_us) / static_cast<double>(max->period_us);
      }
    } else {
      ++out.malformed_records;
    }
  }
  std::optional<uint64_t> nr_throttled, throttled_us;
  if (Read(cpu_stat) == 0) {
    nr_throttled = FindU64Field(reader.data(), "nr_throttled");
    throttled_us = FindU64Field(reader.data(), "throttled_usec");
  }
  if (nr_throttled && prev_nr_throttled) {
    out.cgroup_nr_throttled_delta = Growth(*prev_nr_throttled, *nr_throttled);
  }
  if (throttled_us && prev_throttled_us) {
    out.cgroup_throttled_us_delta = Growth(*prev_throttled_us, *throttled_us);
  }
  prev_nr_throttled = nr_throttled;
  prev_throttled_us = throttled_us;
  if (Read(memory_max) == 0) {
    if (auto max = ParseMemoryMax(reader.data())) {
      out.cgroup_mem_limit_bytes = max->limit_bytes;
    } else {
      ++out.malformed_records;
    }
  }
}

}  // namespace stallscope::host
