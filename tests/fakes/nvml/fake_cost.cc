#include "fake_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace stallscope::fake_nvml {
namespace {

using nlohmann::json;

struct Row {
  std::string_view name;
  CallCost h100;  ///< µs per call on the real H100
};

// The one cost table: every entry point the fake defines, with what it costs on the real H100
// (NVIDIA H100 80GB HBM3, driver 580.159.04). Source of each number, unless the row says
// otherwise: shared/gpu/h100-2026-11-26/README.md section 2 ("NVML, per call, on this driver",
// GPU idle, 200 calls each, measured with shared/gpu/nvml_cost.c), as quoted in issue 28.
// "issue 28: 1" marks calls the README did not time (names, handles, health queries): issue 28
// prices them at 1 µs. Calls priced 0 were not measured and cost nothing here.
constexpr std::array<Row, CostTable::kRows> kTable{{
    {"nvmlInit", {9054, 9059}},  // as nvmlInit_v2; charged when it loads the driver (the first)
    {"nvmlInit_v2", {9054, 9059}},
    {"nvmlShutdown", {0, 0}},
    {"nvmlErrorString", {0, 0}},
    {"nvmlSystemGetDriverVersion", {1, 1}},         // issue 28: 1
    {"nvmlSystemGetCudaDriverVersion", {1, 1}},     // issue 28: 1
    {"nvmlSystemGetCudaDriverVersion_v2", {1, 1}},  // issue 28: 1
    {"nvmlDeviceGetCount", {1, 1}},                 // issue 28: 1
    {"nvmlDeviceGetCount_v2", {1, 1}},              // issue 28: 1
    {"nvmlDeviceGetHandleByIndex", {1, 1}},         // issue 28: 1
    {"nvmlDeviceGetHandleByIndex_v2", {1, 1}},      // issue 28: 1
    {"nvmlDeviceGetName", {1, 1}},                  // issue 28: 1
    {"nvmlDeviceGetUUID", {1, 1}},                  // issue 28: 1
    {"nvmlDeviceGetPciInfo", {1, 1}},               // issue 28: 1
    {"nvmlDeviceGetPciInfo_v2", {1, 1}},            // issue 28: 1
    {"nvmlDeviceGetPciInfo_v3", {1, 1}},            // issue 28: 1
    {"nvmlDeviceGetMemoryInfo", {6.8, 6.8}},
    {"nvmlDeviceGetUtilizationRates", {19.6, 19.6}},
    {"nvmlDeviceGetSamples", {2391, 2404}},  // GPU_UTILIZATION_SAMPLES, lastSeen 0
    {"nvmlDeviceGetPowerUsage", {9.4, 9.4}},
    {"nvmlDeviceGetEnforcedPowerLimit", {0.4, 0.4}},
    {"nvmlDeviceGetPowerManagementLimit", {0.4, 0.4}},     // issue 28: as the enforced limit
    {"nvmlDeviceGetPowerManagementDefaultLimit", {1, 1}},  // issue 28: 1
    {"nvmlDeviceGetTotalEnergyConsumption", {3892, 3920}},
    {"nvmlDeviceGetTemperature", {1.9, 1.9}},
    {"nvmlDeviceGetClockInfo", {2.6, 2.6}},     // SM; MEM took 0.3, issue 28 prices all at 2.6
    {"nvmlDeviceGetMaxClockInfo", {2.6, 2.6}},  // issue 28: as GetClockInfo
    {"nvmlDeviceGetCurrentClocksEventReasons", {2.5, 2.5}},
    {"nvmlDeviceGetCurrentClocksThrottleReasons", {2.5, 2.5}},  // the same call, older name
    {"nvmlDeviceGetPcieThroughput", {665, 20743}},  // NVML: "measured over a 20 ms interval"
    {"nvmlDeviceGetCurrPcieLinkGeneration", {2.6, 2.6}},
    {"nvmlDeviceGetCurrPcieLinkWidth", {36.8, 36.8}},
    {"nvmlDeviceGetMaxPcieLinkGeneration", {2.6, 2.6}},  // issue 28: as the current gen
    {"nvmlDeviceGetMaxPcieLinkWidth", {2.6, 2.6}},       // issue 28: as the current gen
    {"nvmlDeviceGetGpuMaxPcieLinkGeneration", {1, 1}},   // issue 28: 1
    {"nvmlDeviceGetPersistenceMode", {2.9, 2.9}},
    {"nvmlDeviceGetTotalEccErrors", {9.3, 9.3}},
    {"nvmlDeviceGetRemappedRows", {0.3, 0.3}},
    {"nvmlDeviceGetRetiredPages", {1, 1}},               // issue 28: 1
    {"nvmlDeviceGetRetiredPagesPendingStatus", {1, 1}},  // issue 28: 1
    {"nvmlDeviceGetCpuAffinity", {1, 1}},                // issue 28: 1
    {"nvmlDeviceGetMigMode", {148, 148}},
    {"nvmlDeviceGetProcessUtilization", {2209, 2221}},  // lastSeen 0 (NOT_FOUND: no process)
    {"nvmlDeviceGetComputeRunningProcesses", {6.4, 6.4}},
    {"nvmlDeviceGetComputeRunningProcesses_v2", {6.4, 6.4}},
    {"nvmlDeviceGetComputeRunningProcesses_v3", {6.4, 6.4}},
    {"nvmlDeviceGetGraphicsRunningProcesses", {5.6, 5.6}},
    {"nvmlDeviceGetGraphicsRunningProcesses_v2", {5.6, 5.6}},
    {"nvmlDeviceGetGraphicsRunningProcesses_v3", {5.6, 5.6}},
    // README section 2, "GPM" (during a matmul burn, via nvidia-ml-py): SampleGet 76-93 µs,
    // MetricsGet of 10 metrics 1.4-1.9 ms, its first call 6-9.5 ms; issue 28's round numbers.
    {"nvmlGpmQueryDeviceSupport", {2, 2}},
    {"nvmlGpmSampleAlloc", {0, 0}},
    {"nvmlGpmSampleFree", {0, 0}},
    {"nvmlGpmSampleGet", {85, 85}},
    {"nvmlGpmMetricsGet", {1650, 1650}},
    {kGpmMetricsGetFirst, {8000, 8000}},
}};

// Every row filled (an array initializer may fall short of its size) and no name twice.
static_assert([] {
  for (size_t i = 0; i < kTable.size(); ++i) {
    if (kTable[i].name.substr(0, 4) != "nvml") return false;
    for (size_t j = 0; j < i; ++j) {
      if (kTable[i].name == kTable[j].name) return false;
    }
  }
  return true;
}());

constexpr std::array<std::string_view, kTable.size()> kNames = [] {
  std::array<std::string_view, kTable.size()> names{};
  for (size_t i = 0; i < kTable.size(); ++i) names[i] = kTable[i].name;
  return names;
}();

std::optional<size_t> RowOf(std::string_view fn) {
  const auto it = std::find(kNames.begin(), kNames.end(), fn);
  if (it == kNames.end()) return std::nullopt;
  return static_cast<size_t>(it - kNames.begin());
}

/// A cost file's value for one entry point: {"cpu_us": N, "wall_us": N}, both >= 0, cpu <= wall.
Result<CallCost> ParseRow(const std::string& name, const json& value) {
  if (!value.is_object()) {
    return MakeError(ErrorCode::kParse, R"({}: expected {{"cpu_us": N, "wall_us": N}})", name);
  }
  for (const auto& item : value.items()) {
    if (item.key() != "cpu_us" && item.key() != "wall_us") {
      return MakeError(ErrorCode::kParse, "{}: unknown key '{}'", name, item.key());
    }
  }
  CallCost cost;
  for (const auto& [key, out] : {std::pair{"cpu_us", &cost.cpu_us}, {"wall_us", &cost.wall_us}}) {
    const auto it = value.find(key);
    if (it == value.end() || !it->is_number() || !std::isfinite(it->get<double>()) ||
        it->get<double>() < 0) {
      return MakeError(ErrorCode::kParse, "{}.{}: expected a number >= 0", name, key);
    }
    *out = it->get<double>();
  }
  if (cost.cpu_us > cost.wall_us) {
    return MakeError(ErrorCode::kParse, "{}: cpu_us {} above wall_us {}", name, cost.cpu_us,
                     cost.wall_us);
  }
  return cost;
}

}  // namespace

