// The built fake libnvidia-ml.so.1 through dlopen, as a client sees it: the cost model
// ($STALLSCOPE_FAKE_NVML_COST), driver_sample_period_s and GPM. Timing checks are lower bounds
// only (machines are noisy), but for "less than X of CPU" where the cost is spent asleep.

#include <dlfcn.h>
#include <stdlib.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "fake_cost.h"
#include "gpu/nvml_abi.h"
#include "temp_dir.h"

namespace stallscope::fake_nvml {
namespace {

namespace nv = gpu::nvml;
using nv::nvmlReturn_t;

constexpr const char* kScenarioEnv = "STALLSCOPE_FAKE_NVML_SCENARIO";
constexpr double kMs = 1e6;  // ns

std::string ScenarioPath(std::string_view name) {
  return std::string(STALLSCOPE_NVML_SCENARIOS) + "/" + std::string(name);
}

int64_t ThreadCpuNs() { return ClockNs(CLOCK_THREAD_CPUTIME_ID); }
int64_t WallNs() { return ClockNs(CLOCK_MONOTONIC); }

class FakeNvmlLibTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Never closed: the fake's one State lives as long as the process, as a driver's would.
    lib_ = dlopen(STALLSCOPE_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
  }
  void TearDown() override {
    // Drop every nvmlInit a test left open, so the next test (same process) loads afresh.
    if (lib_ != nullptr) {
      while (Fn<nv::ShutdownFn>("nvmlShutdown")() == nv::NVML_SUCCESS) {
      }
    }
    unsetenv(kScenarioEnv);
    unsetenv(kCostEnv);
  }

  template <typename F>
  F* Fn(const char* name) {
    auto* f = reinterpret_cast<F*>(dlsym(lib_, name));
    EXPECT_NE(f, nullptr) << name;
    return f;
  }

  /// nvmlInit_v2 playing `scenario` (a path) at `cost` ("" = free).
  nvmlReturn_t Init(const std::string& scenario, const std::string& cost = "") {
    setenv(kScenarioEnv, scenario.c_str(), 1);
    setenv(kCostEnv, cost.c_str(), 1);
    return Fn<nv::InitFn>("nvmlInit_v2")();
  }
  nvmlReturn_t Shutdown() { return Fn<nv::ShutdownFn>("nvmlShutdown")(); }

  nv::nvmlDevice_t Device(unsigned int index) {
    nv::nvmlDevice_t device = nullptr;
    EXPECT_EQ(Fn<nv::DeviceGetHandleByIndexFn>("nvmlDeviceGetHandleByIndex_v2")(index, &device),
              nv::NVML_SUCCESS);
    return device;
  }

  /// A scenario file with `json` in the test's temporary directory.
  std::string WriteFile(std::string_view name, std::string_view json) {
    const std::string path = dir_.Sub(name);
    std::FILE* f = std::fopen(path.c_str(), "w");
    EXPECT_NE(f, nullptr) << path;
    if (f != nullptr) {
      std::fwrite(json.data(), 1, json.size(), f);
      std::fclose(f);
    }
    return path;
  }

  nvmlReturn_t Samples(nv::nvmlDevice_t device, std::vector<nv::nvmlSample_t>& out) {
    out.assign(100, {});
    nv::nvmlValueType_t type{};
    unsigned int count = 100;
    const nvmlReturn_t rc = Fn<nv::DeviceGetSamplesFn>("nvmlDeviceGetSamples")(
        device, nv::NVML_GPU_UTILIZATION_SAMPLES, 0, &type, &count, out.data());
    out.resize(rc == nv::NVML_SUCCESS ? count : 0);
    return rc;
  }

  nvmlReturn_t PcieTx(nv::nvmlDevice_t device) {
    unsigned int kbps = 0;
    return Fn<nv::DeviceGetPcieThroughputFn>("nvmlDeviceGetPcieThroughput")(
        device, nv::NVML_PCIE_UTIL_TX_BYTES, &kbps);
  }

