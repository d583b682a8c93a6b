// GPM (GPU Performance Monitoring) for NvmlBackend: hardware counters turned by the driver into
// exact averages between two samples (nvml.h "GPM"; Hopper and later). Split from
// nvml_backend.cc, whose class this completes.

#include <array>
#include <memory>

#include "base/clock.h"
#include "gpu/nvml_backend.h"

namespace stallscope::gpu {
namespace {

namespace nv = nvml;

/// DCGM's profiling fields have a 100 ms floor; a shorter GPM window is not reported.
constexpr int64_t kMinGpmWindowNs = 100'000'000;

/// The metrics asked for, and where each goes.
struct GpmField {
  nv::nvmlGpmMetricId_t id;
  std::optional<double> GpmMetrics::*field;
};

constexpr std::array<GpmField, 13> kGpmFields{{
    {nv::NVML_GPM_METRIC_GRAPHICS_UTIL, &GpmMetrics::graphics_active_pct},
    {nv::NVML_GPM_METRIC_SM_UTIL, &GpmMetrics::sm_active_pct},
    {nv::NVML_GPM_METRIC_SM_OCCUPANCY, &GpmMetrics::sm_occupancy_pct},
    {nv::NVML_GPM_METRIC_ANY_TENSOR_UTIL, &GpmMetrics::tensor_active_pct},
    {nv::NVML_GPM_METRIC_HMMA_TENSOR_UTIL, &GpmMetrics::tensor_hmma_pct},
    {nv::NVML_GPM_METRIC_DRAM_BW_UTIL, &GpmMetrics::dram_active_pct},
    {nv::NVML_GPM_METRIC_FP64_UTIL, &GpmMetrics::fp64_active_pct},
    {nv::NVML_GPM_METRIC_FP32_UTIL, &GpmMetrics::fp32_active_pct},
    {nv::NVML_GPM_METRIC_FP16_UTIL, &GpmMetrics::fp16_active_pct},
    {nv::NVML_GPM_METRIC_PCIE_TX_PER_SEC, &GpmMetrics::pcie_tx_mibps},
    {nv::NVML_GPM_METRIC_PCIE_RX_PER_SEC, &GpmMetrics::pcie_rx_mibps},
    {nv::NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, &GpmMetrics::nvlink_tx_mibps},
    {nv::NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, &GpmMetrics::nvlink_rx_mibps},
}};

/// A percentage or rate the driver gave; NaN, negative or absurd values are dropped.
std::optional<double> Plausible(double v) {
  if (!(v >= 0 && v < 1e12)) return std::nullopt;  // also rejects NaN
  return v;
}

}  // namespace

void NvmlBackend::OpenGpm(Gpu& gpu) {
  GpuStatic& info = gpu.info;
  if (api_.gpm_query_device_support == nullptr || api_.gpm_sample_alloc == nullptr ||
      api_.gpm_sample_free == nullptr || api_.gpm_sample_get == nullptr ||
      api_.gpm_metrics_get == nullptr) {
    info.gpm_note = "this driver has no GPM (nvmlGpm* needs driver 520 or later)";
    return;
  }
  if (info.mig_mode == MigMode::kEnabled) {
    info.gpm_note = "MIG is enabled: GPM would need per-instance sampling, not done";
    return;
  }
  nv::nvmlGpmSupport_t support{nv::NVML_GPM_SUPPORT_VERSION, 0};
  const nv::nvmlReturn_t rc = api_.gpm_query_device_support(gpu.handle, &support);
  if (rc != nv::NVML_SUCCESS || support.isSupportedDevice == 0) {
    info.gpm_note = rc == nv::NVML_SUCCESS
                        ? "not supported by this GPU (GPM needs Hopper or later, and no vGPU)"
                        : std::string("GPM support query failed: ") + ErrorString(rc);
    return;
  }
  if (api_.gpm_sample_alloc(&gpu.gpm_prev) != nv::NVML_SUCCESS ||
      api_.gpm_sample_alloc(&gpu.gpm_next) != nv::NVML_SUCCESS) {
    CloseGpm(gpu);
    info.gpm_note = "GPM sample buffers could not be allocated";
    return;
  }
  if (!gpm_request_) gpm_request_ = std::make_unique<nv::nvmlGpmMetricsGet_t>();
  // Two samples and a first metrics call: it costs 6-9.5 ms on an H100 (later ones 1.4-1.9 ms),
  // better here than in the first sampling round. gpm_prev ends as the open's snapshot.
  gpu.supported.set(static_cast<size_t>(NvmlMetric::kGpm));
  GpuSample scratch;
  const nv::nvmlReturn_t first = api_.gpm_sample_get(gpu.handle, gpu.gpm_prev);
  gpu.gpm_prev_ns = MonotonicNs();
  if (first != nv::NVML_SUCCESS) {
    CloseGpm(gpu);
    info.gpm_note = std::string("GPM sampling failed: ") + ErrorString(first);
    return;
  }
  ReadGpm(gpu, scratch, /*force=*/true);
  if (!Has(gpu, NvmlMetric::kGpm)) {
    info.gpm_note = "GPM sampling failed at open";
    return;
  }
  info.gpm = true;
}

void NvmlBackend::ReadGpm(Gpu& gpu, GpuSample& out, bool force) {
  if (gpu.lost || !Has(gpu, NvmlMetric::kGpm)) return;
  // A window shorter than DCGM's 100 ms floor for profiling fields is noise (the first sample
  // right after open): it stays open and grows into the next read.
  if (!force && MonotonicNs() - gpu.gpm_prev_ns < kMinGpmWindowNs) return;
  const nv::nvmlReturn_t rc = api_.gpm_sample_get(gpu.handle, gpu.gpm_next);
  const int64_t now_ns = MonotonicNs();
  if (!Check(gpu, NvmlMetric::kGpm, rc)) return;
  nv::nvmlGpmMetricsGet_t& request = *gpm_request_;
  request.version = nv::NVML_GPM_METRICS_GET_VERSION;
  request.numMetrics = static_cast<unsigned int>(kGpmFields.size());
  request.sample1 = gpu.gpm_prev;
  request.sample2 = gpu.gpm_next;
  for (size_t k = 0; k < kGpmFields.size(); ++k) {
    request.metrics[k] = nv::nvmlGpmMetric_t{};
    request.metrics[k].metricId = kGpmFields[k].id;
  }
  const nv::nvmlReturn_t got = api_.gpm_metrics_get(&request);
  // The newer sample starts the next window whatever the answer.
  std::swap(gpu.gpm_prev, gpu.gpm_next);
  const int64_t window_ns = now_ns - gpu.gpm_prev_ns;
  gpu.gpm_prev_ns = now_ns;
  if (!Check(gpu, NvmlMetric::kGpm, got)) return;
  GpmMetrics& m = out.gpm.emplace();
  m.window_ns = window_ns;
  for (size_t k = 0; k < kGpmFields.size(); ++k) {
    const nv::nvmlGpmMetric_t& metric = request.metrics[k];
    if (metric.nvmlReturn == nv::NVML_SUCCESS) m.*(kGpmFields[k].field) = Plausible(metric.value);
  }
}

void NvmlBackend::CloseGpm(Gpu& gpu) {
  if (api_.gpm_sample_free != nullptr) {
    if (gpu.gpm_prev.handle != nullptr) api_.gpm_sample_free(gpu.gpm_prev);
    if (gpu.gpm_next.handle != nullptr) api_.gpm_sample_free(gpu.gpm_next);
  }
  gpu.gpm_prev = {};
  gpu.gpm_next = {};
  gpu.supported.reset(static_cast<size_t>(NvmlMetric::kGpm));
}

}  // namespace stallscope::gpu
