// CSV form of a recording (record --csv): one row per sample, host columns then gpuN_* columns.
// Process trees and sub-second buffers do not fit a flat row; use JSONL for those.

#include <fmt/format.h>

#include "base/units.h"
#include "sample/recording.h"

namespace stallscope::sample {
namespace {

template <typename T>
void Cell(std::string& out, const std::optional<T>& v) {
  out.push_back(',');
  if (!v) return;
  if constexpr (std::is_floating_point_v<T>) {
    fmt::format_to(std::back_inserter(out), "{:.1f}", *v);
  } else {
    fmt::format_to(std::back_inserter(out), "{}", *v);
  }
}

constexpr const char* kGpuColumns[] = {
    "utilization_pct", "memory_used_bytes", "power_mw", "temperature_c",
    "sm_clock_mhz",    "clock_event_mask",  "lost"};

}  // namespace

void AppendCsvHeader(const RecordingHeader& header, std::string& out) {
  out +=
      "timestamp,ts_ns,cpu_busy_pct,cpu_iowait_pct,mem_used_bytes,load1,disk_read_bps,"
      "disk_write_bps";
  for (size_t i = 0; i < header.gpus.size(); ++i) {
    for (const char* col : kGpuColumns)
      fmt::format_to(std::back_inserter(out), ",gpu{}_{}", i, col);
  }
}

void AppendCsvRow(const RecordingHeader& header, const Sample& s, std::string& out) {
  out += FormatIsoUtc(s.wall_ns);
  fmt::format_to(std::back_inserter(out), ",{}", s.mono_ns);
  const auto& h = s.host;
  Cell(out, h.cpu ? std::optional<double>(h.cpu->busy_pct) : std::nullopt);
  Cell(out, h.cpu ? std::optional<double>(h.cpu->iowait_pct) : std::nullopt);
  Cell(out, h.mem_used_bytes);
  Cell(out, h.load1);
  Cell(out, h.disk_read_bps);
  Cell(out, h.disk_write_bps);
  for (size_t i = 0; i < header.gpus.size(); ++i) {
    if (i >= s.gpus.size()) {
      out.append(std::size(kGpuColumns), ',');
      continue;
    }
    const auto& g = s.gpus[i];
    Cell(out, g.util_gpu_pct);
    Cell(out, g.mem_used_bytes);
    Cell(out, g.power_mw);
    Cell(out, g.temperature_c);
    Cell(out, g.sm_clock_mhz);
    Cell(out, g.clock_event_reasons);
    out += g.lost ? ",1" : ",0";
  }
}

}  // namespace stallscope::sample