  nv::nvmlGpmSample_t GpmAlloc() {
    nv::nvmlGpmSample_t sample{};
    EXPECT_EQ(Fn<nv::GpmSampleAllocFn>("nvmlGpmSampleAlloc")(&sample), nv::NVML_SUCCESS);
    gpm_samples_.push_back(sample);  // freed by ~FakeNvmlLibTest
    return sample;
  }
  nvmlReturn_t GpmSampleGet(nv::nvmlDevice_t device, nv::nvmlGpmSample_t sample) {
    return Fn<nv::GpmSampleGetFn>("nvmlGpmSampleGet")(device, sample);
  }
  nvmlReturn_t GpmSupport(nv::nvmlDevice_t device, unsigned int* supported) {
    nv::nvmlGpmSupport_t support{nv::NVML_GPM_SUPPORT_VERSION, 7};
    const nvmlReturn_t rc =
        Fn<nv::GpmQueryDeviceSupportFn>("nvmlGpmQueryDeviceSupport")(device, &support);
    *supported = support.isSupportedDevice;
    return rc;
  }
  /// nvmlGpmMetricsGet of `ids` between `s1` and `s2`, into metrics_.
  nvmlReturn_t GpmMetrics(nv::nvmlGpmSample_t s1, nv::nvmlGpmSample_t s2,
                          const std::vector<unsigned int>& ids) {
    metrics_ = nv::nvmlGpmMetricsGet_t{};
    metrics_.version = nv::NVML_GPM_METRICS_GET_VERSION;
    metrics_.numMetrics = static_cast<unsigned int>(ids.size());
    metrics_.sample1 = s1;
    metrics_.sample2 = s2;
    for (size_t i = 0; i < nv::kGpmMetricsCapacity; ++i) {
      metrics_.metrics[i].metricId = i < ids.size() ? ids[i] : 0;
      metrics_.metrics[i].nvmlReturn = nv::NVML_ERROR_UNKNOWN;  // to see what was written
    }
    return Fn<nv::GpmMetricsGetFn>("nvmlGpmMetricsGet")(&metrics_);
  }

  ~FakeNvmlLibTest() override {
    if (lib_ == nullptr) return;
    for (const nv::nvmlGpmSample_t sample : gpm_samples_) {
      EXPECT_EQ(Fn<nv::GpmSampleFreeFn>("nvmlGpmSampleFree")(sample), nv::NVML_SUCCESS);
    }
  }

  void* lib_ = nullptr;
  testing::TempDir dir_{"fake_nvml_lib_test"};
  std::vector<nv::nvmlGpmSample_t> gpm_samples_;
  nv::nvmlGpmMetricsGet_t metrics_{};
};

// ---- The cost model ---------------------------------------------------------------------------

TEST_F(FakeNvmlLibTest, H100CostsTheMeasuredCpuAndWallTime) {
  ASSERT_EQ(Init(ScenarioPath("steady_1gpu.json"), "h100"), nv::NVML_SUCCESS);
  nv::nvmlDevice_t device = Device(0);
  std::vector<nv::nvmlSample_t> samples;

  int64_t cpu0 = ThreadCpuNs();
  ASSERT_EQ(Samples(device, samples), nv::NVML_SUCCESS);
  EXPECT_GE(ThreadCpuNs() - cpu0, 2.3 * kMs) << "GetSamples: 2391 µs of CPU on an H100";

  cpu0 = ThreadCpuNs();
  const int64_t wall0 = WallNs();
  ASSERT_EQ(PcieTx(device), nv::NVML_SUCCESS);
  EXPECT_GE(WallNs() - wall0, 20 * kMs) << "GetPcieThroughput: 20.7 ms of wall time";
  EXPECT_LT(ThreadCpuNs() - cpu0, 5 * kMs) << "... of which 0.7 ms of CPU: the rest asleep";
}

TEST_F(FakeNvmlLibTest, NoCostEnvMeansCheapCalls) {
  ASSERT_EQ(Init(ScenarioPath("steady_1gpu.json")), nv::NVML_SUCCESS);
  nv::nvmlDevice_t device = Device(0);
  std::vector<nv::nvmlSample_t> samples;
  const int64_t cpu0 = ThreadCpuNs();
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(Samples(device, samples), nv::NVML_SUCCESS);
    ASSERT_EQ(PcieTx(device), nv::NVML_SUCCESS);
  }
  // Generous: ten of each together use less CPU than one costed GetSamples.
  EXPECT_LT(ThreadCpuNs() - cpu0, 2.3 * kMs);
}

