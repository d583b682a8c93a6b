// A fake libnvidia-ml.so.1: the NVML entry points stallscope calls, with the real exported names
// and struct layouts (src/gpu/nvml_abi.h), driven by a scenario JSON file named by
// $STALLSCOPE_FAKE_NVML_SCENARIO. Schema and behaviour: README.md next to this file.
//
// Built twice: the full library (every versioned name plus the old base names), and with
// FAKE_NVML_LEGACY an "old driver" that exports only the base names, so both sides of the
// backend's versioned-symbol fallback run in tests.

#include <time.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "fake_state.h"
#include "gpu/gpu_backend.h"
#include "gpu/nvml_abi.h"
#include "scenario.h"

namespace stallscope::fake_nvml {

State& TheState() {
  static State state;
  return state;
}

namespace {

constexpr const char* kScenarioEnv = "STALLSCOPE_FAKE_NVML_SCENARIO";
// The real driver records a GPU-utilization sample every scenario.driver_sample_period_s (1/6 s
// on Ampere/Hopper, 200 ms on the H100 of shared/gpu/h100-2026-11-26) and keeps ~100 of them
// (see the nvmlDeviceGetSamples notes in the NVML API reference).
constexpr unsigned int kDriverSampleBuffer = 100;

nvmlReturn_t CopyString(std::string_view text, char* out, unsigned int length) {
  if (out == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  if (length < text.size() + 1) return nv::NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, text.data(), text.size());
  out[text.size()] = '\0';
  return nv::NVML_SUCCESS;
}

uint32_t Pct(double v) { return static_cast<uint32_t>(std::lround(std::clamp(v, 0.0, 100.0))); }

/// Utilization as nvmlDeviceGetUtilizationRates reports it: the mean of the driver samples of
/// the last second, so a sub-second sawtooth shows as a middling value here.
double UtilLastSecond(const Ctx& c) {
  const double period_s = c.state.scenario.driver_sample_period_s;
  const auto newest = static_cast<int64_t>(std::floor(c.t / period_s));
  const int64_t per_second = std::max<int64_t>(1, std::llround(1.0 / period_s));
  const int64_t oldest = std::max<int64_t>(0, newest - per_second + 1);
  double sum = 0;
  for (int64_t k = oldest; k <= newest; ++k) {
    sum += UtilAt(c.gpu.pattern, static_cast<double>(k) * period_s);
  }
  return sum / static_cast<double>(newest - oldest + 1);
}

const Throttle* ActiveThrottle(const Ctx& c) {
  for (const Throttle& w : c.gpu.throttle) {
    if (c.t >= w.start_s && c.t < w.end_s) return &w;
  }
  return nullptr;
}

unsigned int PowerMw(const Ctx& c) {
  const Gpu& g = c.gpu;
  const double w =
      g.power_w_idle + (g.power_w_at_full - g.power_w_idle) * UtilAt(g.pattern, c.t) / 100.0;
  return static_cast<unsigned int>(std::lround(std::min(w, g.power_limit_w) * 1000.0));
}

[[maybe_unused]] unsigned long long EnergyMj(const Ctx& c) {
  const Gpu& g = c.gpu;
  const double joules = g.power_w_idle * c.t +
                        (g.power_w_at_full - g.power_w_idle) * UtilIntegral(g.pattern, c.t) / 100.0;
  return static_cast<unsigned long long>(std::llround(joules * 1000.0));
}

unsigned int SmClockMhz(const Ctx& c) {
  const Throttle* w = ActiveThrottle(c);
  if (w != nullptr && w->sm_clock_mhz) return *w->sm_clock_mhz;
  return UtilAt(c.gpu.pattern, c.t) > 0 ? c.gpu.sm_clock_max_mhz : c.gpu.sm_clock_idle_mhz;
}

unsigned long long ClockEvents(const Ctx& c) {
  const Throttle* w = ActiveThrottle(c);
  unsigned long long mask = w != nullptr ? w->reasons : 0;
  if (w == nullptr && UtilAt(c.gpu.pattern, c.t) <= 0) mask |= gpu::kClockEventGpuIdle;
  return mask;
}

/// Parses "DDDDDDDD:BB:DD.F" into the numeric nvmlPciInfo fields (0 where malformed).
void PciNumbers(const std::string& bus_id, unsigned int* domain, unsigned int* bus,
                unsigned int* device) {
  unsigned int function = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", domain, bus, device, &function) != 4) {
    *domain = *bus = *device = 0;
  }
}

std::string LegacyBusId(const Gpu& g) {
  unsigned int domain = 0, bus = 0, device = 0;
  PciNumbers(g.pci_bus_id, &domain, &bus, &device);
  char text[16] = {};
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.0", domain & 0xffffU, bus & 0xffU,
                device & 0xffU);
  return text;
}

