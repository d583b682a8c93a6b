#include "scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "gpu/gpu_backend.h"

namespace stallscope::fake_nvml {
namespace {

using nlohmann::json;

constexpr std::array<std::pair<std::string_view, Feature>, 19> kFeatureNames{{
    {"memory", kFeatureMemory},
    {"utilization", kFeatureUtilization},
    {"samples", kFeatureSamples},
    {"power", kFeaturePower},
    {"power_limit", kFeaturePowerLimit},
    {"energy", kFeatureEnergy},
    {"temperature", kFeatureTemperature},
    {"clocks", kFeatureClocks},
    {"max_clocks", kFeatureMaxClocks},
    {"clock_events", kFeatureClockEvents},
    {"pcie_throughput", kFeaturePcieThroughput},
    {"pcie_link", kFeaturePcieLink},
    {"persistence", kFeaturePersistence},
    {"ecc", kFeatureEcc},
    {"processes", kFeatureProcesses},
    {"process_util", kFeatureProcessUtil},
    {"retired_pages", kFeatureRetiredPages},
    {"remapped_rows", kFeatureRemappedRows},
    {"gpm", kFeatureGpm},
}};

/// nvmlInit failures a scenario can ask for, with their nvmlReturn_t values (nvml.h).
constexpr std::array<std::pair<std::string_view, int>, 3> kInitErrors{{
    {"driver_not_loaded", 9},
    {"no_permission", 4},
    {"lib_rm_version_mismatch", 18},
}};

/// Typed, non-throwing field access over nlohmann::json that remembers the first error with the
/// JSON path where it happened. (nlohmann's own accessors throw; we never let them.)
class Reader {
 public:
  bool ok() const { return error_.empty(); }
  std::string& error() { return error_; }

  /// Records the first failure; returns false for `return Fail(...)` in the getters.
  bool Fail(std::string_view path, std::string_view what) {
    if (error_.empty()) error_ = fmt::format("{}: {}", path.empty() ? "top level" : path, what);
    return false;
  }

  /// Rejects keys outside `allowed`: a typo in a scenario should fail loudly, not be ignored.
  void Keys(const json& obj, std::string_view path,
            std::initializer_list<std::string_view> allowed) {
    for (const auto& item : obj.items()) {
      if (std::find(allowed.begin(), allowed.end(), item.key()) == allowed.end()) {
        Fail(path, fmt::format("unknown key '{}'", item.key()));
      }
    }
  }

  const json* Find(const json& obj, std::string_view key) {
    const auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }

  /// Each Get leaves `out` alone when the key is absent; false when present but invalid.
  bool Get(const json& obj, std::string_view path, std::string_view key, double& out) {
    const json* j = Find(obj, key);
    if (j == nullptr) return true;
    if (!j->is_number()) return Fail(Path(path, key), "expected a number");
    const auto v = j->get<double>();
    if (!std::isfinite(v) || v < 0) return Fail(Path(path, key), "expected a number >= 0");
    out = v;
    return true;
  }
  bool Get(const json& obj, std::string_view path, std::string_view key, uint64_t& out) {
    double v = static_cast<double>(out);
    if (!Get(obj, path, key, v)) return false;
    // 2^53: the largest integer a JSON number (a double) holds exactly.
    if (v != std::floor(v) || v > 9007199254740992.0) {
      return Fail(Path(path, key), "expected an integer");
    }
    out = static_cast<uint64_t>(v);
    return true;
  }
  bool Get(const json& obj, std::string_view path, std::string_view key, uint32_t& out) {
    uint64_t v = out;
    if (!Get(obj, path, key, v)) return false;
    if (v > std::numeric_limits<uint32_t>::max()) return Fail(Path(path, key), "too large");
    out = static_cast<uint32_t>(v);
    return true;
  }
  template <typename T>
  bool Get(const json& obj, std::string_view path, std::string_view key, std::optional<T>& out) {
    if (Find(obj, key) == nullptr) return true;
    T v{};
    if (!Get(obj, path, key, v)) return false;
    out = v;
    return true;
  }
  bool Get(const json& obj, std::string_view path, std::string_view key, std::string& out) {
    const json* j = Find(obj, key);
    if (j == nullptr) return true;
    if (!j->is_string()) return Fail(Path(path, key), "expected a string");
    out = j->get_ref<const std::string&>();
    return true;
  }
  bool Get(const json& obj, std::string_view path, std::string_view key, bool& out) {
    const json* j = Find(obj, key);
    if (j == nullptr) return true;
    if (!j->is_boolean()) return Fail(Path(path, key), "expected true or false");
    out = j->get<bool>();
    return true;
  }

