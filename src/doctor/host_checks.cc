#include "doctor/host_checks.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/units.h"
#include "doctor/gpu_checks.h"
#include "doctor/space.h"

namespace stallscope::doctor {
namespace {

using S = CheckStatus;

// Every limit below is a threshold-table entry (base/thresholds.h, "doctor"), with its source:
// shm_min_gib, nofile_min, checkpoint_free_*_gib, data_*, cpu_quota_short_cpus.

/// `gib` GiB in bytes.
double GiB(double gib) { return gib * kGiB; }

std::string WorkersText(const Facts& f) {
  return f.workers ? fmt::format("num_workers={}", *f.workers) : "DataLoader workers";
}

Check ShmCheck(const Facts& f, const ThresholdSet& t) {
  const std::string id = "host.shm";
  const std::string title = "/dev/shm";
  const std::string fix =
      "docker run --shm-size=16g (or --ipc=host); Kubernetes: mount an emptyDir with medium: "
      "Memory at /dev/shm";
  if (!f.host.shm || !f.host.shm->error.empty()) {
    const bool need = !f.workers || *f.workers > 0;
    return MakeCheck(id, title, need ? S::kWarn : S::kOk,
                     fmt::format("not available ({}): {} cannot pass batches through shared memory",
                                 f.host.shm ? f.host.shm->error : "absent", WorkersText(f)),
                     need ? fix : "");
  }
  const SpaceFacts& shm = *f.host.shm;
  const std::string size =
      fmt::format("{} free of {}", FormatBytes(static_cast<double>(shm.free_bytes)),
                  FormatBytes(static_cast<double>(shm.total_bytes)));
  if (f.workers && *f.workers == 0) {
    return MakeCheck(id, title, S::kOk, size + " (not used with num_workers=0)");
  }
  const double want_bytes = GiB(t.shm_min_gib.value);
  if (static_cast<double>(shm.total_bytes) < want_bytes) {
    return MakeCheck(
        id, title, S::kWarn,
        fmt::format("{}: {} pass every batch through /dev/shm, and a container's default 64 MiB "
                    "kills them (\"DataLoader worker ... killed by signal: Bus error\")",
                    size, WorkersText(f)),
        fix);
  }
  if (static_cast<double>(shm.free_bytes) < want_bytes) {
    return MakeCheck(
        id, title, S::kWarn, size + ": nearly full, often of segments left by killed jobs",
        "look at ls -la /dev/shm (torch_* files of jobs that are gone can be removed)");
  }
  return MakeCheck(id, title, S::kOk, size);
}

Check CpusCheck(const Facts& f, const ThresholdSet& t) {
  const std::string id = "host.cpus";
  const std::string title = "CPUs for the input pipeline";
  const HostFacts& h = f.host;
  const uint32_t usable = UsableCpus(h);
  const std::string text = UsableCpusText(h);
  const auto affinity =
      static_cast<double>(h.allowed_cpus.empty() ? h.online_cpus : h.allowed_cpus.size());
  // seed 001 T4: start num_workers at cores - 1; the main process needs the other one.
  const auto headroom = static_cast<uint32_t>(t.worker_headroom_cpus.value);
  const uint32_t advice = std::max<uint32_t>(1, usable > headroom ? usable - headroom : 0);
  if (h.cgroup_quota_cpus && *h.cgroup_quota_cpus + t.cpu_quota_short_cpus.value < affinity) {
    return MakeCheck(
        id, title, S::kWarn,
        fmt::format("{}: torch's threads and len(os.sched_getaffinity(0)) count {:.0f} CPUs "
                    "(os.cpu_count() {}), but the quota lets the job use {:.1f}",
                    text, affinity, h.online_cpus, *h.cgroup_quota_cpus),
        fmt::format("size the job to {}: num_workers={} and OMP_NUM_THREADS={} "
                    "(seed 001 T4/U40), or raise the container's CPU limit",
                    usable, advice, usable));
  }
  if (f.workers && *f.workers == 0 && usable > headroom) {
    return MakeCheck(id, title, S::kWarn,
                     text +
                         ": num_workers=0 loads every batch in the main process while the GPU "
                         "waits (seed 001 T4)",
                     fmt::format("num_workers={} and persistent_workers=True", advice));
  }
  if (f.workers && *f.workers > static_cast<int64_t>(advice) && usable >= 1) {
    return MakeCheck(id, title, S::kWarn,
                     fmt::format("{}: num_workers={} leaves no CPU to the main process, which "
                                 "feeds the GPU",
                                 text, *f.workers),
                     fmt::format("num_workers={} (seed 001 T4: cores - {})", advice, headroom));
  }
  if (f.workers) {
    return MakeCheck(id, title, S::kOk,
                     fmt::format("{}: num_workers={} and the main process fit", text, *f.workers));
  }
  return MakeCheck(id, title, S::kOk,
                   fmt::format("{}: start at num_workers={} (seed 001 T4)", text, advice));
}

Check MemoryCheck(const HostFacts& h) {
  if (!h.mem_total_bytes) return MakeCheck("host.memory", "memory", S::kSkip, "not reported");
  std::string detail = fmt::format("{} RAM", FormatBytes(static_cast<double>(*h.mem_total_bytes)));
  if (h.mem_available_bytes) {
    detail +=
        fmt::format(", {} available", FormatBytes(static_cast<double>(*h.mem_available_bytes)));
  }
  detail += h.cgroup_mem_limit_bytes
                ? fmt::format(
                      ", cgroup limit {} (each DataLoader worker is a process of its own "
                      "within it)",
                      FormatBytes(static_cast<double>(*h.cgroup_mem_limit_bytes)))
                : ", no cgroup limit";
  return MakeCheck("host.memory", "memory", S::kOk, std::move(detail));
}

Check NofileCheck(const Facts& f, const ThresholdSet& t) {
  const std::string id = "host.nofile";
  const std::string title = "open-file limit";
  const HostFacts& h = f.host;
  if (!h.nofile_soft) return MakeCheck(id, title, S::kOk, "unlimited");
  const std::string hard = h.nofile_hard ? fmt::format("{}", *h.nofile_hard) : "unlimited";
  const std::string text = fmt::format("soft {}, hard {}", *h.nofile_soft, hard);
  const double want = t.nofile_min.value;
  if (static_cast<double>(*h.nofile_soft) >= want || (f.workers && *f.workers == 0)) {
    return MakeCheck(id, title, S::kOk, text);
  }
  const bool raisable = !h.nofile_hard || static_cast<double>(*h.nofile_hard) >= want;
  return MakeCheck(
      id, title, S::kWarn,
      fmt::format("{}: {} send batches to the main process as file descriptors (torch's "
                  "file_descriptor sharing strategy); at this limit they fail with \"Too many "
                  "open files\" or \"received 0 items of ancdata\"",
                  text, WorkersText(f)),
      raisable ? fmt::format("ulimit -n {} in the shell that starts the job", hard)
               : "raise the hard limit (limits.conf, or docker run --ulimit nofile=65536:65536), "
                 "or torch.multiprocessing.set_sharing_strategy('file_system')");
}

Check CheckpointCheck(const SpaceFacts& s, const ThresholdSet& t) {
  const std::string id = "storage.checkpoint";
  const std::string title = "checkpoint space";
  if (!s.error.empty()) {
    return MakeCheck(id, title, S::kWarn, fmt::format("{}: {}", s.path, s.error),
                     "point --checkpoint-dir at the directory the job saves to");
  }
  const std::string text =
      fmt::format("{} free of {} in {} ({})", FormatBytes(static_cast<double>(s.free_bytes)),
                  FormatBytes(static_cast<double>(s.total_bytes)), s.path, s.fs_type);
  const auto free_bytes = static_cast<double>(s.free_bytes);
  if (free_bytes < GiB(t.checkpoint_free_fail_gib.value) ||
      (s.inodes_free && *s.inodes_free == 0)) {
    return MakeCheck(id, title, S::kFail,
                     text + (s.inodes_free && *s.inodes_free == 0 ? ", no inodes left" : "") +
                         ": the first torch.save fails",
                     "free space, or save checkpoints elsewhere");
  }
  if (s.fs_type == "overlay" || s.fs_type == "tmpfs") {
    return MakeCheck(
        id, title, S::kWarn,
        text + (s.fs_type == "tmpfs" ? ": memory-backed, lost at reboot and counted against RAM"
                                     : ": the container's own layer, lost with the container"),
        "save checkpoints to a mounted volume or a persistent disk");
  }
  if (free_bytes < GiB(t.checkpoint_free_warn_gib.value)) {
    return MakeCheck(id, title, S::kWarn,
                     text +
                         ": a checkpoint with Adam state takes ~16 bytes per parameter "
                         "(ZeRO, §3.1): 16 GB for 1B parameters",
                     "free space, keep fewer checkpoints, or save elsewhere");
  }
  return MakeCheck(id, title, S::kOk,
                   IsNetworkFs(s.fs_type)
                       ? text +
                             ": a network filesystem: torch.save blocks the step for size / "
                             "bandwidth"
                       : text);
}

std::string Rate(double per_s) {
  return per_s >= 100 ? fmt::format("{:.0f}", per_s) : fmt::format("{:.1f}", per_s);
}

Check DataCheck(const DataFacts& d, const HostFacts& h, const ThresholdSet& t) {
  const std::string id = "storage.data";
  const std::string title = "training data reads";
  if (!d.error.empty())
    return MakeCheck(id, title, S::kFail, fmt::format("{}: {}", d.path, d.error));
  if (d.files == 0 || d.read_seconds <= 0 || d.files_read == 0) {
    return MakeCheck(id, title, S::kFail, fmt::format("{}: no readable file", d.path),
                     "point --data at the directory the Dataset reads");
  }
  const double mean = static_cast<double>(d.total_bytes) / static_cast<double>(d.files);
  const double mbps = static_cast<double>(d.bytes_read) / d.read_seconds / 1e6;
  const double files_per_s = static_cast<double>(d.files_read) / d.read_seconds;
  std::string text = fmt::format(
      "{}: {} files{}, {} ({}, mean file {}); {} MB/s and {} files/s with {} reader{} ({}) "
      "= ~{} samples/s if a file is a sample",
      d.path, d.files, d.scan_truncated ? " (scan stopped there)" : "",
      FormatBytes(static_cast<double>(d.total_bytes)), d.fs_type, FormatBytes(mean), Rate(mbps),
      Rate(files_per_s), d.threads, d.threads == 1 ? "" : "s",
      d.direct_io ? "direct I/O" : d.io_note, Rate(files_per_s));
  const bool random = d.random_reads > 0 && d.random_seconds > 0;
  if (random) {
    text += fmt::format("; 4 KiB random reads: {} IOPS (p50 {:.0f} us, p99 {:.0f} us)",
                        Rate(static_cast<double>(d.random_reads) / d.random_seconds),
                        d.random_latency_p50_us, d.random_latency_p99_us);
  }
  std::string cached;
  if (h.mem_available_bytes && d.total_bytes < *h.mem_available_bytes && !d.scan_truncated) {
    cached = "; it fits in available RAM, so after the first epoch reads come from the page cache";
  }
  const std::string stage = "stage the data on local NVMe (seed 001 U8)";
  const double small_file_bytes = t.data_small_file_mib.value * kMiB;
  if (d.network_fs && mean < small_file_bytes) {
    return MakeCheck(
        id, title, S::kWarn,
        text + ": small files on a network filesystem pay a round trip per open" + cached,
        stage + ", or pack it into shards (tar / WebDataset, seed 001 U25)");
  }
  // Large files are read for their bytes: throughput is the limit. Small ones for their count:
  // latency is (files/s above), and MB/s says little.
  if (mean >= small_file_bytes && mbps < t.data_slow_mbps.value) {
    return MakeCheck(id, title, S::kWarn,
                     text + fmt::format(": below {:.0f} MB/s", t.data_slow_mbps.value) + cached,
                     stage);
  }
  if (random && d.random_latency_p50_us > t.data_slow_read_us.value) {
    return MakeCheck(id, title, S::kWarn,
                     text + ": each read waits for a disk seek or the network" + cached,
                     stage + "; small files: shard them (seed 001 U25)");
  }
  return MakeCheck(id, title, S::kOk, text + cached);
}

}  // namespace

uint32_t UsableCpus(const HostFacts& h) {
  uint32_t n = h.online_cpus;
  if (!h.allowed_cpus.empty())
    n = n == 0 ? static_cast<uint32_t>(h.allowed_cpus.size())
               : std::min<uint32_t>(n, static_cast<uint32_t>(h.allowed_cpus.size()));
  if (h.cgroup_quota_cpus) {
    n = std::min(n, static_cast<uint32_t>(std::ceil(*h.cgroup_quota_cpus)));
  }
  return std::max<uint32_t>(n, 1);
}

std::string UsableCpusText(const HostFacts& h) {
  const uint32_t n = UsableCpus(h);
  std::string text = fmt::format("{} usable CPU{} (online {}", n, n == 1 ? "" : "s", h.online_cpus);
  if (!h.allowed_cpus.empty()) text += fmt::format(", affinity {}", FormatIdList(h.allowed_cpus));
  text += h.cgroup_quota_cpus ? fmt::format(", cgroup quota {:.1f})", *h.cgroup_quota_cpus)
                              : ", no cgroup quota)";
  return text;
}

std::vector<Check> HostChecks(const Facts& f, const ThresholdSet& t) {
  return {ShmCheck(f, t), CpusCheck(f, t), MemoryCheck(f.host), NofileCheck(f, t)};
}

std::vector<Check> StorageChecks(const Facts& f, const ThresholdSet& t) {
  std::vector<Check> out{CheckpointCheck(f.host.checkpoint, t)};
  if (f.data) out.push_back(DataCheck(*f.data, f.host, t));
  return out;
}

}  // namespace stallscope::doctor