/// Fills either process struct version; `Info` decides which (v1 has no instance ids).
template <typename Info>
nvmlReturn_t ListProcesses(const Ctx& c, bool graphics, unsigned int* count, Info* infos) {
  if (count == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  unsigned int n = 0;
  for (const Process& p : c.gpu.processes) n += p.graphics == graphics ? 1 : 0;
  if (*count < n) {
    *count = n;  // NVML API reference: infoCount is set to the size needed
    return nv::NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (n > 0 && infos == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  unsigned int k = 0;
  for (const Process& p : c.gpu.processes) {
    if (p.graphics != graphics) continue;
    Info info{};
    info.pid = p.pid;
    info.usedGpuMemory =
        p.used_memory_mib ? *p.used_memory_mib << 20 : nv::NVML_VALUE_NOT_AVAILABLE_ULL;
    if constexpr (std::is_same_v<Info, nv::nvmlProcessInfo_t>) {
      const bool mig = c.gpu.mig == Mig::kEnabled;
      info.gpuInstanceId = mig ? 1 : ~0U;  // nvml.h: 0xFFFFFFFF unless MIG is enabled
      info.computeInstanceId = mig ? 0 : ~0U;
    }
    infos[k++] = info;
  }
  *count = n;
  return nv::NVML_SUCCESS;
}

/// nvmlInit's work under State::mu; sets `*loaded` when this call loaded the scenario.
nvmlReturn_t InitLocked(State& s, const char* fn, bool* loaded) {
  if (s.refcount > 0) {
    s.Count(fn);
    if (s.Missing(fn)) return nv::NVML_ERROR_FUNCTION_NOT_FOUND;
    ++s.refcount;
    return nv::NVML_SUCCESS;
  }
  // First init: (re)load the cost table and the scenario, so a test can shut down and reopen
  // with others.
  const char* cost_spec = std::getenv(kCostEnv);
  Result<CostTable> cost = CostTable::Load(cost_spec == nullptr ? "" : cost_spec);
  if (!cost.ok()) {
    std::fprintf(stderr, "fake NVML: %s\n", cost.error().message.c_str());
    s.cost.Set(CostTable{});  // no driver, no price: the calls that follow fail fast
    return nv::NVML_ERROR_DRIVER_NOT_LOADED;
  }
  s.cost.Set(*cost);
  const char* path = std::getenv(kScenarioEnv);
  if (path == nullptr || *path == '\0') {
    std::fprintf(stderr, "fake NVML: %s is not set\n", kScenarioEnv);
    return nv::NVML_ERROR_DRIVER_NOT_LOADED;
  }
  Result<Scenario> scenario = LoadScenario(path);
  if (!scenario.ok()) {
    std::fprintf(stderr, "fake NVML: cannot load scenario %s\n", scenario.error().message.c_str());
    return nv::NVML_ERROR_DRIVER_NOT_LOADED;
  }
  if (scenario->missing_symbols.count(std::string_view(fn)) != 0) {
    return nv::NVML_ERROR_FUNCTION_NOT_FOUND;
  }
  if (scenario->init_error) return static_cast<nvmlReturn_t>(*scenario->init_error);
  s.Reset(std::move(scenario).value());
  s.Count(fn);
  s.refcount = 1;
  *loaded = true;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t Init(const char* fn) {
  State& s = TheState();
  bool loaded = false;
  nvmlReturn_t rc = nv::NVML_SUCCESS;
  {
    const std::lock_guard lock(s.mu);
    rc = InitLocked(s, fn, &loaded);
  }
  // The real cost is the first init's, when the driver loads (README section 2: "once"); the
  // table is known only now, so this one is charged after the work, still outside the lock.
  if (loaded) s.cost.Charge(fn);
  return rc;
}

nvmlReturn_t GetCount(const char* fn, unsigned int* count) {
  return OnSystem(fn, [&](State& s) {
    if (count == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    *count = s.scenario.device_count.value_or(static_cast<unsigned int>(s.scenario.gpus.size()));
    return nv::NVML_SUCCESS;
  });
}

nvmlReturn_t GetHandle(const char* fn, unsigned int index, nv::nvmlDevice_t* device) {
  return OnSystem(fn, [&](State& s) {
    if (device == nullptr || index >= s.handles.size()) return nv::NVML_ERROR_INVALID_ARGUMENT;
    const Gpu& gpu = s.scenario.gpus[index];
    if (gpu.lost_at_s && s.Now() >= *gpu.lost_at_s) return nv::NVML_ERROR_GPU_IS_LOST;
    *device = &s.handles[index];
    return nv::NVML_SUCCESS;
  });
}

nvmlReturn_t GetPciInfo(const char* fn, nv::nvmlDevice_t device, nv::nvmlPciInfo_t* pci) {
  return OnGpu(fn, device, 0, [&](const Ctx& c) {
    if (pci == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    *pci = nv::nvmlPciInfo_t{};
    PciNumbers(c.gpu.pci_bus_id, &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = 0x233010DE;  // H100 SXM5 device id, NVIDIA vendor id
    std::snprintf(pci->busId, sizeof pci->busId, "%s", c.gpu.pci_bus_id.c_str());
    std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", LegacyBusId(c.gpu).c_str());
    return nv::NVML_SUCCESS;
  });
}

[[maybe_unused]] nvmlReturn_t GetRunningProcesses(const char* fn, nv::nvmlDevice_t device,
                                                  bool graphics, unsigned int* count,
                                                  nv::nvmlProcessInfo_t* infos) {
  return OnGpu(fn, device, kFeatureProcesses,
               [&](const Ctx& c) { return ListProcesses(c, graphics, count, infos); });
}

nvmlReturn_t GetRunningProcessesV1(const char* fn, nv::nvmlDevice_t device, bool graphics,
                                   unsigned int* count, nv::nvmlProcessInfo_v1_t* infos) {
  return OnGpu(fn, device, kFeatureProcesses,
               [&](const Ctx& c) { return ListProcesses(c, graphics, count, infos); });
}

nvmlReturn_t GetUint(const char* fn, nv::nvmlDevice_t device, uint32_t feature, unsigned int* out,
                     unsigned int (*value)(const Ctx&)) {
  return OnGpu(fn, device, feature, [&](const Ctx& c) {
    if (out == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    *out = value(c);
    return nv::NVML_SUCCESS;
  });
}

nvmlReturn_t GetUll(const char* fn, nv::nvmlDevice_t device, uint32_t feature,
                    unsigned long long* out, unsigned long long (*value)(const Ctx&)) {
  return OnGpu(fn, device, feature, [&](const Ctx& c) {
    if (out == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    *out = value(c);
    return nv::NVML_SUCCESS;
  });
}

unsigned int PowerLimitMw(const Ctx& c) {
  return static_cast<unsigned int>(std::lround(c.gpu.power_limit_w * 1000.0));
}

}  // namespace

// ---- Exported entry points (names and signatures: nvml.h, CUDA 12.x) ----------------------

FAKE_NVML_API nvmlReturn_t nvmlInit() { return Init(__func__); }

FAKE_NVML_API nvmlReturn_t nvmlShutdown() {
  State& s = TheState();
  s.cost.Charge(__func__);
  const std::lock_guard lock(s.mu);
  if (s.refcount == 0) return nv::NVML_ERROR_UNINITIALIZED;
  s.Count(__func__);
  if (--s.refcount == 0) {
    s.WriteCallLog();
    s.Reset(Scenario{});
    s.cost.Set(CostTable{});  // calls after the last nvmlShutdown answer UNINITIALIZED, at once
  }
  return nv::NVML_SUCCESS;
}

FAKE_NVML_API const char* nvmlErrorString(nvmlReturn_t result) {
  TheState().cost.Charge(__func__);
  // Wording of the real driver's nvmlErrorString.
  switch (result) {
    case nv::NVML_SUCCESS:
      return "Success";
    case nv::NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case nv::NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case nv::NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case nv::NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case nv::NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case nv::NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case nv::NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case nv::NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case nv::NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case nv::NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "Driver/library version mismatch";
    case nv::NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    default:
      return "Unknown Error";
  }
}

FAKE_NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return OnSystem(__func__,
                  [&](State& s) { return CopyString(s.scenario.driver_version, version, length); });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return GetCount(__func__, count);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                                      nv::nvmlDevice_t* device) {
  return GetHandle(__func__, index, device);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetName(nv::nvmlDevice_t device, char* name,
                                             unsigned int length) {
  return OnGpu(__func__, device, 0,
               [&](const Ctx& c) { return CopyString(c.gpu.name, name, length); });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetUUID(nv::nvmlDevice_t device, char* uuid,
                                             unsigned int length) {
  return OnGpu(__func__, device, 0,
               [&](const Ctx& c) { return CopyString(c.gpu.uuid, uuid, length); });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nv::nvmlDevice_t device,
                                                nv::nvmlPciInfoLegacy_t* pci) {
  // The pre-v2 layout: the legacy bus id first, then the numbers, then reserved words.
  nv::nvmlPciInfo_t full{};
  const nvmlReturn_t rc = GetPciInfo(__func__, device, &full);
  if (rc != nv::NVML_SUCCESS || pci == nullptr)
    return pci == nullptr ? nv::NVML_ERROR_INVALID_ARGUMENT : rc;
  *pci = nv::nvmlPciInfoLegacy_t{};
  std::memcpy(pci->busId, full.busIdLegacy, sizeof pci->busId);
  pci->domain = full.domain;
  pci->bus = full.bus;
  pci->device = full.device;
  pci->pciDeviceId = full.pciDeviceId;
  return nv::NVML_SUCCESS;
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nv::nvmlDevice_t device,
                                                   nv::nvmlMemory_t* memory) {
  return OnGpu(__func__, device, kFeatureMemory, [&](const Ctx& c) {
    if (memory == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    memory->total = c.gpu.memory_total_mib << 20;
    memory->used = std::min(c.gpu.memory_used_mib, c.gpu.memory_total_mib) << 20;
    memory->free = memory->total - memory->used;
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nv::nvmlDevice_t device,
                                                         nv::nvmlUtilization_t* utilization) {
  return OnGpu(__func__, device, kFeatureUtilization, [&](const Ctx& c) {
    if (utilization == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    // NVML API reference: utilization rates are not supported on MIG-enabled GPUs.
    if (c.gpu.mig == Mig::kEnabled) return nv::NVML_ERROR_NOT_SUPPORTED;
    const double util = UtilLastSecond(c);
    utilization->gpu = Pct(util);
    utilization->memory = Pct(util * c.gpu.mem_util_ratio);
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetSamples(nv::nvmlDevice_t device,
                                                nv::nvmlSamplingType_t type,
                                                unsigned long long last_seen,
                                                nv::nvmlValueType_t* value_type,
                                                unsigned int* count, nv::nvmlSample_t* samples) {
  return OnGpu(__func__, device, kFeatureSamples, [&](const Ctx& c) {
    if (count == nullptr || value_type == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    // The fake models the GPU-utilization buffer only.
    if (type != nv::NVML_GPU_UTILIZATION_SAMPLES) return nv::NVML_ERROR_NOT_SUPPORTED;
    if (c.gpu.mig == Mig::kEnabled) return nv::NVML_ERROR_NOT_SUPPORTED;
    *value_type = nv::NVML_VALUE_TYPE_UNSIGNED_INT;
    if (samples == nullptr) {  // a size query
      *count = kDriverSampleBuffer;
      return nv::NVML_SUCCESS;
    }
    const double period_s = c.state.scenario.driver_sample_period_s;
    const auto time_of = [&](int64_t k) { return static_cast<double>(k) * period_s; };
    const auto newest = static_cast<int64_t>(std::floor(c.t / period_s));
    int64_t first = std::max<int64_t>(0, newest - kDriverSampleBuffer + 1);
    while (first <= newest && c.state.WallUs(time_of(first)) <= last_seen) ++first;
    if (first > newest) return nv::NVML_ERROR_NOT_FOUND;  // nothing newer than last_seen
    if (*count == 0) return nv::NVML_ERROR_INSUFFICIENT_SIZE;
    first = std::max<int64_t>(first, newest - static_cast<int64_t>(*count) + 1);  // newest fit
    unsigned int n = 0;
    for (int64_t k = first; k <= newest; ++k, ++n) {
      samples[n].timeStamp = c.state.WallUs(time_of(k));
      samples[n].sampleValue.uiVal = Pct(UtilAt(c.gpu.pattern, time_of(k)));
    }
    *count = n;
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nv::nvmlDevice_t device, unsigned int* power) {
  return GetUint(__func__, device, kFeaturePower, power, PowerMw);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nv::nvmlDevice_t device,
                                                             unsigned int* limit) {
  return GetUint(__func__, device, kFeaturePowerLimit, limit, PowerLimitMw);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nv::nvmlDevice_t device,
                                                    nv::nvmlTemperatureSensors_t sensor,
                                                    unsigned int* temp) {
  return OnGpu(__func__, device, kFeatureTemperature, [&](const Ctx& c) {
    if (temp == nullptr || sensor != nv::NVML_TEMPERATURE_GPU) {
      return nv::NVML_ERROR_INVALID_ARGUMENT;
    }
    const Gpu& g = c.gpu;
    *temp = static_cast<unsigned int>(
        std::lround(g.temperature_c_idle +
                    (g.temperature_c_at_full - g.temperature_c_idle) * UtilLastSecond(c) / 100.0));
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nv::nvmlDevice_t device, nv::nvmlClockType_t type,
                                                  unsigned int* clock) {
  return OnGpu(__func__, device, kFeatureClocks, [&](const Ctx& c) {
    if (clock == nullptr || type >= nv::NVML_CLOCK_COUNT) return nv::NVML_ERROR_INVALID_ARGUMENT;
    *clock = type == nv::NVML_CLOCK_MEM ? c.gpu.mem_clock_max_mhz : SmClockMhz(c);
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nv::nvmlDevice_t device,
                                                     nv::nvmlClockType_t type,
                                                     unsigned int* clock) {
  return OnGpu(__func__, device, kFeatureMaxClocks, [&](const Ctx& c) {
    if (clock == nullptr || type >= nv::NVML_CLOCK_COUNT) return nv::NVML_ERROR_INVALID_ARGUMENT;
    *clock = type == nv::NVML_CLOCK_MEM ? c.gpu.mem_clock_max_mhz : c.gpu.sm_clock_max_mhz;
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nv::nvmlDevice_t device,
                                                                     unsigned long long* reasons) {
  return GetUll(__func__, device, kFeatureClockEvents, reasons, ClockEvents);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPcieThroughput(nv::nvmlDevice_t device,
                                                       nv::nvmlPcieUtilCounter_t counter,
                                                       unsigned int* value) {
  return OnGpu(__func__, device, kFeaturePcieThroughput, [&](const Ctx& c) {
    if (value == nullptr || counter >= nv::NVML_PCIE_UTIL_COUNT) {
      return nv::NVML_ERROR_INVALID_ARGUMENT;
    }
    *value = counter == nv::NVML_PCIE_UTIL_TX_BYTES ? c.gpu.pcie.tx_kbps : c.gpu.pcie.rx_kbps;
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nv::nvmlDevice_t device,
                                                               unsigned int* gen) {
  return GetUint(__func__, device, kFeaturePcieLink, gen,
                 [](const Ctx& c) { return c.gpu.pcie.gen; });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nv::nvmlDevice_t device,
                                                          unsigned int* width) {
  return GetUint(__func__, device, kFeaturePcieLink, width,
                 [](const Ctx& c) { return c.gpu.pcie.width; });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nv::nvmlDevice_t device,
                                                              unsigned int* gen) {
  return GetUint(__func__, device, kFeaturePcieLink, gen,
                 [](const Ctx& c) { return c.gpu.pcie.gen_max; });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nv::nvmlDevice_t device,
                                                         unsigned int* width) {
  return GetUint(__func__, device, kFeaturePcieLink, width,
                 [](const Ctx& c) { return c.gpu.pcie.width_max; });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nv::nvmlDevice_t device,
                                                        nv::nvmlEnableState_t* mode) {
  return OnGpu(__func__, device, kFeaturePersistence, [&](const Ctx& c) {
    if (mode == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    *mode = c.gpu.persistence ? nv::NVML_FEATURE_ENABLED : nv::NVML_FEATURE_DISABLED;
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nv::nvmlDevice_t device,
                                                       nv::nvmlMemoryErrorType_t error_type,
                                                       nv::nvmlEccCounterType_t counter_type,
                                                       unsigned long long* count) {
  return OnGpu(__func__, device, kFeatureEcc, [&](const Ctx& c) {
    if (count == nullptr || error_type >= nv::NVML_MEMORY_ERROR_TYPE_COUNT ||
        counter_type >= nv::NVML_ECC_COUNTER_TYPE_COUNT) {
      return nv::NVML_ERROR_INVALID_ARGUMENT;
    }
    const Gpu& g = c.gpu;
    const bool corrected = error_type == nv::NVML_MEMORY_ERROR_TYPE_CORRECTED;
    if (counter_type == nv::NVML_AGGREGATE_ECC) {
      *count = corrected ? g.ecc_aggregate_corrected.value_or(g.ecc_corrected)
                         : g.ecc_aggregate_uncorrected.value_or(g.ecc_uncorrected);
    } else {
      *count = corrected ? g.ecc_corrected : g.ecc_uncorrected;
    }
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nv::nvmlDevice_t device, nv::nvmlProcessUtilizationSample_t* utilization, unsigned int* count,
    unsigned long long last_seen) {
  return OnGpu(__func__, device, kFeatureProcessUtil, [&](const Ctx& c) {
    if (count == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    if (c.gpu.mig == Mig::kEnabled) return nv::NVML_ERROR_NOT_SUPPORTED;
    // One sample per process, stamped with the newest driver sample time.
    const double period_s = c.state.scenario.driver_sample_period_s;
    const double newest = std::floor(c.t / period_s) * period_s;
    const unsigned long long ts = c.state.WallUs(newest);
    const auto n = static_cast<unsigned int>(c.gpu.processes.size());
    if (ts <= last_seen || n == 0) {
      *count = 0;
      return nv::NVML_ERROR_NOT_FOUND;  // NVML API reference: no samples newer than last_seen
    }
    if (utilization == nullptr || *count < n) {
      *count = n;
      return nv::NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int k = 0; k < n; ++k) {
      const Process& p = c.gpu.processes[k];
      const uint32_t sm = p.sm_util ? *p.sm_util : Pct(UtilAt(c.gpu.pattern, newest));
      utilization[k] = nv::nvmlProcessUtilizationSample_t{
          p.pid, ts, sm, p.mem_util ? *p.mem_util : sm / 2, 0, 0};
    }
    *count = n;
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nv::nvmlDevice_t device,
                                                                unsigned int* count,
                                                                nv::nvmlProcessInfo_v1_t* infos) {
  return GetRunningProcessesV1(__func__, device, /*graphics=*/false, count, infos);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nv::nvmlDevice_t device,
                                                                 unsigned int* count,
                                                                 nv::nvmlProcessInfo_v1_t* infos) {
  return GetRunningProcessesV1(__func__, device, /*graphics=*/true, count, infos);
}

#ifndef FAKE_NVML_LEGACY
// Entry points an old driver lacks: the _v2/_v3 names, and functions added in later releases.

FAKE_NVML_API nvmlReturn_t nvmlInit_v2() { return Init(__func__); }

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return GetCount(__func__, count);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                         nv::nvmlDevice_t* device) {
  return GetHandle(__func__, index, device);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nv::nvmlDevice_t device,
                                                   nv::nvmlPciInfo_t* pci) {
  return GetPciInfo(__func__, device, pci);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nv::nvmlDevice_t device,
                                                   nv::nvmlPciInfo_t* pci) {
  return GetPciInfo(__func__, device, pci);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nv::nvmlDevice_t device,
                                                           unsigned int* limit) {
  return GetUint(__func__, device, kFeaturePowerLimit, limit, PowerLimitMw);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nv::nvmlDevice_t device,
                                                               unsigned long long* energy) {
  return GetUll(__func__, device, kFeatureEnergy, energy, EnergyMj);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nv::nvmlDevice_t device,
                                                                  unsigned long long* reasons) {
  return GetUll(__func__, device, kFeatureClockEvents, reasons, ClockEvents);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nv::nvmlDevice_t device, unsigned int* current,
                                                unsigned int* pending) {
  return OnGpu(__func__, device, 0, [&](const Ctx& c) {
    if (current == nullptr || pending == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
    if (c.gpu.mig == Mig::kUnsupported) return nv::NVML_ERROR_NOT_SUPPORTED;
    *current = *pending =
        c.gpu.mig == Mig::kEnabled ? nv::NVML_DEVICE_MIG_ENABLE : nv::NVML_DEVICE_MIG_DISABLE;
    return nv::NVML_SUCCESS;
  });
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nv::nvmlDevice_t device,
                                                                   unsigned int* count,
                                                                   nv::nvmlProcessInfo_t* infos) {
  return GetRunningProcesses(__func__, device, /*graphics=*/false, count, infos);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nv::nvmlDevice_t device,
                                                                   unsigned int* count,
                                                                   nv::nvmlProcessInfo_t* infos) {
  return GetRunningProcesses(__func__, device, /*graphics=*/false, count, infos);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nv::nvmlDevice_t device,
                                                                    unsigned int* count,
                                                                    nv::nvmlProcessInfo_t* infos) {
  return GetRunningProcesses(__func__, device, /*graphics=*/true, count, infos);
}

FAKE_NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nv::nvmlDevice_t device,
                                                                    unsigned int* count,
                                                                    nv::nvmlProcessInfo_t* infos) {
  return GetRunningProcesses(__func__, device, /*graphics=*/true, count, infos);
}

// The fake's definitions must have exactly the types the backend calls them through.
static_assert(std::is_same_v<decltype(nvmlInit_v2), nv::InitFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetCount_v2), nv::DeviceGetCountFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetPciInfo_v3), nv::DeviceGetPciInfoFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetTotalEnergyConsumption), nv::DeviceGetUllFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetMigMode), nv::DeviceGetMigModeFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetComputeRunningProcesses_v3),
                             nv::DeviceGetRunningProcessesFn>);
#endif  // FAKE_NVML_LEGACY

static_assert(std::is_same_v<decltype(nvmlInit), nv::InitFn>);
static_assert(std::is_same_v<decltype(nvmlShutdown), nv::ShutdownFn>);
static_assert(std::is_same_v<decltype(nvmlErrorString), nv::ErrorStringFn>);
static_assert(std::is_same_v<decltype(nvmlSystemGetDriverVersion), nv::SystemGetDriverVersionFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetCount), nv::DeviceGetCountFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetHandleByIndex), nv::DeviceGetHandleByIndexFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetName), nv::DeviceGetStringFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetPciInfo), nv::DeviceGetPciInfoLegacyFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetMemoryInfo), nv::DeviceGetMemoryInfoFn>);
static_assert(
    std::is_same_v<decltype(nvmlDeviceGetUtilizationRates), nv::DeviceGetUtilizationRatesFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetSamples), nv::DeviceGetSamplesFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetPowerUsage), nv::DeviceGetUintFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetTemperature), nv::DeviceGetTemperatureFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetClockInfo), nv::DeviceGetClockFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetPcieThroughput), nv::DeviceGetPcieThroughputFn>);
static_assert(
    std::is_same_v<decltype(nvmlDeviceGetPersistenceMode), nv::DeviceGetPersistenceModeFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetTotalEccErrors), nv::DeviceGetTotalEccErrorsFn>);
static_assert(
    std::is_same_v<decltype(nvmlDeviceGetProcessUtilization), nv::DeviceGetProcessUtilizationFn>);
static_assert(std::is_same_v<decltype(nvmlDeviceGetComputeRunningProcesses),
                             nv::DeviceGetRunningProcessesV1Fn>);
static_assert(
    std::is_same_v<decltype(nvmlDeviceGetCurrentClocksThrottleReasons), nv::DeviceGetUllFn>);

}  // namespace stallscope::fake_nvml