  /// The array at `key` (absent → empty), or a failure when it is not an array.
  const json& Array(const json& obj, std::string_view path, std::string_view key) {
    static const json kEmpty = json::array();
    const json* j = Find(obj, key);
    if (j == nullptr) return kEmpty;
    if (!j->is_array()) {
      Fail(Path(path, key), "expected an array");
      return kEmpty;
    }
    return *j;
  }

  /// The object at `key`, or null when absent; a failure when present but not an object.
  const json* Object(const json& obj, std::string_view path, std::string_view key) {
    const json* j = Find(obj, key);
    if (j != nullptr && !j->is_object()) {
      Fail(Path(path, key), "expected an object");
      return nullptr;
    }
    return j;
  }

  static std::string Path(std::string_view path, std::string_view key) {
    return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
  }

 private:
  std::string error_;
};

void ParsePattern(Reader& r, const json& obj, const std::string& path, Pattern& p) {
  r.Keys(obj, path,
         {"kind", "util_high", "util_low", "period_s", "duty", "dip_every_s", "dip_length_s"});
  std::string kind = "steady";
  r.Get(obj, path, "kind", kind);
  if (kind == "steady") {
    p.kind = PatternKind::kSteady;
  } else if (kind == "sawtooth") {
    p.kind = PatternKind::kSawtooth;
  } else if (kind == "dips") {
    p.kind = PatternKind::kDips;
  } else {
    r.Fail(path + ".kind", fmt::format("unknown '{}' (steady, sawtooth, dips)", kind));
  }
  r.Get(obj, path, "util_high", p.util_high);
  r.Get(obj, path, "util_low", p.util_low);
  r.Get(obj, path, "period_s", p.period_s);
  r.Get(obj, path, "duty", p.duty);
  r.Get(obj, path, "dip_every_s", p.dip_every_s);
  r.Get(obj, path, "dip_length_s", p.dip_length_s);
  if (p.util_high > 100 || p.util_low > 100) r.Fail(path, "utilization above 100");
  if (p.period_s <= 0 || p.duty > 1) r.Fail(path, "need period_s > 0 and duty in [0, 1]");
  if (p.dip_every_s <= 0 || p.dip_length_s > p.dip_every_s) {
    r.Fail(path, "need dip_every_s > 0 and dip_length_s <= dip_every_s");
  }
}

void ParseThrottle(Reader& r, const json& list, const std::string& path, Gpu& gpu) {
  for (size_t i = 0; i < list.size() && r.ok(); ++i) {
    const std::string at = fmt::format("{}[{}]", path, i);
    const json& obj = list[i];
    if (!obj.is_object()) {
      r.Fail(at, "expected an object");
      return;
    }
    r.Keys(obj, at, {"start_s", "end_s", "reasons", "sm_clock_mhz"});
    Throttle& t = gpu.throttle.emplace_back();
    r.Get(obj, at, "start_s", t.start_s);
    r.Get(obj, at, "end_s", t.end_s);
    r.Get(obj, at, "sm_clock_mhz", t.sm_clock_mhz);
    for (const json& name : r.Array(obj, at, "reasons")) {
      const auto& table = gpu::kClockEventReasons;
      const auto it = std::find_if(table.begin(), table.end(), [&](const auto& reason) {
        return name.is_string() && name.get_ref<const std::string&>() == reason.name;
      });
      if (it == table.end()) {
        r.Fail(at + ".reasons", "unknown reason " + name.dump());
        return;
      }
      t.reasons |= it->bit;
    }
  }
}

void ParseProcesses(Reader& r, const json& list, const std::string& path, Gpu& gpu) {
  for (size_t i = 0; i < list.size() && r.ok(); ++i) {
    const std::string at = fmt::format("{}[{}]", path, i);
    const json& obj = list[i];
    if (!obj.is_object()) {
      r.Fail(at, "expected an object");
      return;
    }
    r.Keys(obj, at, {"pid", "used_memory_mib", "graphics", "sm_util", "mem_util"});
    Process& p = gpu.processes.emplace_back();
    r.Get(obj, at, "pid", p.pid);
    r.Get(obj, at, "used_memory_mib", p.used_memory_mib);
    r.Get(obj, at, "graphics", p.graphics);
    r.Get(obj, at, "sm_util", p.sm_util);
    r.Get(obj, at, "mem_util", p.mem_util);
  }
}

void ParseFeatures(Reader& r, const json& list, const std::string& path, Gpu& gpu) {
  for (const json& name : list) {
    const auto it = std::find_if(kFeatureNames.begin(), kFeatureNames.end(), [&](const auto& f) {
      return name.is_string() && name.get_ref<const std::string&>() == f.first;
    });
    if (it == kFeatureNames.end()) {
      r.Fail(path, "unknown feature " + name.dump());
      return;
    }
    gpu.not_supported |= it->second;
  }
}

void ParsePcie(Reader& r, const json& obj, const std::string& path, Pcie& p) {
  r.Keys(obj, path, {"gen", "width", "gen_max", "width_max", "gen_gpu_max", "tx_kbps", "rx_kbps"});
  r.Get(obj, path, "gen_gpu_max", p.gen_gpu_max);
  r.Get(obj, path, "gen", p.gen);
  r.Get(obj, path, "width", p.width);
  r.Get(obj, path, "gen_max", p.gen_max);
  r.Get(obj, path, "width_max", p.width_max);
  r.Get(obj, path, "tx_kbps", p.tx_kbps);
  r.Get(obj, path, "rx_kbps", p.rx_kbps);
}

/// "gpm": present means the GPU has GPM; every key is optional (defaults: scenario.h).
void ParseGpm(Reader& r, const json& obj, const std::string& path, Gpm& g) {
  r.Keys(obj, path,
         {"sm_active_ratio", "sm_occupancy_pct", "tensor_active_ratio", "dram_active_ratio",
          "fp32_active_ratio", "fp16_active_ratio", "fp64_active_ratio", "pcie_tx_mibps",
          "pcie_rx_mibps", "nvlink_tx_mibps", "nvlink_rx_mibps"});
  const std::pair<std::string_view, double*> ratios[] = {
      {"sm_active_ratio", &g.sm_active_ratio},     {"tensor_active_ratio", &g.tensor_active_ratio},
      {"dram_active_ratio", &g.dram_active_ratio}, {"fp32_active_ratio", &g.fp32_active_ratio},
      {"fp16_active_ratio", &g.fp16_active_ratio}, {"fp64_active_ratio", &g.fp64_active_ratio},
  };
  for (const auto& [key, out] : ratios) {
    if (r.Get(obj, path, key, *out) && *out > 1) r.Fail(Reader::Path(path, key), "above 1");
  }
  if (r.Get(obj, path, "sm_occupancy_pct", g.sm_occupancy_pct) && g.sm_occupancy_pct > 100) {
    r.Fail(path + ".sm_occupancy_pct", "above 100");
  }
  r.Get(obj, path, "pcie_tx_mibps", g.pcie_tx_mibps);
  r.Get(obj, path, "pcie_rx_mibps", g.pcie_rx_mibps);
  r.Get(obj, path, "nvlink_tx_mibps", g.nvlink_tx_mibps);
  r.Get(obj, path, "nvlink_rx_mibps", g.nvlink_rx_mibps);
}

/// "retired_pages", "remapped_rows" and "cpu_affinity": the health facts doctor reads.
void ParseHealth(Reader& r, const json& obj, const std::string& at, Gpu& g) {
  if (const json* pages = r.Object(obj, at, "retired_pages")) {
    const std::string path = at + ".retired_pages";
    r.Keys(*pages, path, {"single_bit", "double_bit", "pending"});
    r.Get(*pages, path, "single_bit", g.retired_pages.single_bit);
    r.Get(*pages, path, "double_bit", g.retired_pages.double_bit);
    r.Get(*pages, path, "pending", g.retired_pages.pending);
  }
  if (const json* rows = r.Object(obj, at, "remapped_rows")) {
    const std::string path = at + ".remapped_rows";
    r.Keys(*rows, path, {"correctable", "uncorrectable", "pending", "failure"});
    r.Get(*rows, path, "correctable", g.remapped_rows.correctable);
    r.Get(*rows, path, "uncorrectable", g.remapped_rows.uncorrectable);
    r.Get(*rows, path, "pending", g.remapped_rows.pending);
    r.Get(*rows, path, "failure", g.remapped_rows.failure);
  }
  if (r.Find(obj, "cpu_affinity") != nullptr) {
    std::vector<uint32_t>& cpus = g.cpu_affinity.emplace();
    for (const json& cpu : r.Array(obj, at, "cpu_affinity")) {
      if (!cpu.is_number_unsigned() || cpu.get<uint64_t>() >= 1024) {
        r.Fail(at + ".cpu_affinity", "expected CPU numbers below 1024");
        return;
      }
      cpus.push_back(cpu.get<uint32_t>());
    }
  }
}

void ParseGpuScalars(Reader& r, const json& obj, const std::string& at, Gpu& g) {
  r.Get(obj, at, "name", g.name);
  r.Get(obj, at, "uuid", g.uuid);
  r.Get(obj, at, "pci_bus_id", g.pci_bus_id);
  r.Get(obj, at, "memory_total_mib", g.memory_total_mib);
  r.Get(obj, at, "memory_used_mib", g.memory_used_mib);
  r.Get(obj, at, "power_limit_w", g.power_limit_w);
  r.Get(obj, at, "power_default_limit_w", g.power_default_limit_w);
  r.Get(obj, at, "power_w_at_full", g.power_w_at_full);
  r.Get(obj, at, "power_w_idle", g.power_w_idle);
  r.Get(obj, at, "temperature_c_idle", g.temperature_c_idle);
  r.Get(obj, at, "temperature_c_at_full", g.temperature_c_at_full);
  r.Get(obj, at, "mem_util_ratio", g.mem_util_ratio);
  r.Get(obj, at, "sm_clock_max_mhz", g.sm_clock_max_mhz);
  r.Get(obj, at, "sm_clock_idle_mhz", g.sm_clock_idle_mhz);
  r.Get(obj, at, "mem_clock_max_mhz", g.mem_clock_max_mhz);
  r.Get(obj, at, "persistence", g.persistence);
  r.Get(obj, at, "lost_at_s", g.lost_at_s);
  r.Get(obj, at, "fail_from_s", g.fail_from_s);
  if (const json* ecc = r.Object(obj, at, "ecc")) {
    r.Keys(*ecc, at + ".ecc",
           {"corrected", "uncorrected", "aggregate_corrected", "aggregate_uncorrected"});
    r.Get(*ecc, at + ".ecc", "corrected", g.ecc_corrected);
    r.Get(*ecc, at + ".ecc", "uncorrected", g.ecc_uncorrected);
    r.Get(*ecc, at + ".ecc", "aggregate_corrected", g.ecc_aggregate_corrected);
    r.Get(*ecc, at + ".ecc", "aggregate_uncorrected", g.ecc_aggregate_uncorrected);
  }
  std::string mig = "disabled";
  r.Get(obj, at, "mig", mig);
  if (mig == "disabled") {
    g.mig = Mig::kDisabled;
  } else if (mig == "enabled") {
    g.mig = Mig::kEnabled;
  } else if (mig == "unsupported") {
    g.mig = Mig::kUnsupported;
  } else {
    r.Fail(at + ".mig", fmt::format("unknown '{}' (enabled, disabled, unsupported)", mig));
  }
}

void ParseGpu(Reader& r, const json& obj, size_t index, Gpu& g) {
  const std::string at = fmt::format("gpus[{}]", index);
  if (!obj.is_object()) {
    r.Fail(at, "expected an object");
    return;
  }
  r.Keys(obj, at,
         {"name",
          "uuid",
          "pci_bus_id",
          "memory_total_mib",
          "memory_used_mib",
          "power_limit_w",
          "power_default_limit_w",
          "power_w_at_full",
          "power_w_idle",
          "temperature_c_idle",
          "temperature_c_at_full",
          "mem_util_ratio",
          "sm_clock_max_mhz",
          "sm_clock_idle_mhz",
          "mem_clock_max_mhz",
          "persistence",
          "ecc",
          "retired_pages",
          "remapped_rows",
          "cpu_affinity",
          "pcie",
          "mig",
          "not_supported",
          "lost_at_s",
          "fail_from_s",
          "pattern",
          "throttle",
          "processes",
          "gpm"});
  g.name = "NVIDIA H100 80GB HBM3";
  g.uuid = fmt::format("GPU-fa4e0000-0000-0000-0000-{:012x}", index);
  g.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x17 + index);
  ParseGpuScalars(r, obj, at, g);
  ParseHealth(r, obj, at, g);
  if (const json* pcie = r.Object(obj, at, "pcie")) ParsePcie(r, *pcie, at + ".pcie", g.pcie);
  if (const json* pattern = r.Object(obj, at, "pattern")) {
    ParsePattern(r, *pattern, at + ".pattern", g.pattern);
  }
  if (const json* gpm = r.Object(obj, at, "gpm")) ParseGpm(r, *gpm, at + ".gpm", g.gpm.emplace());
  ParseFeatures(r, r.Array(obj, at, "not_supported"), at + ".not_supported", g);
  ParseThrottle(r, r.Array(obj, at, "throttle"), at + ".throttle", g);
  ParseProcesses(r, r.Array(obj, at, "processes"), at + ".processes", g);
}

}  // namespace

