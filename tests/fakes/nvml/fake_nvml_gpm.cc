// The fake libnvidia-ml's GPM entry points (GPU Performance Monitoring, Hopper and later):
// nvmlGpmQueryDeviceSupport, nvmlGpmSampleAlloc/Free, nvmlGpmSampleGet and nvmlGpmMetricsGet.
// Built into the full fake only: the legacy build plays a driver from before GPM. Scenario key
// "gpm" and what each call answers: README.md next to this file.

#include <cstdlib>
#include <optional>
#include <type_traits>

#include "fake_state.h"
#include "gpu/nvml_abi.h"
#include "scenario.h"

namespace stallscope::gpu::nvml {
/// What an nvmlGpmSample_t points at in the fake: the GPU and the scenario time of the snapshot.
struct nvmlGpmSample_st {  // NOLINT(readability-identifier-naming): NVML's name
  bool taken = false;      ///< set by nvmlGpmSampleGet
  uint32_t gpu_index = 0;
  double t = 0;
};
}  // namespace stallscope::gpu::nvml

namespace stallscope::fake_nvml {
namespace {

/// Mean utilization (%) over [t1, t2]: exact, from the pattern's integral; the value at t1 for
/// an empty window.
double MeanUtil(const Pattern& p, double t1, double t2) {
  if (t2 <= t1) return UtilAt(p, t1);
  return (UtilIntegral(p, t2) - UtilIntegral(p, t1)) / (t2 - t1);
}

/// One metric over a window of mean utilization `util`; empty for ids outside nvmlGpmMetricId_t.
std::optional<double> MetricValue(const Gpm& g, unsigned int id, double util) {
  switch (id) {
    case nv::NVML_GPM_METRIC_GRAPHICS_UTIL:
      return util;
    case nv::NVML_GPM_METRIC_SM_UTIL:
      return util * g.sm_active_ratio;
    case nv::NVML_GPM_METRIC_SM_OCCUPANCY:
      return g.sm_occupancy_pct * util / 100.0;
    case nv::NVML_GPM_METRIC_ANY_TENSOR_UTIL:
    case nv::NVML_GPM_METRIC_HMMA_TENSOR_UTIL:
      return util * g.tensor_active_ratio;
    case nv::NVML_GPM_METRIC_DRAM_BW_UTIL:
      return util * g.dram_active_ratio;
    case nv::NVML_GPM_METRIC_FP64_UTIL:
      return util * g.fp64_active_ratio;
    case nv::NVML_GPM_METRIC_FP32_UTIL:
      return util * g.fp32_active_ratio;
    case nv::NVML_GPM_METRIC_FP16_UTIL:
      return util * g.fp16_active_ratio;
    case nv::NVML_GPM_METRIC_PCIE_TX_PER_SEC:
      return g.pcie_tx_mibps;
    case nv::NVML_GPM_METRIC_PCIE_RX_PER_SEC:
      return g.pcie_rx_mibps;
    case nv::NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC:
      return g.nvlink_rx_mibps;
    case nv::NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC:
      return g.nvlink_tx_mibps;
    default:
      return std::nullopt;
  }
}

/// nvmlGpmMetricsGet under State::mu; sets `*first` on the GPU's first call since nvmlInit.
nvmlReturn_t MetricsGet(State& s, nv::nvmlGpmMetricsGet_t* m, bool* first) {
  if (m == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  if (m->version != nv::NVML_GPM_METRICS_GET_VERSION) {
    return nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  const nv::nvmlGpmSample_st* s1 = m->sample1.handle;
  const nv::nvmlGpmSample_st* s2 = m->sample2.handle;
  if (m->numMetrics > nv::kGpmMetricsCapacity || s1 == nullptr || s2 == nullptr || !s1->taken ||
      !s2->taken || s1->gpu_index != s2->gpu_index || s1->gpu_index >= s.scenario.gpus.size()) {
    return nv::NVML_ERROR_INVALID_ARGUMENT;
  }
  // sample1 is the older one; the other order is a client bug, and fails loudly here.
  if (s2->t < s1->t) return nv::NVML_ERROR_INVALID_ARGUMENT;
  const Gpu& gpu = s.scenario.gpus[s1->gpu_index];
  if (const nvmlReturn_t rc = GpuFailure(gpu, s.Now(), kFeatureGpm); rc != nv::NVML_SUCCESS) {
    return rc;
  }
  if (!gpu.gpm) return nv::NVML_ERROR_NOT_SUPPORTED;
  if (!s.gpm_metrics_seen[s1->gpu_index]) {
    s.gpm_metrics_seen[s1->gpu_index] = true;
    *first = true;
  }
  const double util = MeanUtil(gpu.pattern, s1->t, s2->t);
  for (unsigned int i = 0; i < m->numMetrics; ++i) {
    nv::nvmlGpmMetric_t& metric = m->metrics[i];
    const std::optional<double> value = MetricValue(*gpu.gpm, metric.metricId, util);
    metric.nvmlReturn = value ? nv::NVML_SUCCESS : nv::NVML_ERROR_NOT_SUPPORTED;
    metric.value = value.value_or(0.0);
    metric.metricInfo = {};  // the fake has no metric names: NULL, which clients must accept
  }
  return nv::NVML_SUCCESS;
}

}  // namespace

// ---- Exported entry points (names and signatures: nvml.h, CUDA 12.x) ----------------------

FAKE_NVML_API nvmlReturn_t nvmlGpmQueryDeviceSupport(nv::nvmlDevice_t device,
                                                     nv::nvmlGpmSupport_t* support) {
  return OnGpu(__func__, device, kFeatureGpm, [&](const Ctx& c) {
    if (support == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != nv::NVML_GPM_SUPPORT_VERSION) {
      return nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    // A GPU without the scenario key is pre-Hopper: the call succeeds and says no.
    support->isSupportedDevice = c.gpu.gpm ? 1 : 0;
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlGpmSampleAlloc(nv::nvmlGpmSample_t* sample) {
  return OnSystem(__func__, [&](State&) {
    if (sample == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    // malloc/free, as the C driver does: a client that replaces operator new/delete (the tests'
    // allocation counters) must not see the fake's own objects.
    sample->handle =
        static_cast<nv::nvmlGpmSample_st*>(std::calloc(1, sizeof(nv::nvmlGpmSample_st)));
    return sample->handle == nullptr ? nv::NVML_ERROR_MEMORY : nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlGpmSampleFree(nv::nvmlGpmSample_t sample) {
  State& s = TheState();
  s.cost.Charge(__func__);
  const std::lock_guard lock(s.mu);
  s.Count(__func__);
  if (s.Missing(__func__)) return nv::NVML_ERROR_FUNCTION_NOT_FOUND;
  if (sample.handle == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  // Also after nvmlShutdown: a client that shuts down first must not leak its samples.
  std::free(sample.handle);
  return nv::NVML_SUCCESS;
}

FAKE_NVML_API nvmlReturn_t nvmlGpmSampleGet(nv::nvmlDevice_t device, nv::nvmlGpmSample_t sample) {
  return OnGpu(__func__, device, kFeatureGpm, [&](const Ctx& c) {
    if (sample.handle == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    // NVML API reference: a MIG-enabled GPU needs nvmlGpmMigSampleGet (per GPU instance).
    if (!c.gpu.gpm || c.gpu.mig == Mig::kEnabled) return nv::NVML_ERROR_NOT_SUPPORTED;
    // The sample keeps its GPU index and t across nvmlShutdown/nvmlInit: tests pick exact
    // windows by taking samples under two frozen_at_s scenarios in turn.
    *sample.handle = nv::nvmlGpmSample_st{true, device->index, c.t};
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlGpmMetricsGet(nv::nvmlGpmMetricsGet_t* metrics_get) {
  bool first = false;
  const nvmlReturn_t rc =
      OnSystem(__func__, [&](State& s) { return MetricsGet(s, metrics_get, &first); });
  // The real first call per GPU takes 6-9.5 ms: charge the rest of it, outside the lock.
  if (first) TheState().cost.ChargeFirstGpmMetrics();
  return rc;
}

static_assert(std::is_same_v<decltype(nvmlGpmQueryDeviceSupport), nv::GpmQueryDeviceSupportFn>);
static_assert(std::is_same_v<decltype(nvmlGpmSampleAlloc), nv::GpmSampleAllocFn>);
static_assert(std::is_same_v<decltype(nvmlGpmSampleFree), nv::GpmSampleFreeFn>);
static_assert(std::is_same_v<decltype(nvmlGpmSampleGet), nv::GpmSampleGetFn>);
static_assert(std::is_same_v<decltype(nvmlGpmMetricsGet), nv::GpmMetricsGetFn>);

}  // namespace stallscope::fake_nvml
