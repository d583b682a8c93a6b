#pragma once

// What `stallscope doctor` knows about the machine and the job's environment: gathered once
// (gather.h, python_probe.h, data_probe.h), then judged by pure check functions (checks.h). Tests
// build these structs directly or gather them from fixture trees and the fake NVML.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_backend.h"

namespace stallscope::doctor {

/// One GPU as NVML sees it, with one current sample.
struct GpuFact {
  gpu::GpuStatic info;
  gpu::GpuHealth health;
  gpu::GpuSample now;
  /// NUMA node of the GPU's PCI device (<sys>/bus/pci/devices/<bus id>/numa_node); empty when
  /// unknown or -1 (no NUMA information: a single-node machine).
  std::optional<uint32_t> numa_node;
};

/// Whether NVML could be used, and if not, why.
enum class DriverState {
  kOk,              ///< NVML loaded and initialised
  kNoDriver,        ///< no libnvidia-ml and no NVIDIA kernel module: not a GPU machine
  kLibraryMissing,  ///< the kernel module is loaded but libnvidia-ml.so.1 cannot be loaded
  kInitFailed,      ///< libnvidia-ml loaded, nvmlInit failed
};

struct GpuFacts {
  DriverState driver = DriverState::kNoDriver;
  std::string nvml_error;             ///< why NVML could not be used ("" when kOk)
  std::string kernel_module_version;  ///< /proc/driver/nvidia/version, first line; "" if absent
  std::string driver_version;         ///< NVML's, "550.54.15"
  std::optional<int32_t> cuda_driver_version;  ///< 12040 = CUDA 12.4
  /// NVIDIA display/3D controllers on the PCI bus (<sys>/bus/pci/devices/*/vendor and class),
  /// whatever the driver says; empty when sysfs cannot be read.
  std::optional<uint32_t> nvidia_pci_gpus;
  std::vector<GpuFact> gpus;
};

/// A NUMA node and its CPUs (<sys>/devices/system/node/nodeN/cpulist).
struct NumaNode {
  uint32_t id = 0;
  std::vector<uint32_t> cpus;
};

/// Space on the filesystem holding a path (statvfs, statfs).
struct SpaceFacts {
  std::string path;
  std::string error;  ///< "" when the path could be examined
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;              ///< available to an unprivileged user (f_bavail)
  std::optional<uint64_t> inodes_free;  ///< empty when the filesystem has no inode count
  std::string fs_type;                  ///< "ext4", "overlay", "tmpfs", "nfs", ... or "0x..."
};

/// Whether this process may read another's memory with process_vm_readv, as `stallscope run`
/// (its job's Python stacks) and `stallscope dump` do (stacks_check.h).
struct StackReadFacts {
  /// kernel.yama.ptrace_scope (<proc>/sys/kernel/yama/ptrace_scope), 0-3; empty: no Yama
  /// (classic rules: the same user may read a process) or unreadable.
  std::optional<int32_t> ptrace_scope;
  std::optional<bool> cap_sys_ptrace;  ///< CapEff bit 19 of <proc>/self/status; empty: unknown
  /// `Seccomp:` of <proc>/self/status: 0 none, 1 strict, 2 a filter (a container's profile);
  /// empty: the kernel does not say.
  std::optional<int32_t> seccomp;
  std::string kernel_release;  ///< uname -r ("6.1.0-18-amd64"); "" when unknown
  /// The probe: a forked child blocks on a pipe while this process reads one word of it.
  bool probed = false;
  int32_t probe_errno = 0;  ///< 0: the word read back right; else process_vm_readv's errno
  std::string probe_error;  ///< why the probe could not run (fork or pipe failed); "" if it ran
};

struct HostFacts {
  uint32_t online_cpus = 0;                 ///< CPUs in /proc/stat
  std::vector<uint32_t> allowed_cpus;       ///< the affinity mask (Cpus_allowed_list), ascending
  std::optional<double> cgroup_quota_cpus;  ///< cpu.max quota / period; empty = no quota
  std::optional<uint64_t> cgroup_mem_limit_bytes;
  std::optional<uint64_t> mem_total_bytes;
  std::optional<uint64_t> mem_available_bytes;
  std::vector<NumaNode> numa_nodes;     ///< empty when sysfs has no node directory
  std::optional<SpaceFacts> shm;        ///< /dev/shm; empty when it does not exist
  std::optional<uint64_t> nofile_soft;  ///< RLIMIT_NOFILE; empty = unlimited
  std::optional<uint64_t> nofile_hard;
  SpaceFacts checkpoint;  ///< where checkpoints go (--checkpoint-dir)
  /// Gathered by GatherHost; empty in facts built by hand (no host.python_stacks check then).
  std::optional<StackReadFacts> python_stacks;
};

/// What the job's Python says about itself and torch (python_probe.h).
struct PythonFacts {
  std::string interpreter;  ///< what was run (--python)
  bool ran = false;         ///< the probe ran and printed its JSON line
  std::string error;        ///< why not (not found, timed out, no JSON)
  std::string version;      ///< "3.11.2"
  std::string implementation;
  std::string executable;
  bool venv = false;
  std::optional<std::string> torch_version;  ///< empty when torch did not import
  std::string torch_error;                   ///< the import error ("ModuleNotFoundError: ...")
  std::optional<std::string> torch_cuda;     ///< torch.version.cuda; empty = a CPU-only build
  std::optional<std::string> torch_hip;      ///< torch.version.hip (ROCm builds)
  std::optional<bool> cuda_available;
  std::optional<int64_t> device_count;
  std::optional<int64_t> cudnn_version;  ///< 8902 = cuDNN 8.9.2
  std::optional<int64_t> torch_threads;  ///< torch.get_num_threads(): intra-op threads
  std::vector<std::string> warnings;     ///< what torch warned while initialising CUDA
};

/// A bounded-time read test of the training data directory (data_probe.h).
struct DataFacts {
  std::string path;
  std::string error;  ///< the directory could not be read: why (the rest is empty)
  std::string fs_type;
  bool network_fs = false;      ///< NFS, SMB, FUSE, Lustre, ...: every open pays a round trip
  uint64_t files = 0;           ///< regular files found
  bool scan_truncated = false;  ///< stopped at the file or time limit
  uint64_t total_bytes = 0;     ///< of the files found
  bool direct_io = false;       ///< O_DIRECT: the device, not the page cache
  std::string io_note;          ///< why not direct, when not
  uint32_t threads = 0;         ///< parallel readers
  /// Whole-file reads (up to 16 MiB of each file), files in random order.
  double read_seconds = 0;
  uint64_t files_read = 0;
  uint64_t bytes_read = 0;
  /// 4 KiB reads at random offsets of random files.
  double random_seconds = 0;
  uint64_t random_reads = 0;
  double random_latency_p50_us = 0;
  double random_latency_p99_us = 0;
  uint64_t read_errors = 0;  ///< files that could not be opened or read (skipped)
};

/// Everything the checks judge.
struct Facts {
  GpuFacts gpu;
  HostFacts host;
  PythonFacts python;
  std::optional<DataFacts> data;           ///< with --data
  std::map<std::string, std::string> env;  ///< the environment the job will inherit
  std::optional<int64_t> workers;          ///< --workers: the DataLoader workers the user plans
};

}  // namespace stallscope::doctor