Result<Scenario> ParseScenario(std::string_view json_text) {
  // allow_exceptions=false: a syntax error gives a "discarded" value instead of throwing.
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Error{ErrorCode::kParse, "not valid JSON"};
  if (!root.is_object()) return Error{ErrorCode::kParse, "top level: expected an object"};
  Reader r;
  Scenario s;
  r.Keys(root, "",
         {"driver_version", "cuda_driver_version", "init_error", "time_scale", "frozen_at_s",
          "driver_sample_period_s", "missing_symbols", "device_count", "gpus"});
  r.Get(root, "", "driver_version", s.driver_version);
  uint32_t cuda_version = static_cast<uint32_t>(s.cuda_driver_version);
  r.Get(root, "", "cuda_driver_version", cuda_version);
  s.cuda_driver_version = static_cast<int32_t>(std::min<uint32_t>(cuda_version, 1'000'000));
  std::string init_error;
  r.Get(root, "", "init_error", init_error);
  if (!init_error.empty()) {
    const auto it = std::find_if(kInitErrors.begin(), kInitErrors.end(),
                                 [&](const auto& e) { return e.first == init_error; });
    if (it == kInitErrors.end()) {
      r.Fail("init_error", fmt::format("unknown '{}' (driver_not_loaded, no_permission, "
                                       "lib_rm_version_mismatch)",
                                       init_error));
    } else {
      s.init_error = it->second;
    }
  }
  r.Get(root, "", "time_scale", s.time_scale);
  r.Get(root, "", "frozen_at_s", s.frozen_at_s);
  r.Get(root, "", "device_count", s.device_count);
  if (s.time_scale <= 0) r.Fail("time_scale", "expected a number > 0");
  r.Get(root, "", "driver_sample_period_s", s.driver_sample_period_s);
  if (s.driver_sample_period_s <= 0) r.Fail("driver_sample_period_s", "expected a number > 0");
  for (const json& name : r.Array(root, "", "missing_symbols")) {
    if (!name.is_string()) {
      r.Fail("missing_symbols", "expected strings");
      break;
    }
    s.missing_symbols.insert(name.get<std::string>());
  }
  const json& gpus = r.Array(root, "", "gpus");
  for (size_t i = 0; i < gpus.size() && r.ok(); ++i) ParseGpu(r, gpus[i], i, s.gpus.emplace_back());
  if (!r.ok()) return Error{ErrorCode::kParse, std::move(r.error())};
  return s;
}