TEST_F(FakeNvmlLibTest, CostFileWithATypoFailsInit) {
  const std::string cost =
      WriteFile("cost.json", R"({"nvmlDeviceGetSampels": {"cpu_us": 1, "wall_us": 2}})");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Init(ScenarioPath("steady_1gpu.json"), cost), nv::NVML_ERROR_DRIVER_NOT_LOADED);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "fake NVML: " + cost + ": unknown entry point 'nvmlDeviceGetSampels'\n");
  // The next nvmlInit reads the environment again.
  ASSERT_EQ(Init(ScenarioPath("steady_1gpu.json"), ""), nv::NVML_SUCCESS);
}

TEST_F(FakeNvmlLibTest, CostFileChargesItsRowsOnly) {
  const std::string cost =
      WriteFile("cost.json", R"({"nvmlDeviceGetTemperature": {"cpu_us": 3000, "wall_us": 4000}})");
  ASSERT_EQ(Init(ScenarioPath("steady_1gpu.json"), cost), nv::NVML_SUCCESS);
  nv::nvmlDevice_t device = Device(0);
  unsigned int temp = 0;
  int64_t cpu0 = ThreadCpuNs();
  const int64_t wall0 = WallNs();
  ASSERT_EQ(Fn<nv::DeviceGetTemperatureFn>("nvmlDeviceGetTemperature")(
                device, nv::NVML_TEMPERATURE_GPU, &temp),
            nv::NVML_SUCCESS);
  EXPECT_GE(ThreadCpuNs() - cpu0, 3 * kMs);
  EXPECT_GE(WallNs() - wall0, 4 * kMs);
  std::vector<nv::nvmlSample_t> samples;
  cpu0 = ThreadCpuNs();
  ASSERT_EQ(Samples(device, samples), nv::NVML_SUCCESS);
  EXPECT_LT(ThreadCpuNs() - cpu0, 2.3 * kMs) << "no row: no cost";
}

// The cost is paid outside the fake's lock: a thread asleep in a slow call does not hold up
// another thread's cheap call (the real driver runs them side by side).
TEST_F(FakeNvmlLibTest, ASlowCallDoesNotBlockOtherThreads) {
  const std::string cost = WriteFile(
      "cost.json", R"({"nvmlDeviceGetPcieThroughput": {"cpu_us": 0, "wall_us": 600000}})");
  ASSERT_EQ(Init(ScenarioPath("steady_1gpu.json"), cost), nv::NVML_SUCCESS);
  nv::nvmlDevice_t device = Device(0);
  std::atomic<bool> started{false};
  int64_t slow_done_ns = 0;
  std::thread slow([&] {
    started = true;
    EXPECT_EQ(PcieTx(device), nv::NVML_SUCCESS);
    slow_done_ns = WallNs();
  });
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  nv::nvmlMemory_t memory{};
  EXPECT_EQ(Fn<nv::DeviceGetMemoryInfoFn>("nvmlDeviceGetMemoryInfo")(device, &memory),
            nv::NVML_SUCCESS);
  const int64_t cheap_done_ns = WallNs();
  slow.join();
  // Blocked behind the slow call, the cheap one would end after it; it ends ~570 ms before (the
  // margin leaves a loaded machine 270 ms of scheduling delay).
  EXPECT_LT(cheap_done_ns + 300 * static_cast<int64_t>(kMs), slow_done_ns);
}

// ---- driver_sample_period_s -------------------------------------------------------------------