std::span<const std::string_view> CostEntryPoints() { return kNames; }

CostTable CostTable::H100() {
  CostTable t;
  for (size_t i = 0; i < kTable.size(); ++i) t.costs_[i] = kTable[i].h100;
  return t;
}

Result<CostTable> CostTable::Parse(std::string_view json_text) {
  // allow_exceptions=false: a syntax error gives a "discarded" value instead of throwing.
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Error{ErrorCode::kParse, "not valid JSON"};
  if (!root.is_object()) return Error{ErrorCode::kParse, "top level: expected an object"};
  CostTable t;
  for (const auto& item : root.items()) {
    const std::optional<size_t> row = RowOf(item.key());
    if (!row) return MakeError(ErrorCode::kParse, "unknown entry point '{}'", item.key());
    Result<CallCost> cost = ParseRow(item.key(), item.value());
    if (!cost.ok()) return cost.error();
    t.costs_[*row] = *cost;
  }
  return t;
}

Result<CostTable> CostTable::Load(std::string_view spec) {
  if (spec.empty()) return CostTable{};
  if (spec == "h100") return H100();
  const std::string path(spec);
  // stdio, as LoadScenario: the fake should not bring a C++ locale into the measured process.
  std::FILE* in = std::fopen(path.c_str(), "rb");
  if (in == nullptr) return MakeError(ErrorCode::kNotFound, "{}: cannot open", path);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, in)) > 0;) text.append(buf, n);
  const bool read_error = std::ferror(in) != 0;
  std::fclose(in);
  if (read_error) return MakeError(ErrorCode::kIo, "{}: read error", path);
  Result<CostTable> table = Parse(text);
  if (!table.ok()) return MakeError(table.error().code, "{}: {}", path, table.error().message);
  return table;
}