Result<Scenario> LoadScenario(const std::string& path) {
  // stdio, not iostreams: a process that loads the fake should pay for the scenario, not for a
  // C++ locale (the real library is C; `make overhead` measures the process's RSS).
  std::FILE* in = std::fopen(path.c_str(), "rb");
  if (in == nullptr) return MakeError(ErrorCode::kNotFound, "{}: cannot open", path);
  std::string text;
  char buf[8192];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, in)) > 0;) text.append(buf, n);
  const bool read_error = std::ferror(in) != 0;
  std::fclose(in);
  if (read_error) return MakeError(ErrorCode::kIo, "{}: read error", path);
  Result<Scenario> scenario = ParseScenario(text);
  if (!scenario.ok()) {
    return MakeError(scenario.error().code, "{}: {}", path, scenario.error().message);
  }
  return scenario;
}

namespace {

/// The pattern as "high for `high_s`, then low, every `cycle_s`"; steady has no cycle.
struct Cycle {
  double cycle_s;
  double high_s;
};

std::optional<Cycle> CycleOf(const Pattern& p) {
  switch (p.kind) {
    case PatternKind::kSawtooth:
      return Cycle{p.period_s, p.duty * p.period_s};
    case PatternKind::kDips:
      return Cycle{p.dip_every_s, p.dip_every_s - p.dip_length_s};
    case PatternKind::kSteady:
      break;
  }
  return std::nullopt;
}

}  // namespace

double UtilAt(const Pattern& pattern, double t) {
  const std::optional<Cycle> c = CycleOf(pattern);
  if (!c) return pattern.util_high;
  const double phase = std::fmod(std::max(t, 0.0), c->cycle_s);
  return phase < c->high_s ? pattern.util_high : pattern.util_low;
}

double UtilIntegral(const Pattern& pattern, double t) {
  t = std::max(t, 0.0);
  const std::optional<Cycle> c = CycleOf(pattern);
  if (!c) return pattern.util_high * t;
  const double cycles = std::floor(t / c->cycle_s);
  const double rest = t - cycles * c->cycle_s;
  const double high_s = cycles * c->high_s + std::min(rest, c->high_s);
  return pattern.util_high * high_s + pattern.util_low * (t - high_s);
}

}  // namespace stallscope::fake_nvml
