#include "gpu/nvml_backend.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "base/clock.h"

namespace stallscope::gpu {
namespace {

namespace nv = nvml;

// A GPU whose core call fails this many times in a row is treated as lost, even without
// GPU_IS_LOST (a wedged driver answers UNKNOWN forever; one bad answer is not enough).
constexpr int kCoreErrorsBeforeLost = 3;
constexpr size_t kInitialProcessCapacity = 64;
constexpr size_t kInitialProcUtilCapacity = 128;
// NVML keeps ~100 GPU-utilization samples (observed: 100 on Ampere/Hopper); never trust a driver
// answer to size a buffer without a cap.
constexpr unsigned int kMaxDriverSampleBuffer = 4096;
// NVIDIA's driver supports at most NV_MAX_DEVICES = 32 GPUs per system (open-gpu-kernel-modules,
// src/common/sdk/nvidia/inc/nvlimits.h); nvmlDeviceGetCount counts physical GPUs, not MIG
// instances. 256 leaves room for future drivers; a larger count is a broken library (issue 12
// finding 4: 0xFFFFFFFF devices made the slots' reserve throw bad_alloc).
constexpr unsigned int kMaxDevices = 256;

/// Answers that will not change while we run: stop asking.
bool IsUnsupported(nv::nvmlReturn_t rc) {
  return rc == nv::NVML_ERROR_NOT_SUPPORTED || rc == nv::NVML_ERROR_FUNCTION_NOT_FOUND ||
         rc == nv::NVML_ERROR_NO_PERMISSION;
}

/// Calls an optional entry point; an absent symbol answers FUNCTION_NOT_FOUND (= unsupported).
template <typename Fn, typename... Args>
nv::nvmlReturn_t CallIf(Fn* fn, Args... args) {
  return fn != nullptr ? fn(args...) : nv::NVML_ERROR_FUNCTION_NOT_FOUND;
}

std::string FromBuffer(const char* buf, size_t size) {
  return std::string(buf, strnlen(buf, size));
}

uint32_t ClampU32(unsigned long long v) {
  return static_cast<uint32_t>(
      std::min<unsigned long long>(v, std::numeric_limits<uint32_t>::max()));
}

/// The value of one nvmlDeviceGetSamples entry, per the value type the driver reported
/// (GPU utilization is NVML_VALUE_TYPE_UNSIGNED_INT on every driver seen; the rest is defensive).
std::optional<uint32_t> SampleValue(nv::nvmlValueType_t type, const nv::nvmlValue_t& value) {
  switch (type) {
    case nv::NVML_VALUE_TYPE_UNSIGNED_INT:
      return value.uiVal;
    case nv::NVML_VALUE_TYPE_UNSIGNED_SHORT:
      return value.usVal;
    case nv::NVML_VALUE_TYPE_UNSIGNED_LONG:
      return ClampU32(value.ulVal);
    case nv::NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      return ClampU32(value.ullVal);
    case nv::NVML_VALUE_TYPE_SIGNED_INT:
      if (value.siVal < 0) return std::nullopt;
      return static_cast<uint32_t>(value.siVal);
    case nv::NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      if (value.sllVal < 0) return std::nullopt;
      return ClampU32(static_cast<unsigned long long>(value.sllVal));
    case nv::NVML_VALUE_TYPE_DOUBLE:
      if (!(value.dVal >= 0 && value.dVal < 4e9)) return std::nullopt;  // also rejects NaN
      return static_cast<uint32_t>(std::lround(value.dVal));
    default:
      return std::nullopt;
  }
}

/// CPU time of the calling thread (the probe's cost measure: a 20 ms PCIe call that sleeps
/// costs its 0.7 ms of CPU, not 20 ms).
int64_t ThreadCpuNs() { return ReadClockNs(CLOCK_THREAD_CPUTIME_ID); }

ErrorCode InitErrorCode(nv::nvmlReturn_t rc) {
  switch (rc) {
    case nv::NVML_ERROR_NO_PERMISSION:
      return ErrorCode::kPermission;
    case nv::NVML_ERROR_DRIVER_NOT_LOADED:
    case nv::NVML_ERROR_LIB_RM_VERSION_MISMATCH:
    case nv::NVML_ERROR_LIBRARY_NOT_FOUND:
    case nv::NVML_ERROR_NOT_SUPPORTED:
      return ErrorCode::kUnsupported;
    default:
      return ErrorCode::kInternal;
  }
}

constexpr std::array<std::string_view, static_cast<size_t>(NvmlMetric::kCount)> kMetricNames{
    "memory",
    "utilization",
    "util_samples",
    "power",
    "power_limit",
    "energy",
    "temperature",
    "sm_clock",
    "mem_clock",
    "clock_events",
    "pcie_throughput",
    "pcie_link",
    "ecc",
    "compute_processes",
    "graphics_processes",
    "process_utilization",
    "gpm",
};

}  // namespace

std::string_view NvmlMetricName(NvmlMetric metric) {
  const auto i = static_cast<size_t>(metric);
  return i < kMetricNames.size() ? kMetricNames[i] : "unknown";
}

Result<std::unique_ptr<GpuBackend>> OpenNvml(const NvmlOptions& options) {
  TRY(auto library, NvmlLibrary::Open(options.library_path));
  TRY(auto backend, NvmlBackend::Open(std::move(library), options));
  return std::unique_ptr<GpuBackend>(std::move(backend));
}

template <typename Fn, size_t N>
template <typename... Args>
nv::nvmlReturn_t NvmlBackend::Versioned<Fn, N>::Call(Args... args) {
  for (; pos < N; ++pos) {
    if (candidates[pos] == nullptr) continue;
    const nv::nvmlReturn_t rc = candidates[pos](args...);
    if (rc != nv::NVML_ERROR_FUNCTION_NOT_FOUND) return rc;
  }
  return nv::NVML_ERROR_FUNCTION_NOT_FOUND;
}

NvmlBackend::NvmlBackend(std::unique_ptr<NvmlLibrary> library)
    : library_(std::move(library)), api_(library_->api()) {
  init_.candidates = {api_.init_v2, api_.init};
  get_cuda_version_.candidates = {api_.system_get_cuda_driver_version_v2,
                                  api_.system_get_cuda_driver_version};
  get_count_.candidates = {api_.get_count_v2, api_.get_count};
  get_handle_.candidates = {api_.get_handle_by_index_v2, api_.get_handle_by_index};
  get_pci_.candidates = {api_.get_pci_info_v3, api_.get_pci_info_v2};
  get_power_limit_.candidates = {api_.get_enforced_power_limit, api_.get_power_management_limit};
  get_clock_events_.candidates = {api_.get_clocks_event_reasons, api_.get_clocks_throttle_reasons};
  get_compute_.candidates = {api_.get_compute_processes_v3, api_.get_compute_processes_v2};
  get_graphics_.candidates = {api_.get_graphics_processes_v3, api_.get_graphics_processes_v2};
  sample_buf_.resize(kMaxUtilSamples);
  proc_buf_.resize(kInitialProcessCapacity);
  proc_buf_v1_.resize(kInitialProcessCapacity);
  proc_util_buf_.resize(kInitialProcUtilCapacity);
}

NvmlBackend::~NvmlBackend() {
  pcie_.reset();  // its thread calls NVML: stop it before shutdown
  for (Gpu& gpu : gpus_) CloseGpm(gpu);
  if (initialized_ && api_.shutdown != nullptr) api_.shutdown();
}

Result<std::unique_ptr<NvmlBackend>> NvmlBackend::Open(std::unique_ptr<NvmlLibrary> library,
                                                       const NvmlOptions& options) {
  std::unique_ptr<NvmlBackend> backend(new NvmlBackend(std::move(library)));
  TRY_STATUS(backend->Init());
  unsigned int count = 0;
  const nv::nvmlReturn_t rc = backend->get_count_.Call(&count);
  if (rc != nv::NVML_SUCCESS) {
    return MakeError(ErrorCode::kInternal, "nvmlDeviceGetCount failed: {} ({})",
                     backend->ErrorString(rc), static_cast<int>(rc));
  }
  if (count > kMaxDevices) {
    return MakeError(ErrorCode::kUnsupported,
                     "nvmlDeviceGetCount reported {} devices, more than the {} any NVIDIA driver "
                     "supports: a broken libnvidia-ml?",
                     count, kMaxDevices);
  }
  backend->gpus_.reserve(count);
  TierCosts cost_sum{};
  for (uint32_t i = 0; i < count; ++i) {
    backend->AddGpu(i, options);
    if (backend->gpus_.size() == i + 1 && !backend->gpus_.back().lost) {
      backend->Probe(backend->gpus_.back(), cost_sum);
    }
  }
  size_t probed = 0;
  for (const Gpu& gpu : backend->gpus_) probed += gpu.lost ? 0 : 1;
  for (size_t t = 0; t < kPollTierCount && probed > 0; ++t) {
    if (cost_sum[t]) backend->probed_costs_[t] = *cost_sum[t] / static_cast<double>(probed);
  }
  if (options.query_pcie_throughput && !backend->gpus_.empty()) {
    backend->StartPcie(options.pcie_period_ns);
  }
  return backend;
}

Status NvmlBackend::Init() {
  const nv::nvmlReturn_t rc = init_.Call();
  if (rc != nv::NVML_SUCCESS) {
    return MakeError(InitErrorCode(rc), "nvmlInit failed: {} ({})", ErrorString(rc),
                     static_cast<int>(rc));
  }
  initialized_ = true;
  char version[nv::NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (CallIf(api_.system_get_driver_version, version, static_cast<unsigned int>(sizeof version)) ==
      nv::NVML_SUCCESS) {
    driver_version_ = FromBuffer(version, sizeof version);
  }
  int cuda_version = 0;
  if (get_cuda_version_.Call(&cuda_version) == nv::NVML_SUCCESS && cuda_version > 0) {
    cuda_driver_version_ = cuda_version;
  }
  return OkStatus();
}

const char* NvmlBackend::ErrorString(nv::nvmlReturn_t rc) const {
  const char* text = api_.error_string != nullptr ? api_.error_string(rc) : nullptr;
  return text != nullptr ? text : "unknown NVML error";
}

void NvmlBackend::AddGpu(uint32_t index, const NvmlOptions& options) {
  Gpu gpu;
  gpu.info.index = index;
  const nv::nvmlReturn_t rc = get_handle_.Call(index, &gpu.handle);
  // A GPU outside our cgroup/container answers NO_PERMISSION: not ours to watch (nvidia-smi
  // skips it too). Any other failure keeps the slot, marked lost, so indices stay meaningful.
  if (rc == nv::NVML_ERROR_NO_PERMISSION) return;
  if (rc != nv::NVML_SUCCESS) {
    gpu.lost = true;
    gpus_.push_back(std::move(gpu));
    return;
  }
  gpu.supported.set();
  // PCIe throughput is read by the PciePoller's thread, never by Sample().
  gpu.supported.reset(static_cast<size_t>(NvmlMetric::kPcieThroughput));
  // samples == NULL asks for the size of the driver's buffer (NVML API reference).
  unsigned int driver_buffer = 0;
  nv::nvmlValueType_t type = nv::NVML_VALUE_TYPE_UNSIGNED_INT;
  if (CallIf(api_.get_samples, gpu.handle, nv::NVML_GPU_UTILIZATION_SAMPLES, 0ULL, &type,
             &driver_buffer, static_cast<nv::nvmlSample_t*>(nullptr)) == nv::NVML_SUCCESS) {
    const size_t want = std::min(driver_buffer, kMaxDriverSampleBuffer);
    if (want > sample_buf_.size()) sample_buf_.resize(want);
  }
  ReadStatic(gpu);
  gpu.supported.reset(static_cast<size_t>(NvmlMetric::kGpm));
  if (!gpu.lost && options.gpm) {
    OpenGpm(gpu);
  } else if (!options.gpm) {
    gpu.info.gpm_note = "not asked for (--no-gpm)";
  }
  gpus_.push_back(std::move(gpu));
}

void NvmlBackend::Probe(Gpu& gpu, TierCosts& cost_sum_us) {
  // One read of every tier, each timed. Unsupported metrics drop out of `supported` here and are
  // never asked again; the sample buffers' last-seen timestamps start from now.
  auto probe = std::make_unique<GpuSample>();
  auto timed = [&](PollTier tier, auto&& read) {
    const int64_t begin = ThreadCpuNs();
    read();
    const double us = static_cast<double>(ThreadCpuNs() - begin) / 1e3;
    auto& sum = cost_sum_us[TierIndex(tier)];
    sum = sum.value_or(0) + us;
  };
  timed(PollTier::kTick, [&] {
    ReadCore(gpu, *probe);
    ReadPowerAndThermal(gpu, *probe);
    ReadClocks(gpu, *probe);
    ReadProcesses(gpu, /*graphics=*/false, *probe);
    ReadProcesses(gpu, /*graphics=*/true, *probe);
  });
  timed(PollTier::kUtilBuffer, [&] { ReadUtilSamples(gpu, *probe); });
  timed(PollTier::kEnergy, [&] { ReadEnergy(gpu, *probe); });
  timed(PollTier::kSlow, [&] { ReadSlow(gpu, *probe); });
  // Asked even without processes (the driver then answers NOT_FOUND, at the same 2.2 ms on an
  // H100), so the plan knows its cost before the job starts.
  if (probe->processes.empty()) probe->processes.emplace_back();
  timed(PollTier::kProcessUtil, [&] { MergeProcessUtilization(gpu, *probe); });
  if (Has(gpu, NvmlMetric::kGpm)) {
    // The first nvmlGpmMetricsGet costs 6-9.5 ms on an H100, later ones 1.4-1.9 ms: OpenGpm made
    // the first; this one is what a tier round costs.
    timed(PollTier::kGpm, [&] { ReadGpm(gpu, *probe, /*force=*/true); });
  }
}

void NvmlBackend::StartPcie(int64_t period_ns) {
  std::vector<nv::nvmlDevice_t> handles;
  for (const Gpu& gpu : gpus_) handles.push_back(gpu.lost ? nullptr : gpu.handle);
  auto* fn = api_.get_pcie_throughput;
  if (fn == nullptr) return;
  pcie_ = std::make_unique<PciePoller>(
      handles.size(), period_ns,
      [handles, fn](size_t i, uint32_t* tx, uint32_t* rx, bool* unsupported) {
        if (handles[i] == nullptr) {
          *unsupported = true;
          return false;
        }
        unsigned int tx_v = 0, rx_v = 0;
        const nv::nvmlReturn_t rc_tx = fn(handles[i], nv::NVML_PCIE_UTIL_TX_BYTES, &tx_v);
        const nv::nvmlReturn_t rc_rx =
            rc_tx == nv::NVML_SUCCESS ? fn(handles[i], nv::NVML_PCIE_UTIL_RX_BYTES, &rx_v) : rc_tx;
        *unsupported = IsUnsupported(rc_rx) || rc_rx == nv::NVML_ERROR_GPU_IS_LOST;
        *tx = tx_v;
        *rx = rx_v;
        return rc_rx == nv::NVML_SUCCESS;
      });
}

void NvmlBackend::ReadStatic(Gpu& gpu) {
  const nv::nvmlDevice_t h = gpu.handle;
  GpuStatic& info = gpu.info;
  // Static reads never disable a metric; they only notice a GPU that is already gone.
  auto ok = [&gpu](nv::nvmlReturn_t rc) {
    if (rc == nv::NVML_ERROR_GPU_IS_LOST) gpu.lost = true;
    return rc == nv::NVML_SUCCESS;
  };
  char text[nv::NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (ok(CallIf(api_.get_name, h, text, static_cast<unsigned int>(sizeof text)))) {
    info.name = FromBuffer(text, sizeof text);
  }
  char uuid[nv::NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (ok(CallIf(api_.get_uuid, h, uuid, static_cast<unsigned int>(sizeof uuid)))) {
    info.uuid = FromBuffer(uuid, sizeof uuid);
  }
  nv::nvmlPciInfo_t pci{};
  nv::nvmlPciInfoLegacy_t legacy{};
  if (ok(get_pci_.Call(h, &pci))) {
    info.pci_bus_id = FromBuffer(pci.busId, sizeof pci.busId);
  } else if (ok(CallIf(api_.get_pci_info, h, &legacy))) {
    info.pci_bus_id = FromBuffer(legacy.busId, sizeof legacy.busId);
  }
  nv::nvmlMemory_t mem{};
  if (ok(CallIf(api_.get_memory_info, h, &mem))) info.mem_total_bytes = mem.total;
  unsigned int v = 0;
  if (ok(get_power_limit_.Call(h, &v))) info.power_limit_mw = v;
  if (ok(CallIf(api_.get_max_clock_info, h, nv::NVML_CLOCK_SM, &v))) info.sm_clock_max_mhz = v;
  if (ok(CallIf(api_.get_max_clock_info, h, nv::NVML_CLOCK_MEM, &v))) info.mem_clock_max_mhz = v;
  if (ok(CallIf(api_.get_max_pcie_link_generation, h, &v))) info.pcie_gen_max = v;
  if (ok(CallIf(api_.get_max_pcie_link_width, h, &v))) info.pcie_width_max = v;
  nv::nvmlEnableState_t persistence = nv::NVML_FEATURE_DISABLED;
  if (ok(CallIf(api_.get_persistence_mode, h, &persistence))) {
    info.persistence_mode = persistence == nv::NVML_FEATURE_ENABLED;
  }
  unsigned int mig_current = 0;
  unsigned int mig_pending = 0;
  if (ok(CallIf(api_.get_mig_mode, h, &mig_current, &mig_pending))) {
    info.mig_mode =
        mig_current == nv::NVML_DEVICE_MIG_ENABLE ? MigMode::kEnabled : MigMode::kDisabled;
  }
}

GpuHealth NvmlBackend::Health(size_t i) {
  GpuHealth out;
  if (i >= gpus_.size() || gpus_[i].lost) return out;
  const Gpu& gpu = gpus_[i];
  const nv::nvmlDevice_t h = gpu.handle;
  unsigned int v = 0;
  if (CallIf(api_.get_gpu_max_pcie_link_generation, h, &v) == nv::NVML_SUCCESS) {
    out.pcie_gen_gpu_max = v;
  }
  if (CallIf(api_.get_power_management_default_limit, h, &v) == nv::NVML_SUCCESS) {
    out.power_limit_default_mw = v;
  }
  ReadMemoryHealth(gpu, out);
  // 16 words = 1024 CPUs (LP64), the kernel's default NR_CPUS on x86-64 distributions.
  std::array<unsigned long, 16> mask{};
  if (CallIf(api_.get_cpu_affinity, h, static_cast<unsigned int>(mask.size()), mask.data()) ==
      nv::NVML_SUCCESS) {
    constexpr uint32_t kBits = sizeof(unsigned long) * 8;
    for (uint32_t cpu = 0; cpu < mask.size() * kBits; ++cpu) {
      if (((mask[cpu / kBits] >> (cpu % kBits)) & 1UL) != 0) out.ideal_cpus.push_back(cpu);
    }
  }
  return out;
}

void NvmlBackend::ReadMemoryHealth(const Gpu& gpu, GpuHealth& out) const {
  const nv::nvmlDevice_t h = gpu.handle;
  unsigned long long count = 0;
  if (CallIf(api_.get_total_ecc_errors, h, nv::NVML_MEMORY_ERROR_TYPE_CORRECTED,
             nv::NVML_AGGREGATE_ECC, &count) == nv::NVML_SUCCESS) {
    out.ecc_aggregate_corrected = count;
  }
  if (CallIf(api_.get_total_ecc_errors, h, nv::NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
             nv::NVML_AGGREGATE_ECC, &count) == nv::NVML_SUCCESS) {
    out.ecc_aggregate_uncorrected = count;
  }
  // pageCount 0 asks for the count only; NVML answers INSUFFICIENT_SIZE (with the count) when
  // there are pages, SUCCESS when there are none (NVML API reference, nvmlDeviceGetRetiredPages).
  auto retired = [&](nv::nvmlPageRetirementCause_t cause) -> std::optional<uint32_t> {
    unsigned int pages = 0;
    const nv::nvmlReturn_t rc =
        CallIf(api_.get_retired_pages, h, cause, &pages, static_cast<unsigned long long*>(nullptr));
    if (rc != nv::NVML_SUCCESS && rc != nv::NVML_ERROR_INSUFFICIENT_SIZE) return std::nullopt;
    return pages;
  };
  out.retired_pages_sbe = retired(nv::NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS);
  out.retired_pages_dbe = retired(nv::NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR);
  nv::nvmlEnableState_t pending = nv::NVML_FEATURE_DISABLED;
  if (CallIf(api_.get_retired_pages_pending_status, h, &pending) == nv::NVML_SUCCESS) {
    out.retired_pages_pending = pending == nv::NVML_FEATURE_ENABLED;
  }
  unsigned int corr = 0, unc = 0, remap_pending = 0, failed = 0;
  if (CallIf(api_.get_remapped_rows, h, &corr, &unc, &remap_pending, &failed) == nv::NVML_SUCCESS) {
    out.remapped_rows_correctable = corr;
    out.remapped_rows_uncorrectable = unc;
    out.remap_pending = remap_pending != 0;
    out.remap_failed = failed != 0;
  }
}

bool NvmlBackend::Supports(size_t i, NvmlMetric metric) const {
  return i < gpus_.size() && metric < NvmlMetric::kCount && Has(gpus_[i], metric);
}

bool NvmlBackend::Check(Gpu& gpu, NvmlMetric metric, nv::nvmlReturn_t rc) {
  if (rc == nv::NVML_SUCCESS) return true;
  if (IsUnsupported(rc)) {
    gpu.supported.reset(static_cast<size_t>(metric));
  } else if (rc == nv::NVML_ERROR_GPU_IS_LOST) {
    gpu.lost = true;
  }
  return false;  // other errors: transient, the field stays empty this time
}

template <typename Raw, typename T, typename Call>
void NvmlBackend::ReadScalar(Gpu& gpu, NvmlMetric metric, std::optional<T>& field, Call call) {
  if (gpu.lost || !Has(gpu, metric)) return;
  Raw raw{};
  if (Check(gpu, metric, call(&raw))) field = static_cast<T>(raw);
}

void NvmlBackend::Sample(size_t i, PollTiers due, GpuSample& out) {
  out.Clear();
  Gpu& gpu = gpus_[i];
  if (!gpu.lost) ReadAll(gpu, due, out);
  if (gpu.lost) {
    out.Clear();  // contract: a lost GPU reports nothing else
    out.lost = true;
  }
}

void NvmlBackend::ReadAll(Gpu& gpu, PollTiers due, GpuSample& out) {
  ReadCore(gpu, out);
  ReadPowerAndThermal(gpu, out);
  ReadClocks(gpu, out);
  if (due.test(TierIndex(PollTier::kUtilBuffer))) ReadUtilSamples(gpu, out);
  ReadProcesses(gpu, /*graphics=*/false, out);
  ReadProcesses(gpu, /*graphics=*/true, out);
  if (due.test(TierIndex(PollTier::kProcessUtil))) MergeProcessUtilization(gpu, out);
  if (due.test(TierIndex(PollTier::kEnergy))) ReadEnergy(gpu, out);
  if (due.test(TierIndex(PollTier::kSlow))) ReadSlow(gpu, out);
  if (due.test(TierIndex(PollTier::kGpm))) ReadGpm(gpu, out);
  uint32_t tx = 0, rx = 0;
  if (pcie_ && pcie_->TakeNew(static_cast<size_t>(&gpu - gpus_.data()), &tx, &rx)) {
    out.pcie_tx_kbps = tx;
    out.pcie_rx_kbps = rx;
  }
}

void NvmlBackend::ReadCore(Gpu& gpu, GpuSample& out) {
  const nv::nvmlDevice_t h = gpu.handle;
  // The core call is memory info (answered even under MIG, where utilization is not), else
  // utilization. Repeated failure of it means the GPU is gone even without GPU_IS_LOST.
  std::optional<nv::nvmlReturn_t> core_rc;
  if (Has(gpu, NvmlMetric::kMemory)) {
    nv::nvmlMemory_t mem{};
    const nv::nvmlReturn_t rc = CallIf(api_.get_memory_info, h, &mem);
    core_rc = rc;
    if (Check(gpu, NvmlMetric::kMemory, rc)) {
      out.mem_used_bytes = mem.used;
      out.mem_total_bytes = mem.total;
    }
  }
  if (!gpu.lost && Has(gpu, NvmlMetric::kUtilization)) {
    nv::nvmlUtilization_t util{};
    const nv::nvmlReturn_t rc = CallIf(api_.get_utilization_rates, h, &util);
    if (!core_rc) core_rc = rc;
    if (Check(gpu, NvmlMetric::kUtilization, rc)) {
      out.util_gpu_pct = util.gpu;
      out.util_mem_pct = util.memory;
    }
  }
  if (core_rc && *core_rc != nv::NVML_SUCCESS && !IsUnsupported(*core_rc)) {
    if (++gpu.core_errors >= kCoreErrorsBeforeLost) gpu.lost = true;
  } else {
    gpu.core_errors = 0;
  }
}

void NvmlBackend::ReadPowerAndThermal(Gpu& gpu, GpuSample& out) {
  const nv::nvmlDevice_t h = gpu.handle;
  using U = unsigned int;
  ReadScalar<U>(gpu, NvmlMetric::kPower, out.power_mw,
                [&](U* v) { return CallIf(api_.get_power_usage, h, v); });
  ReadScalar<U>(gpu, NvmlMetric::kPowerLimit, out.power_limit_mw,
                [&](U* v) { return get_power_limit_.Call(h, v); });
  ReadScalar<U>(gpu, NvmlMetric::kTemperature, out.temperature_c,
                [&](U* v) { return CallIf(api_.get_temperature, h, nv::NVML_TEMPERATURE_GPU, v); });
}

void NvmlBackend::ReadEnergy(Gpu& gpu, GpuSample& out) {
  using Ull = unsigned long long;
  ReadScalar<Ull>(gpu, NvmlMetric::kEnergy, out.energy_mj,
                  [&](Ull* v) { return CallIf(api_.get_total_energy_consumption, gpu.handle, v); });
}

void NvmlBackend::ReadSlow(Gpu& gpu, GpuSample& out) {
  const nv::nvmlDevice_t h = gpu.handle;
  using U = unsigned int;
  using Ull = unsigned long long;
  ReadScalar<U>(gpu, NvmlMetric::kPcieLink, out.pcie_gen,
                [&](U* v) { return CallIf(api_.get_curr_pcie_link_generation, h, v); });
  ReadScalar<U>(gpu, NvmlMetric::kPcieLink, out.pcie_width,
                [&](U* v) { return CallIf(api_.get_curr_pcie_link_width, h, v); });
  ReadScalar<Ull>(gpu, NvmlMetric::kEcc, out.ecc_volatile_corrected, [&](Ull* v) {
    return CallIf(api_.get_total_ecc_errors, h, nv::NVML_MEMORY_ERROR_TYPE_CORRECTED,
                  nv::NVML_VOLATILE_ECC, v);
  });
  ReadScalar<Ull>(gpu, NvmlMetric::kEcc, out.ecc_volatile_uncorrected, [&](Ull* v) {
    return CallIf(api_.get_total_ecc_errors, h, nv::NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                  nv::NVML_VOLATILE_ECC, v);
  });
}

void NvmlBackend::ReadClocks(Gpu& gpu, GpuSample& out) {
  const nv::nvmlDevice_t h = gpu.handle;
  using U = unsigned int;
  ReadScalar<U>(gpu, NvmlMetric::kSmClock, out.sm_clock_mhz,
                [&](U* v) { return CallIf(api_.get_clock_info, h, nv::NVML_CLOCK_SM, v); });
  ReadScalar<U>(gpu, NvmlMetric::kMemClock, out.mem_clock_mhz,
                [&](U* v) { return CallIf(api_.get_clock_info, h, nv::NVML_CLOCK_MEM, v); });
  ReadScalar<unsigned long long>(
      gpu, NvmlMetric::kClockEvents, out.clock_event_reasons,
      [&](unsigned long long* v) { return get_clock_events_.Call(h, v); });
}

void NvmlBackend::ReadUtilSamples(Gpu& gpu, GpuSample& out) {
  if (gpu.lost || !Has(gpu, NvmlMetric::kUtilSamples)) return;
  auto count = static_cast<unsigned int>(sample_buf_.size());
  nv::nvmlValueType_t type = nv::NVML_VALUE_TYPE_UNSIGNED_INT;
  const nv::nvmlReturn_t rc = CallIf(api_.get_samples, gpu.handle, nv::NVML_GPU_UTILIZATION_SAMPLES,
                                     gpu.last_util_ts_us, &type, &count, sample_buf_.data());
  // NOT_FOUND: no entry newer than last_util_ts_us yet (NVML API reference, nvmlDeviceGetSamples).
  if (rc == nv::NVML_ERROR_NOT_FOUND || !Check(gpu, NvmlMetric::kUtilSamples, rc)) return;
  const auto begin = sample_buf_.begin();
  const auto end = begin + std::min<size_t>(count, sample_buf_.size());
  // Oldest first, whatever order the driver used (std::sort does not allocate).
  std::sort(begin, end, [](const nv::nvmlSample_t& a, const nv::nvmlSample_t& b) {
    return a.timeStamp < b.timeStamp;
  });
  // The driver already filters by lastSeenTimeStamp; filter anyway, and keep the newest ones.
  const auto fresh = std::upper_bound(
      begin, end, gpu.last_util_ts_us,
      [](unsigned long long ts, const nv::nvmlSample_t& s) { return ts < s.timeStamp; });
  const auto first =
      end - std::min<std::ptrdiff_t>(end - fresh, static_cast<std::ptrdiff_t>(kMaxUtilSamples));
  for (auto it = first; it != end; ++it) {
    const std::optional<uint32_t> pct = SampleValue(type, it->sampleValue);
    if (!pct) continue;
    out.util_samples[out.util_sample_count++] =
        UtilSample{static_cast<int64_t>(it->timeStamp), *pct};
  }
  if (fresh != end) gpu.last_util_ts_us = (end - 1)->timeStamp;
}

nv::nvmlReturn_t NvmlBackend::ListProcesses(Gpu& gpu, bool graphics, unsigned int* count) {
  auto& versioned = graphics ? get_graphics_ : get_compute_;
  nv::DeviceGetRunningProcessesV1Fn* v1 =
      graphics ? api_.get_graphics_processes : api_.get_compute_processes;
  nv::nvmlReturn_t rc = nv::NVML_ERROR_INSUFFICIENT_SIZE;
  for (int attempt = 0; attempt < 2 && rc == nv::NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
    *count = static_cast<unsigned int>(proc_buf_.size());
    rc = versioned.Call(gpu.handle, count, proc_buf_.data());
    if (rc == nv::NVML_ERROR_FUNCTION_NOT_FOUND && v1 != nullptr) {
      // Old driver: the unversioned entry point fills the 2-field v1 struct.
      *count = static_cast<unsigned int>(proc_buf_v1_.size());
      rc = v1(gpu.handle, count, proc_buf_v1_.data());
      const size_t n = std::min<size_t>(*count, proc_buf_v1_.size());
      for (size_t k = 0; rc == nv::NVML_SUCCESS && k < n; ++k) {
        proc_buf_[k] =
            nv::nvmlProcessInfo_t{proc_buf_v1_[k].pid, proc_buf_v1_[k].usedGpuMemory, ~0U, ~0U};
      }
    }
    if (rc == nv::NVML_ERROR_INSUFFICIENT_SIZE) {
      // More processes than ever seen: grow with headroom (the only allocation on this path).
      const size_t want = std::max<size_t>(*count, proc_buf_.size()) + 16;
      proc_buf_.resize(want);
      proc_buf_v1_.resize(want);
    }
  }
  *count = static_cast<unsigned int>(std::min<size_t>(*count, proc_buf_.size()));
  return rc;
}

void NvmlBackend::ReadProcesses(Gpu& gpu, bool graphics, GpuSample& out) {
  const NvmlMetric metric =
      graphics ? NvmlMetric::kGraphicsProcesses : NvmlMetric::kComputeProcesses;
  if (gpu.lost || !Has(gpu, metric)) return;
  unsigned int count = 0;
  if (!Check(gpu, metric, ListProcesses(gpu, graphics, &count))) return;
  for (unsigned int k = 0; k < count; ++k) {
    const nv::nvmlProcessInfo_t& info = proc_buf_[k];
    GpuProcess& process = out.processes.emplace_back();
    process.pid = info.pid;
    process.graphics = graphics;
    // Under WDDM or without permission the driver hides per-process memory.
    if (info.usedGpuMemory != nv::NVML_VALUE_NOT_AVAILABLE_ULL) {
      process.mem_used_bytes = info.usedGpuMemory;
    }
  }
}

void NvmlBackend::MergeProcessUtilization(Gpu& gpu, GpuSample& out) {
  if (gpu.lost || out.processes.empty() || !Has(gpu, NvmlMetric::kProcessUtilization)) return;
  unsigned int count = 0;
  nv::nvmlReturn_t rc = nv::NVML_ERROR_INSUFFICIENT_SIZE;
  for (int attempt = 0; attempt < 2 && rc == nv::NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
    count = static_cast<unsigned int>(proc_util_buf_.size());
    rc = CallIf(api_.get_process_utilization, gpu.handle, proc_util_buf_.data(), &count,
                gpu.last_proc_ts_us);
    if (rc == nv::NVML_ERROR_INSUFFICIENT_SIZE) {
      proc_util_buf_.resize(std::max<size_t>(count, proc_util_buf_.size()) + 16);
    }
  }
  // NOT_FOUND: no process was sampled since last time, i.e. all of them were idle.
  if (rc == nv::NVML_ERROR_NOT_FOUND) {
    count = 0;
  } else if (!Check(gpu, NvmlMetric::kProcessUtilization, rc)) {
    return;
  }
  const size_t n = std::min<size_t>(count, proc_util_buf_.size());
  // Every listed process gets a value whenever the call works: its newest sample in the window,
  // else 0 (nvtop skips this zero-fill on one path and shows N/A for idle processes).
  for (GpuProcess& process : out.processes) {
    unsigned long long best_ts = 0;
    process.sm_util_pct = 0;
    process.mem_util_pct = 0;
    for (size_t k = 0; k < n; ++k) {
      const nv::nvmlProcessUtilizationSample_t& s = proc_util_buf_[k];
      if (s.pid != process.pid || s.timeStamp < best_ts) continue;
      best_ts = s.timeStamp;
      process.sm_util_pct = s.smUtil;
      process.mem_util_pct = s.memUtil;
    }
  }
  for (size_t k = 0; k < n; ++k) {
    gpu.last_proc_ts_us = std::max(gpu.last_proc_ts_us, proc_util_buf_[k].timeStamp);
  }
}

}  // namespace stallscope::gpu
