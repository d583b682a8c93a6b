#include "doctor/env_checks.h"

#include <gtest/gtest.h>

#include <functional>

#include "doctor_facts_test_util.h"

namespace stallscope::doctor {
namespace {

using testing::Contains;
using testing::HealthyFacts;
using testing::One;
using testing::WithId;
using S = CheckStatus;

TEST(EnvChecks, NothingSetIsOneOkLine) {
  const std::vector<Check> checks = EnvChecks(HealthyFacts());
  ASSERT_EQ(checks.size(), 2U);
  EXPECT_EQ(checks[0].id, "env.omp_num_threads");
  EXPECT_EQ(checks[1].id, "env.variables");
  EXPECT_EQ(checks[1].status, S::kOk);
  EXPECT_TRUE(Contains(checks[1].detail, "none of the 15 variables")) << checks[1].detail;
}

TEST(EnvChecks, SlowSettings) {
  struct Case {
    std::map<std::string, std::string> env;
    std::string id;
    S status;
    std::string detail_has;
  };
  const Case cases[] = {
      {{{"CUDA_LAUNCH_BLOCKING", "1"}},
       "env.cuda_launch_blocking",
       S::kFail,
       "CUDA_LAUNCH_BLOCKING=1: every kernel launch waits"},
      {{{"NCCL_DEBUG", "TRACE"}}, "env.nccl_debug", S::kWarn, "every collective call"},
      {{{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_SUBSYS", "INIT,COLL"}},
       "env.nccl_debug",
       S::kWarn,
       "NCCL_DEBUG_SUBSYS=INIT,COLL"},
      {{{"NCCL_P2P_DISABLE", "1"}}, "env.nccl_p2p_disable", S::kWarn, "host memory"},
      {{{"NCCL_IB_DISABLE", "1"}}, "env.nccl_ib_disable", S::kWarn, "TCP sockets"},
      {{{"NCCL_SHM_DISABLE", "1"}}, "env.nccl_shm_disable", S::kWarn, "shared memory"},
      {{{"TORCH_NCCL_BLOCKING_WAIT", "1"}}, "env.torch_nccl_blocking_wait", S::kWarn, "blocks"},
      {{{"NCCL_BLOCKING_WAIT", "1"}}, "env.nccl_blocking_wait", S::kWarn, "pre-2.2 name"},
      {{{"TORCH_DISTRIBUTED_DEBUG", "DETAIL"}},
       "env.torch_distributed_debug",
       S::kWarn,
       "consistency"},
      {{{"PYTORCH_NO_CUDA_MEMORY_CACHING", "1"}},
       "env.pytorch_no_cuda_memory_caching",
       S::kWarn,
       "cudaMalloc"},
      {{{"TORCH_CUDA_SANITIZER", "1"}}, "env.torch_cuda_sanitizer", S::kWarn, "CSAN"},
      {{{"NVIDIA_TF32_OVERRIDE", "0"}}, "env.nvidia_tf32_override", S::kWarn, "Tensor Cores"},
      {{{"CUDA_CACHE_DISABLE", "1"}}, "env.cuda_cache_disable", S::kWarn, "PTX"},
      {{{"PYTHONDEVMODE", "1"}}, "env.pythondevmode", S::kWarn, "development mode"},
      {{{"PYTHONMALLOC", "debug"}}, "env.pythonmalloc", S::kWarn, "debug allocator"},
      {{{"PYTHONTRACEMALLOC", "25"}}, "env.pythontracemalloc", S::kWarn, "traceback"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.id);
    Facts f = HealthyFacts();
    for (const auto& [k, v] : c.env) f.env[k] = v;
    const std::vector<Check> checks = EnvChecks(f);
    const Check check = One(checks, c.id);
    EXPECT_EQ(check.status, c.status);
    EXPECT_TRUE(Contains(check.detail, c.detail_has)) << check.detail;
    EXPECT_FALSE(check.fix.empty());
    EXPECT_TRUE(WithId(checks, "env.variables").empty());
  }
}

TEST(EnvChecks, HarmlessValuesAreNotFlagged) {
  Facts f = HealthyFacts();
  f.env["CUDA_LAUNCH_BLOCKING"] = "0";
  f.env["NCCL_DEBUG"] = "INFO";  // logs at setup only
  f.env["NCCL_DEBUG_SUBSYS"] = "INIT";
  f.env["NCCL_P2P_DISABLE"] = "0";
  f.env["TORCH_CUDA_SANITIZER"] = "0";
  f.env["PYTHONMALLOC"] = "malloc";
  f.env["PYTHONTRACEMALLOC"] = "0";
  f.env["TORCH_DISTRIBUTED_DEBUG"] = "INFO";
  const std::vector<Check> checks = EnvChecks(f);
  EXPECT_EQ(One(checks, "env.variables").status, S::kOk);
}

TEST(EnvChecks, OmpNumThreads) {
  struct Case {
    std::string name;
    std::function<void(Facts&)> change;
    S status;
    std::string detail_has;
    std::string fix_has = "";
  };
  const Case cases[] = {
      {"set within the CPUs", [](Facts&) {}, S::kOk, "OMP_NUM_THREADS=4 on 8 usable CPUs"},
      {"set above the CPUs", [](Facts& f) { f.env["OMP_NUM_THREADS"] = "64"; }, S::kWarn,
       "OMP_NUM_THREADS=64 on 8 usable CPUs", "OMP_NUM_THREADS=8"},
      {"a list per level", [](Facts& f) { f.env["OMP_NUM_THREADS"] = "4,2"; }, S::kOk,
       "OMP_NUM_THREADS=4 on"},
      {"garbage", [](Facts& f) { f.env["OMP_NUM_THREADS"] = "many"; }, S::kWarn,
       "not a thread count"},
      {"unset with workers", [](Facts& f) { f.env.erase("OMP_NUM_THREADS"); }, S::kWarn,
       "torch runs 8 intra-op threads next to 4 DataLoader workers on 8 usable CPUs",
       "OMP_NUM_THREADS=4"},
      {"unset under a quota",
       [](Facts& f) {
         f.env.erase("OMP_NUM_THREADS");
         f.workers.reset();
         f.host.cgroup_quota_cpus = 2;
       },
       S::kWarn, "8 intra-op threads on 2 usable CPUs", "OMP_NUM_THREADS=2"},
      {"unset, fits",
       [](Facts& f) {
         f.env.erase("OMP_NUM_THREADS");
         f.workers.reset();
       },
       S::kOk, "torch runs 8 intra-op threads on 8 usable CPUs"},
      {"unset, torch unknown: affinity",
       [](Facts& f) {
         f.env.erase("OMP_NUM_THREADS");
         f.python.torch_threads.reset();
         f.host.allowed_cpus = {0, 1};
         f.workers = 1;
       },
       S::kWarn, "torch runs 2 intra-op threads next to 1 DataLoader worker on 2",
       "OMP_NUM_THREADS=1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Facts f = HealthyFacts();
    c.change(f);
    const Check check = One(EnvChecks(f), "env.omp_num_threads");
    EXPECT_EQ(check.status, c.status) << check.detail;
    EXPECT_TRUE(Contains(check.detail, c.detail_has)) << check.detail;
    EXPECT_TRUE(Contains(check.fix, c.fix_has)) << check.fix;
  }
}

}  // namespace
}  // namespace stallscope::doctor