TEST_F(FakeNvmlLibTest, DriverSamplePeriod) {
  const std::string scenario =
      WriteFile("s.json", R"({"frozen_at_s": 10, "driver_sample_period_s": 0.2, "gpus": [{}]})");
  ASSERT_EQ(Init(scenario), nv::NVML_SUCCESS);
  std::vector<nv::nvmlSample_t> samples;
  ASSERT_EQ(Samples(Device(0), samples), nv::NVML_SUCCESS);
  ASSERT_EQ(samples.size(), 51U);  // t = 0, 0.2, ..., 10
  for (size_t i = 1; i < samples.size(); ++i) {
    EXPECT_EQ(samples[i].timeStamp - samples[i - 1].timeStamp, 200'000U) << i;
  }
}

// ---- GPM -------------------------------------------------------------------------------------

constexpr unsigned int kAllGpmIds[] = {
    nv::NVML_GPM_METRIC_GRAPHICS_UTIL,
    nv::NVML_GPM_METRIC_SM_UTIL,
    nv::NVML_GPM_METRIC_SM_OCCUPANCY,
    nv::NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    nv::NVML_GPM_METRIC_HMMA_TENSOR_UTIL,
    nv::NVML_GPM_METRIC_DRAM_BW_UTIL,
    nv::NVML_GPM_METRIC_FP64_UTIL,
    nv::NVML_GPM_METRIC_FP32_UTIL,
    nv::NVML_GPM_METRIC_FP16_UTIL,
    nv::NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    nv::NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    nv::NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    nv::NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
};

TEST_F(FakeNvmlLibTest, GpmAbsentIsAPreHopperGpu) {
  nv::nvmlGpmSample_t early{};
  EXPECT_EQ(Fn<nv::GpmSampleAllocFn>("nvmlGpmSampleAlloc")(&early), nv::NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(Init(ScenarioPath("steady_1gpu.json")), nv::NVML_SUCCESS);
  nv::nvmlDevice_t device = Device(0);
  unsigned int supported = 7;
  EXPECT_EQ(GpmSupport(device, &supported), nv::NVML_SUCCESS);
  EXPECT_EQ(supported, 0U);
  EXPECT_EQ(GpmSampleGet(device, GpmAlloc()), nv::NVML_ERROR_NOT_SUPPORTED);

  nv::nvmlGpmSupport_t v2{2, 0};
  EXPECT_EQ(Fn<nv::GpmQueryDeviceSupportFn>("nvmlGpmQueryDeviceSupport")(device, &v2),
            nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  EXPECT_EQ(Fn<nv::GpmQueryDeviceSupportFn>("nvmlGpmQueryDeviceSupport")(device, nullptr),
            nv::NVML_ERROR_INVALID_ARGUMENT);
}

// h100_gpm.json: steady 100% with the defaults measured on a real H100 during a bf16 matmul.
TEST_F(FakeNvmlLibTest, GpmSteadyH100) {
  ASSERT_EQ(Init(ScenarioPath("h100_gpm.json")), nv::NVML_SUCCESS);
  nv::nvmlDevice_t device = Device(0);
  unsigned int supported = 0;
  ASSERT_EQ(GpmSupport(device, &supported), nv::NVML_SUCCESS);
  EXPECT_EQ(supported, 1U);
  const nv::nvmlGpmSample_t s1 = GpmAlloc(), s2 = GpmAlloc();
  ASSERT_EQ(GpmSampleGet(device, s1), nv::NVML_SUCCESS);
  ASSERT_EQ(GpmSampleGet(device, s2), nv::NVML_SUCCESS);
  std::vector<unsigned int> ids(std::begin(kAllGpmIds), std::end(kAllGpmIds));
  ids.push_back(4);    // NVML_GPM_METRIC_INTEGER_UTIL: not modelled
  ids.push_back(999);  // no such metric
  ASSERT_EQ(GpmMetrics(s1, s2, ids), nv::NVML_SUCCESS);
  const double expected[] = {100, 96, 14.2, 93, 93, 25, 0, 0, 0, 6, 16, 0, 0};
  for (size_t i = 0; i < std::size(expected); ++i) {
    const nv::nvmlGpmMetric_t& m = metrics_.metrics[i];
    EXPECT_EQ(m.nvmlReturn, nv::NVML_SUCCESS) << m.metricId;
    EXPECT_NEAR(m.value, expected[i], 1e-9) << m.metricId;
    EXPECT_EQ(m.metricInfo.shortName, nullptr);
  }
  EXPECT_EQ(metrics_.metrics[13].nvmlReturn, nv::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(metrics_.metrics[14].nvmlReturn, nv::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(metrics_.metrics[15].nvmlReturn, nv::NVML_ERROR_UNKNOWN)
      << "past numMetrics: untouched";
}

// Samples keep their t across nvmlShutdown/nvmlInit, so two frozen scenarios give an exact
// window: [0.5, 3.25] of a 2 s sawtooth, 100% for the first second of each period.
TEST_F(FakeNvmlLibTest, GpmWindowIsTheExactAverage) {
  constexpr const char* kGpu = R"("gpus": [{"gpm": {"dram_active_ratio": 0.5},
      "pattern": {"kind": "sawtooth", "util_high": 100, "util_low": 0, "period_s": 2}}]})";
  ASSERT_EQ(Init(WriteFile("a.json", std::string(R"({"frozen_at_s": 0.5, )") + kGpu)),
            nv::NVML_SUCCESS);
  const nv::nvmlGpmSample_t s1 = GpmAlloc(), s2 = GpmAlloc();
  ASSERT_EQ(GpmSampleGet(Device(0), s1), nv::NVML_SUCCESS);
  ASSERT_EQ(Shutdown(), nv::NVML_SUCCESS);
  ASSERT_EQ(Init(WriteFile("b.json", std::string(R"({"frozen_at_s": 3.25, )") + kGpu)),
            nv::NVML_SUCCESS);
  ASSERT_EQ(GpmSampleGet(Device(0), s2), nv::NVML_SUCCESS);

  const std::vector<unsigned int> ids = {
      nv::NVML_GPM_METRIC_GRAPHICS_UTIL, nv::NVML_GPM_METRIC_SM_UTIL,
      nv::NVML_GPM_METRIC_SM_OCCUPANCY, nv::NVML_GPM_METRIC_DRAM_BW_UTIL};
  ASSERT_EQ(GpmMetrics(s1, s2, ids), nv::NVML_SUCCESS);
  const double mean = 100.0 * 1.5 / 2.75;  // high over [0.5, 1) and [2, 3)
  EXPECT_DOUBLE_EQ(metrics_.metrics[0].value, mean);
  EXPECT_DOUBLE_EQ(metrics_.metrics[1].value, mean * 0.96);
  EXPECT_DOUBLE_EQ(metrics_.metrics[2].value, 14.2 * mean / 100);
  EXPECT_DOUBLE_EQ(metrics_.metrics[3].value, mean * 0.5);

  ASSERT_EQ(GpmMetrics(s2, s2, ids), nv::NVML_SUCCESS) << "an empty window: the value at t";
  EXPECT_DOUBLE_EQ(metrics_.metrics[0].value, 0.0);  // t = 3.25: low
  ASSERT_EQ(GpmMetrics(s1, s1, ids), nv::NVML_SUCCESS);
  EXPECT_DOUBLE_EQ(metrics_.metrics[0].value, 100.0);  // t = 0.5: high
  EXPECT_EQ(GpmMetrics(s2, s1, ids), nv::NVML_ERROR_INVALID_ARGUMENT) << "sample2 is older";
}

TEST_F(FakeNvmlLibTest, GpmRejectsBadRequests) {
  ASSERT_EQ(Init(ScenarioPath("eight_gpus_gpm.json")), nv::NVML_SUCCESS);
  const nv::nvmlGpmSample_t a = GpmAlloc(), b = GpmAlloc(), other = GpmAlloc(),
                            untaken = GpmAlloc();
  ASSERT_EQ(GpmSampleGet(Device(0), a), nv::NVML_SUCCESS);
  ASSERT_EQ(GpmSampleGet(Device(0), b), nv::NVML_SUCCESS);
  ASSERT_EQ(GpmSampleGet(Device(1), other), nv::NVML_SUCCESS);
  const std::vector<unsigned int> ids = {nv::NVML_GPM_METRIC_SM_UTIL};
  EXPECT_EQ(GpmMetrics(a, b, ids), nv::NVML_SUCCESS);
  EXPECT_EQ(GpmMetrics(a, other, ids), nv::NVML_ERROR_INVALID_ARGUMENT) << "two GPUs";
  EXPECT_EQ(GpmMetrics(a, untaken, ids), nv::NVML_ERROR_INVALID_ARGUMENT) << "never taken";
  EXPECT_EQ(GpmMetrics(nv::nvmlGpmSample_t{}, b, ids), nv::NVML_ERROR_INVALID_ARGUMENT);

  ASSERT_EQ(GpmMetrics(a, b, ids), nv::NVML_SUCCESS);
  metrics_.version = 2;
  EXPECT_EQ(Fn<nv::GpmMetricsGetFn>("nvmlGpmMetricsGet")(&metrics_),
            nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  metrics_.version = nv::NVML_GPM_METRICS_GET_VERSION;
  metrics_.numMetrics = nv::kGpmMetricsCapacity + 1;
  EXPECT_EQ(Fn<nv::GpmMetricsGetFn>("nvmlGpmMetricsGet")(&metrics_),
            nv::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Fn<nv::GpmMetricsGetFn>("nvmlGpmMetricsGet")(nullptr), nv::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(GpmSampleGet(Device(0), nv::nvmlGpmSample_t{}), nv::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Fn<nv::GpmSampleFreeFn>("nvmlGpmSampleFree")(nv::nvmlGpmSample_t{}),
            nv::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Fn<nv::GpmSampleAllocFn>("nvmlGpmSampleAlloc")(nullptr),
            nv::NVML_ERROR_INVALID_ARGUMENT);
}

// MIG needs nvmlGpmMigSampleGet; "not_supported": ["gpm"] turns off every GPM device call; a GPU
// that fails fails its GPM calls too.
TEST_F(FakeNvmlLibTest, GpmMigUnsupportedAndFailingGpus) {
  constexpr const char* kGpus = R"("gpus": [{"gpm": {}, "mig": "enabled"},
      {"gpm": {}, "not_supported": ["gpm"]}, {"gpm": {}, "fail_from_s": 1}]})";
  ASSERT_EQ(Init(WriteFile("a.json", std::string(R"({"frozen_at_s": 0.5, )") + kGpus)),
            nv::NVML_SUCCESS);
  const nv::nvmlGpmSample_t s1 = GpmAlloc(), s2 = GpmAlloc(), s3 = GpmAlloc();
  unsigned int supported = 0;
  EXPECT_EQ(GpmSupport(Device(0), &supported), nv::NVML_SUCCESS);
  EXPECT_EQ(supported, 1U) << "a Hopper GPU in MIG mode still has GPM";
  EXPECT_EQ(GpmSampleGet(Device(0), s1), nv::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(GpmSupport(Device(1), &supported), nv::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(GpmSampleGet(Device(1), s1), nv::NVML_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(GpmSampleGet(Device(2), s2), nv::NVML_SUCCESS);
  ASSERT_EQ(GpmSampleGet(Device(2), s3), nv::NVML_SUCCESS);
  ASSERT_EQ(Shutdown(), nv::NVML_SUCCESS);
  ASSERT_EQ(Init(WriteFile("b.json", std::string(R"({"frozen_at_s": 2, )") + kGpus)),
            nv::NVML_SUCCESS);
  EXPECT_EQ(GpmSampleGet(Device(2), s3), nv::NVML_ERROR_UNKNOWN);
  EXPECT_EQ(GpmMetrics(s2, s3, {nv::NVML_GPM_METRIC_SM_UTIL}), nv::NVML_ERROR_UNKNOWN);
}

TEST_F(FakeNvmlLibTest, GpmCostsWithTheFirstMetricsGetDearer) {
  ASSERT_EQ(Init(ScenarioPath("h100_gpm.json"), "h100"), nv::NVML_SUCCESS);
  nv::nvmlDevice_t device = Device(0);
  const nv::nvmlGpmSample_t s1 = GpmAlloc(), s2 = GpmAlloc();
  int64_t cpu0 = ThreadCpuNs();
  ASSERT_EQ(GpmSampleGet(device, s1), nv::NVML_SUCCESS);
  EXPECT_GE(ThreadCpuNs() - cpu0, 0.08 * kMs) << "nvmlGpmSampleGet: 85 µs";
  ASSERT_EQ(GpmSampleGet(device, s2), nv::NVML_SUCCESS);
  const std::vector<unsigned int> ids(std::begin(kAllGpmIds), std::end(kAllGpmIds));
  cpu0 = ThreadCpuNs();
  ASSERT_EQ(GpmMetrics(s1, s2, ids), nv::NVML_SUCCESS);
  EXPECT_GE(ThreadCpuNs() - cpu0, 7.9 * kMs) << "the first nvmlGpmMetricsGet: 8 ms";
  cpu0 = ThreadCpuNs();
  ASSERT_EQ(GpmMetrics(s1, s2, ids), nv::NVML_SUCCESS);
  EXPECT_GE(ThreadCpuNs() - cpu0, 1.6 * kMs) << "later ones: 1.65 ms";
}

}  // namespace
}  // namespace stallscope::fake_nvml