std::optional<CallCost> CostTable::Of(std::string_view fn) const {
  const std::optional<size_t> row = RowOf(fn);
  return row ? costs_[*row] : std::nullopt;
}

bool CostTable::empty() const {
  return std::none_of(costs_.begin(), costs_.end(), [](const std::optional<CallCost>& c) {
    return c && (c->cpu_us > 0 || c->wall_us > 0);
  });
}

void Spend(CallCost cost, int64_t cpu_start_ns, int64_t wall_start_ns) {
  // Spin on the thread's own CPU clock: preemption does not count, so the thread really uses
  // cpu_us of CPU, as the driver's ioctls would.
  const int64_t cpu_end = cpu_start_ns + std::llround(cost.cpu_us * 1e3);
  while (ClockNs(CLOCK_THREAD_CPUTIME_ID) < cpu_end) {
  }
  const int64_t wall_end = wall_start_ns + std::llround(cost.wall_us * 1e3);
  // Only a deadline still ahead: clock_nanosleep for one passed costs ~15 µs in a VM (measured on
  // the dev machine), which would overcharge every cheap call.
  if (ClockNs(CLOCK_MONOTONIC) >= wall_end) return;
  const timespec until{static_cast<time_t>(wall_end / 1'000'000'000),
                       static_cast<long>(wall_end % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
  }
}

void CostModel::Set(CostTable table) {
  const std::lock_guard lock(mu_);
  enabled_.store(!table.empty(), std::memory_order_release);
  table_ = table;
}

void CostModel::Charge(std::string_view fn) {
  if (!enabled_.load(std::memory_order_acquire)) return;
  const int64_t cpu0 = ClockNs(CLOCK_THREAD_CPUTIME_ID);
  const int64_t wall0 = ClockNs(CLOCK_MONOTONIC);
  std::optional<CallCost> cost;
  {
    const std::lock_guard lock(mu_);
    cost = table_.Of(fn);
  }
  if (cost) Spend(*cost, cpu0, wall0);
}

void CostModel::ChargeFirstGpmMetrics() {
  if (!enabled_.load(std::memory_order_acquire)) return;
  const int64_t cpu0 = ClockNs(CLOCK_THREAD_CPUTIME_ID);
  const int64_t wall0 = ClockNs(CLOCK_MONOTONIC);
  std::optional<CallCost> first;
  CallCost regular;
  {
    const std::lock_guard lock(mu_);
    first = table_.Of(kGpmMetricsGetFirst);
    regular = table_.Of("nvmlGpmMetricsGet").value_or(CallCost{});
  }
  if (!first) return;
  Spend({std::max(0.0, first->cpu_us - regular.cpu_us),
         std::max(0.0, first->wall_us - regular.wall_us)},
        cpu0, wall0);
}

}  // namespace stallscope::fake_nvml
