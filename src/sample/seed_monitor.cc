#include "sample/seed_monitor.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <limits>

#include <simdjson.h>

namespace stallscope::sample {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

std::string_view SeedFormName(SeedForm form) {
  return form == SeedForm::kLegacy ? "seed 002 legacy single-GPU objects"
                                   : "seed 002 multi-GPU objects";
}

std::optional<SeedForm> SeedFormOf(const object& o) {
  std::string_view ts;
  if (o["timestamp"].get_string().get(ts) != simdjson::SUCCESS) return std::nullopt;
  array gpus;
  if (o["multi_gpu_data"].get_array().get(gpus) == simdjson::SUCCESS) return SeedForm::kMultiGpu;
  element index;
  if (o["gpu_index"].get(index) == simdjson::SUCCESS && index.is_number()) return SeedForm::kLegacy;
  return std::nullopt;
}

namespace {

// Digits [pos, pos + n) of `s` as a number, or -1.
int Digits(std::string_view s, size_t pos, size_t n) {
  if (pos + n > s.size()) return -1;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

std::optional<double> Number(const object& o, std::string_view key) {
  element e;
  if (o[key].get(e) != simdjson::SUCCESS || !e.is_number()) return std::nullopt;
  double d = 0;
  if (e.get_double().get(d) != simdjson::SUCCESS || !std::isfinite(d) || d < 0) return std::nullopt;
  return d;
}

template <typename T>
std::optional<T> Scaled(const object& o, std::string_view key, double scale) {
  // What T holds and llround can return (found by the recording fuzzer: a utilization of 6e12
  // cast to uint32_t).
  constexpr double kMax = std::min(static_cast<double>(std::numeric_limits<T>::max()), 9.2e18);
  auto v = Number(o, key);
  if (!v || *v * scale > kMax) return std::nullopt;
  return static_cast<T>(std::llround(*v * scale));
}

// Calls fn(gpu object) for every GPU entry of `o`.
template <typename Fn>
void ForEachGpu(const object& o, SeedForm form, Fn&& fn) {
  if (form == SeedForm::kLegacy) {
    fn(o);
    return;
  }
  array gpus;
  if (o["multi_gpu_data"].get_array().get(gpus) != simdjson::SUCCESS) return;
  for (element g : gpus) {
    object go;
    if (g.get_object().get(go) == simdjson::SUCCESS) fn(go);
  }
}

}  // namespace

std::optional<int64_t> ParseIsoTimestampNs(std::string_view s) {
  const int year = Digits(s, 0, 4), month = Digits(s, 5, 2), day = Digits(s, 8, 2);
  const int hour = Digits(s, 11, 2), minute = Digits(s, 14, 2), second = Digits(s, 17, 2);
  // Nanoseconds since 1970 in an int64_t end in April 2262 (found by the recording fuzzer: year
  // 5025 overflowed); 2261 leaves room for the fraction and a zone offset.
  if (year < 1970 || year > 2261 || month < 1 || month > 12 || day < 1 || day > 31 || hour < 0 ||
      hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 60 || s[4] != '-' ||
      s[7] != '-' || (s[10] != 'T' && s[10] != ' ') || s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  int64_t ns = static_cast<int64_t>(timegm(&tm)) * 1'000'000'000;
  size_t pos = 19;
  if (pos < s.size() && s[pos] == '.') {
    int64_t scale = 100'000'000;
    for (++pos; pos < s.size() && s[pos] >= '0' && s[pos] <= '9'; ++pos) {
      ns += (s[pos] - '0') * scale;
      scale /= 10;
    }
  }
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    const int oh = Digits(s, pos + 1, 2), om = Digits(s, pos + 4, 2);
    if (oh < 0 || om < 0 || s[pos + 3] != ':') return std::nullopt;
    const int64_t offset = (oh * 3600 + om * 60) * int64_t{1'000'000'000};
    ns += s[pos] == '+' ? -offset : offset;
    pos += 6;
  }
  if (pos != s.size()) return std::nullopt;
  return ns;
}

RecordingHeader SeedHeader(const object& first, SeedForm form) {
  RecordingHeader h;
  h.gpu_backend = "nvml";
  h.gpu_note = std::string(SeedFormName(form));
  ForEachGpu(first, form, [&](const object& g) {
    gpu::GpuStatic s;
    auto index = Number(g, "gpu_index");
    s.index = index && *index < 1024 ? static_cast<uint32_t>(*index)
                                     : static_cast<uint32_t>(h.gpus.size());
    std::string_view name;
    if (g["gpu_name"].get_string().get(name) == simdjson::SUCCESS) s.name = std::string(name);
    s.mem_total_bytes = Scaled<uint64_t>(g, "memory_total", kMiB);
    h.gpus.push_back(std::move(s));
  });
  std::string_view ts;
  if (first["timestamp"].get_string().get(ts) == simdjson::SUCCESS) {
    h.start_wall_ns = ParseIsoTimestampNs(ts).value_or(0);
  }
  return h;
}

bool SeedSample(const object& o, SeedForm form, const RecordingHeader& header, Sample& out) {
  std::string_view ts;
  if (o["timestamp"].get_string().get(ts) != simdjson::SUCCESS) return false;
  auto wall = ParseIsoTimestampNs(ts);
  if (!wall) return false;
  out.wall_ns = *wall;
  out.mono_ns = *wall - header.start_wall_ns;  // the file has one clock: times from its start
  out.gpus.assign(header.gpus.size(), gpu::GpuSample{});
  for (gpu::GpuSample& g : out.gpus) g.lost = true;  // until the object mentions it
  ForEachGpu(o, form, [&](const object& g) {
    auto index = Number(g, "gpu_index");
    for (size_t i = 0; i < header.gpus.size(); ++i) {
      // As doubles: an index past uint32_t (fuzzer input) matches no GPU instead of wrapping.
      if (index && static_cast<double>(header.gpus[i].index) != *index) continue;
      gpu::GpuSample& s = out.gpus[i];
      s.lost = false;
      s.util_gpu_pct = Scaled<uint32_t>(g, "utilization", 1);
      s.mem_used_bytes = Scaled<uint64_t>(g, "memory_used", kMiB);
      s.mem_total_bytes = Scaled<uint64_t>(g, "memory_total", kMiB);
      s.power_mw = Scaled<uint32_t>(g, "power", 1000);
      s.temperature_c = Scaled<uint32_t>(g, "temperature", 1);
      break;
    }
  });
  return true;
}

bool LooksLikeSeedMonitorFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(64 * 1024, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  auto has = [&](std::string_view key) { return head.find(key) != std::string::npos; };
  return has("\"timestamp\"") && (has("\"multi_gpu_data\"") || has("\"gpu_index\"")) &&
         !has("\"traceEvents\"") && !has("\"ph\"");
}

}  // namespace stallscope::sample
