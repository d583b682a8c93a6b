#include "doctor/host_checks.h"

#include <gtest/gtest.h>

#include <functional>

#include "base/units.h"
#include "doctor_facts_test_util.h"

namespace stallscope::doctor {
namespace {

using testing::Contains;
using testing::HealthyFacts;
using testing::One;
using S = CheckStatus;

struct Case {
  std::string name;
  std::string id;
  std::function<void(Facts&)> change;
  S status;
  std::string detail_has;
  std::string fix_has = "";
};

void RunTable(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Facts f = HealthyFacts();
    c.change(f);
    std::vector<Check> checks = HostChecks(f);
    for (Check& s : StorageChecks(f)) checks.push_back(std::move(s));
    const Check check = One(checks, c.id);
    EXPECT_EQ(check.status, c.status) << check.detail;
    EXPECT_TRUE(Contains(check.detail, c.detail_has)) << check.detail;
    EXPECT_TRUE(Contains(check.fix, c.fix_has)) << check.fix;
  }
}

TEST(HostChecks, Shm) {
  const auto shm = [](uint64_t total, uint64_t free) {
    return [=](Facts& f) {
      f.host.shm->total_bytes = total;
      f.host.shm->free_bytes = free;
    };
  };
  RunTable({
      {"large", "host.shm", shm(32 * kGiB, 32 * kGiB), S::kOk, "34.4 GB free of 34.4 GB"},
      {"docker default", "host.shm", shm(64 * kMiB, 64 * kMiB), S::kWarn,
       "67.1 MB free of 67.1 MB: num_workers=4 pass every batch", "--shm-size"},
      {"docker default, workers unknown", "host.shm",
       [&](Facts& f) {
         shm(64 * kMiB, 64 * kMiB)(f);
         f.workers.reset();
       },
       S::kWarn, "DataLoader workers pass every batch", "--ipc=host"},
      {"docker default, no workers", "host.shm",
       [&](Facts& f) {
         shm(64 * kMiB, 64 * kMiB)(f);
         f.workers = 0;
       },
       S::kOk, "not used with num_workers=0"},
      {"nearly full", "host.shm", shm(8 * kGiB, 100 * kMiB), S::kWarn, "nearly full",
       "ls -la /dev/shm"},
      {"absent", "host.shm", [](Facts& f) { f.host.shm->error = "No such file or directory"; },
       S::kWarn, "not available (No such file or directory)"},
  });
}

// Issue 29: the limits are the threshold table's (doctor section), so a stricter table moves them.
TEST(HostChecks, LimitsComeFromTheThresholdTable) {
  Facts f = HealthyFacts();
  f.host.shm->total_bytes = f.host.shm->free_bytes = 2 * kGiB;
  EXPECT_EQ(One(HostChecks(f), "host.shm").status, S::kOk);
  ThresholdSet strict;
  strict.shm_min_gib.value = 4;
  EXPECT_EQ(One(HostChecks(f, strict), "host.shm").status, S::kWarn);
  strict.checkpoint_free_fail_gib.value = 1e6;
  EXPECT_EQ(One(StorageChecks(f, strict), "storage.checkpoint").status, S::kFail);
}

TEST(HostChecks, Cpus) {
  RunTable({
      {"fits", "host.cpus", [](Facts&) {}, S::kOk,
       "8 usable CPUs (online 8, affinity 0-7, no cgroup quota): num_workers=4 and the main "
       "process fit"},
      {"advice without --workers", "host.cpus", [](Facts& f) { f.workers.reset(); }, S::kOk,
       "start at num_workers=7 (seed 001 T4)"},
      {"quota below affinity", "host.cpus", [](Facts& f) { f.host.cgroup_quota_cpus = 2.0; },
       S::kWarn, "count 8 CPUs (os.cpu_count() 8), but the quota lets the job use 2.0",
       "num_workers=1 and OMP_NUM_THREADS=2"},
      {"too many workers", "host.cpus", [](Facts& f) { f.workers = 8; }, S::kWarn,
       "num_workers=8 leaves no CPU", "num_workers=7"},
      {"no workers", "host.cpus", [](Facts& f) { f.workers = 0; }, S::kWarn,
       "num_workers=0 loads every batch", "persistent_workers=True"},
      {"one CPU, no workers", "host.cpus",
       [](Facts& f) {
         f.workers = 0;
         f.host.allowed_cpus = {0};
       },
       S::kOk, "1 usable CPU"},
  });
}

TEST(HostChecks, MemoryAndNofile) {
  RunTable({
      {"memory", "host.memory", [](Facts& f) { f.host.cgroup_mem_limit_bytes = 16 * kGiB; }, S::kOk,
       "68.7 GB RAM, 64.4 GB available, cgroup limit 17.2 GB"},
      {"memory unknown", "host.memory", [](Facts& f) { f.host.mem_total_bytes.reset(); }, S::kSkip,
       "not reported"},
      {"nofile high", "host.nofile", [](Facts&) {}, S::kOk, "soft 1048576, hard 1048576"},
      {"nofile 1024, raisable", "host.nofile", [](Facts& f) { f.host.nofile_soft = 1024; },
       S::kWarn, "received 0 items of ancdata", "ulimit -n 1048576"},
      {"nofile 1024 hard", "host.nofile",
       [](Facts& f) { f.host.nofile_soft = f.host.nofile_hard = 1024; }, S::kWarn, "soft 1024",
       "set_sharing_strategy('file_system')"},
      {"nofile 1024, no workers", "host.nofile",
       [](Facts& f) {
         f.host.nofile_soft = 1024;
         f.workers = 0;
       },
       S::kOk, "soft 1024"},
      {"nofile unlimited", "host.nofile", [](Facts& f) { f.host.nofile_soft.reset(); }, S::kOk,
       "unlimited"},
  });
}

TEST(StorageChecks, Checkpoint) {
  const auto space = [](uint64_t free, std::string type) {
    return [=](Facts& f) {
      f.host.checkpoint.free_bytes = free;
      f.host.checkpoint.fs_type = type;
    };
  };
  RunTable({
      {"plenty", "storage.checkpoint", space(1000 * kGiB, "ext4"), S::kOk,
       "1.1 TB free of 2.1 TB in /ckpt (ext4)"},
      {"little", "storage.checkpoint", space(5 * kGiB, "ext4"), S::kWarn, "16 bytes per parameter"},
      {"none", "storage.checkpoint", space(100 * kMiB, "ext4"), S::kFail, "first torch.save fails"},
      {"no inodes", "storage.checkpoint", [](Facts& f) { f.host.checkpoint.inodes_free = 0; },
       S::kFail, "no inodes left"},
      {"overlay", "storage.checkpoint", space(500 * kGiB, "overlay"), S::kWarn,
       "lost with the container", "mounted volume"},
      {"tmpfs", "storage.checkpoint", space(500 * kGiB, "tmpfs"), S::kWarn, "memory-backed"},
      {"nfs", "storage.checkpoint", space(500 * kGiB, "nfs"), S::kOk, "a network filesystem"},
      {"missing", "storage.checkpoint",
       [](Facts& f) { f.host.checkpoint.error = "No such file or directory"; }, S::kWarn,
       "/ckpt: No such file or directory", "--checkpoint-dir"},
  });
}

DataFacts FastData() {
  DataFacts d;
  d.path = "/data";
  d.fs_type = "ext4";
  d.files = 1000;
  d.total_bytes = 500'000'000;
  d.direct_io = true;
  d.threads = 4;
  d.read_seconds = 1.0;
  d.files_read = 1000;
  d.bytes_read = 500'000'000;
  d.random_seconds = 1.0;
  d.random_reads = 20000;
  d.random_latency_p50_us = 150;
  d.random_latency_p99_us = 900;
  return d;
}

TEST(StorageChecks, Data) {
  RunTable({
      {"fast local", "storage.data", [](Facts& f) { f.data = FastData(); }, S::kOk,
       "/data: 1000 files, 500.0 MB (ext4, mean file 500.0 KB); 500 MB/s and 1000 files/s with 4 "
       "readers (direct I/O) = ~1000 samples/s if a file is a sample; 4 KiB random reads: 20000 "
       "IOPS (p50 150 us, p99 900 us); it fits in available RAM"},
      {"slow, large files", "storage.data",
       [](Facts& f) {
         f.data = FastData();
         f.data->files = 10;  // mean 50 MB
         f.data->read_seconds = 10;
       },
       S::kWarn, "below 200 MB/s", "NVMe"},
      {"small files: MB/s is no measure", "storage.data",
       [](Facts& f) {
         f.data = FastData();
         f.data->read_seconds = 10;
       },
       S::kOk, "50.0 MB/s and 100 files/s"},
      {"seeking disk", "storage.data",
       [](Facts& f) {
         f.data = FastData();
         f.data->random_latency_p50_us = 6000;
       },
       S::kWarn, "waits for a disk seek", "shard them"},
      {"small files on nfs", "storage.data",
       [](Facts& f) {
         f.data = FastData();
         f.data->network_fs = true;
         f.data->fs_type = "nfs";
       },
       S::kWarn, "round trip per open", "WebDataset"},
      {"buffered", "storage.data",
       [](Facts& f) {
         f.data = FastData();
         f.data->direct_io = false;
         f.data->io_note = "buffered reads (forced)";
       },
       S::kOk, "(buffered reads (forced))"},
      {"unreadable", "storage.data",
       [](Facts& f) {
         f.data = DataFacts{};
         f.data->path = "/nope";
         f.data->error = "No such file or directory";
       },
       S::kFail, "/nope: No such file or directory"},
      {"empty", "storage.data",
       [](Facts& f) {
         f.data = DataFacts{};
         f.data->path = "/empty";
       },
       S::kFail, "no readable file", "--data"},
  });
  Facts f = HealthyFacts();
  EXPECT_EQ(StorageChecks(f).size(), 1U) << "no storage.data without --data";
}

TEST(UsableCpus, MinimumOfOnlineAffinityAndQuota) {
  HostFacts h;
  h.online_cpus = 16;
  EXPECT_EQ(UsableCpus(h), 16U);
  h.allowed_cpus = {0, 1, 2, 3};
  EXPECT_EQ(UsableCpus(h), 4U);
  h.cgroup_quota_cpus = 2.5;
  EXPECT_EQ(UsableCpus(h), 3U);
  EXPECT_EQ(UsableCpusText(h), "3 usable CPUs (online 16, affinity 0-3, cgroup quota 2.5)");
  h = HostFacts{};
  EXPECT_EQ(UsableCpus(h), 1U);
}

}  // namespace
}  // namespace stallscope::doctor
