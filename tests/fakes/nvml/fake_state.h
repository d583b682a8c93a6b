#pragma once

// The fake libnvidia-ml's state and the common path of its entry points, shared by the files
// that define entry points (fake_nvml.cc, fake_nvml_health.cc). Internal to the fake.

#include <time.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "fake_cost.h"
#include "gpu/nvml_abi.h"
#include "scenario.h"

// Only the NVML entry points leave the library (the rest is hidden by -fvisibility=hidden and
// the exports.map version script).
#define FAKE_NVML_API extern "C" __attribute__((visibility("default")))

namespace stallscope::gpu::nvml {
/// What an nvmlDevice_t points at in the fake.
struct nvmlDevice_st {  // NOLINT(readability-identifier-naming): NVML's name
  uint32_t index;
};
}  // namespace stallscope::gpu::nvml

namespace stallscope::fake_nvml {

namespace nv = gpu::nvml;
using nv::nvmlReturn_t;

inline constexpr const char* kCallLogEnv = "STALLSCOPE_FAKE_NVML_CALL_LOG";

/// Everything the fake knows. A C ABI leaves no choice but one instance per process (the house
/// rule against globals cannot apply to a fake driver); every entry point locks `mu`, after
/// paying its cost (`cost`, which has a lock of its own).
struct State {
  std::mutex mu;
  CostModel cost;    // $STALLSCOPE_FAKE_NVML_COST, read at the first nvmlInit
  int refcount = 0;  // NVML reference-counts nvmlInit/nvmlShutdown
  Scenario scenario;
  int64_t start_mono_ns = 0;
  int64_t start_wall_us = 0;
  std::vector<nv::nvmlDevice_st> handles;
  std::vector<bool> gpm_metrics_seen;  // per GPU: a nvmlGpmMetricsGet since nvmlInit
  struct CallCount {
    const char* name;  // an entry point's __func__: one address per function
    uint64_t count;
  };
  std::array<CallCount, 96> calls{};
  size_t call_kinds = 0;

  void Reset(Scenario next) {
    scenario = std::move(next);
    start_mono_ns = ClockNs(CLOCK_MONOTONIC);
    start_wall_us = ClockNs(CLOCK_REALTIME) / 1000;
    handles.clear();
    for (uint32_t i = 0; i < scenario.gpus.size(); ++i) handles.push_back({i});
    gpm_metrics_seen.assign(scenario.gpus.size(), false);
    call_kinds = 0;
  }

  /// Scenario seconds since nvmlInit.
  double Now() const {
    if (scenario.frozen_at_s) return *scenario.frozen_at_s;
    return static_cast<double>(ClockNs(CLOCK_MONOTONIC) - start_mono_ns) * 1e-9 *
           scenario.time_scale;
  }

  /// Driver timestamp (µs since the Unix epoch) of scenario time `t`.
  unsigned long long WallUs(double t) const {
    return static_cast<unsigned long long>(start_wall_us + std::llround(t * 1e6));
  }

  void Count(const char* fn) {
    for (size_t i = 0; i < call_kinds; ++i) {
      if (calls[i].name == fn) {
        ++calls[i].count;
        return;
      }
    }
    if (call_kinds < calls.size()) calls[call_kinds++] = {fn, 1};
  }

  bool Missing(const char* fn) const {
    return !scenario.missing_symbols.empty() &&
           scenario.missing_symbols.find(std::string_view(fn)) != scenario.missing_symbols.end();
  }

  const Gpu* Lookup(nv::nvmlDevice_t device) const {
    if (handles.empty() || device == nullptr) return nullptr;
    const std::less<const nv::nvmlDevice_st*> less;
    if (less(device, handles.data()) || !less(device, handles.data() + handles.size())) {
      return nullptr;
    }
    return &scenario.gpus[device->index];
  }

  /// Writes {"nvmlX": calls, ...} to $STALLSCOPE_FAKE_NVML_CALL_LOG, for tests that check which
  /// entry points a client stopped calling.
  void WriteCallLog() const {
    const char* path = std::getenv(kCallLogEnv);
    if (path == nullptr || *path == '\0') return;
    FILE* f = std::fopen(path, "w");
    if (f == nullptr) return;
    std::fputc('{', f);
    for (size_t i = 0; i < call_kinds; ++i) {
      std::fprintf(f, "%s\"%s\": %llu", i == 0 ? "" : ", ", calls[i].name,
                   static_cast<unsigned long long>(calls[i].count));
    }
    std::fputs("}\n", f);
    std::fclose(f);
  }
};

/// The one State of the process (defined in fake_nvml.cc).
State& TheState();

/// One GPU call's view: the GPU, its scenario and the time.
struct Ctx {
  const State& state;
  const Gpu& gpu;
  double t;
};

/// The scenario's failure modes of a GPU at `t`, in the order a driver would hit them (lost,
/// failing, unsupported); SUCCESS when none applies.
inline nvmlReturn_t GpuFailure(const Gpu& gpu, double t, uint32_t feature) {
  if (gpu.lost_at_s && t >= *gpu.lost_at_s) return nv::NVML_ERROR_GPU_IS_LOST;
  if (gpu.fail_from_s && t >= *gpu.fail_from_s) return nv::NVML_ERROR_UNKNOWN;
  if ((gpu.not_supported & feature) != 0) return nv::NVML_ERROR_NOT_SUPPORTED;
  return nv::NVML_SUCCESS;
}

/// Common path of every per-GPU entry point: its cost (outside the lock), bookkeeping, the
/// scenario's failure modes, then `body`.
template <typename Body>
nvmlReturn_t OnGpu(const char* fn, nv::nvmlDevice_t device, uint32_t feature, Body body) {
  State& s = TheState();
  s.cost.Charge(fn);
  const std::lock_guard lock(s.mu);
  s.Count(fn);
  if (s.refcount == 0) return nv::NVML_ERROR_UNINITIALIZED;
  if (s.Missing(fn)) return nv::NVML_ERROR_FUNCTION_NOT_FOUND;
  const Gpu* gpu = s.Lookup(device);
  if (gpu == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  const double t = s.Now();
  if (const nvmlReturn_t rc = GpuFailure(*gpu, t, feature); rc != nv::NVML_SUCCESS) return rc;
  return body(Ctx{s, *gpu, t});
}

/// Entry points that need nvmlInit but no GPU (or, for nvmlGpmMetricsGet, find it themselves).
template <typename Body>
nvmlReturn_t OnSystem(const char* fn, Body body) {
  State& s = TheState();
  s.cost.Charge(fn);
  const std::lock_guard lock(s.mu);
  s.Count(fn);
  if (s.refcount == 0) return nv::NVML_ERROR_UNINITIALIZED;
  if (s.Missing(fn)) return nv::NVML_ERROR_FUNCTION_NOT_FOUND;
  return body(s);
}

}  // namespace stallscope::fake_nvml
