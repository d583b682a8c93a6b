#include <algorithm>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "base/units.h"
#include "report/render.h"
#include "report/top_screen.h"

namespace stallscope::report {
namespace {

std::string PctCell(const std::optional<uint32_t>& pct) {
  return pct ? FormatPercent(*pct / 100.0, 0) : std::string("n/a");
}

std::string MemCell(const gpu::GpuSample& g) {
  if (!g.mem_used_bytes || !g.mem_total_bytes || *g.mem_total_bytes == 0) return "n/a";
  double used = static_cast<double>(*g.mem_used_bytes) / kGiB;
  double total = static_cast<double>(*g.mem_total_bytes) / kGiB;
  return fmt::format("{:.1f}/{:.1f} GiB ({:.0f}%)", used, total, used / total * 100);
}

std::string PowerCell(const gpu::GpuSample& g) {
  if (!g.power_mw) return "n/a";
  if (!g.power_limit_mw) return fmt::format("{:.0f} W", *g.power_mw / 1000.0);
  return fmt::format("{:.0f}/{:.0f} W", *g.power_mw / 1000.0, *g.power_limit_mw / 1000.0);
}

std::string ThrottleCell(const gpu::GpuSample& g) {
  if (!g.clock_event_reasons) return "n/a";
  std::string out;
  for (const auto& name : gpu::ClockEventReasonNames(*g.clock_event_reasons)) {
    if (name == "gpu_idle") continue;  // idle is not a slowdown
    if (!out.empty()) out += ",";
    out += name;
  }
  return out.empty() ? "-" : out;
}

std::string GpmCell(const std::optional<double>& pct) {
  return pct ? FormatPercent(*pct / 100.0, 0) : std::string("n/a");
}

std::string GpuTable(const sample::RecordingHeader& header, const sample::Sample& s) {
  // GPM columns only where a GPU has them (Hopper and later): elsewhere they would all be n/a.
  const bool gpm = std::any_of(s.gpus.begin(), s.gpus.end(),
                               [](const gpu::GpuSample& g) { return !g.lost && g.gpm; });
  std::string out = fmt::format("{:>3}  {:<24} {:>5} {:>6}", "GPU", "NAME", "UTIL", "MEMBW");
  if (gpm) out += fmt::format(" {:>6} {:>6} {:>5}", "SM ACT", "TENSOR", "DRAM");
  out += fmt::format("  {:<23} {:<11} {:>5} {:>9}  {}\n", "MEMORY", "POWER", "TEMP", "SM CLOCK",
                     "THROTTLE");
  for (size_t i = 0; i < s.gpus.size(); ++i) {
    const auto& g = s.gpus[i];
    // Escaped before eliding, so the column is measured on what the terminal shows.
    const std::string name =
        Elide(EscapeControl(i < header.gpus.size() ? header.gpus[i].name : "?"), 24);
    if (g.lost) {
      out += fmt::format("{:>3}  {:<24} LOST: the GPU stopped answering\n", i, name);
      continue;
    }
    std::string temp = g.temperature_c ? fmt::format("{}C", *g.temperature_c) : "n/a";
    std::string clock = g.sm_clock_mhz ? fmt::format("{} MHz", *g.sm_clock_mhz) : "n/a";
    out += fmt::format("{:>3}  {:<24} {:>5} {:>6}", i, name, PctCell(g.util_gpu_pct),
                       PctCell(g.util_mem_pct));
    if (gpm) {
      const gpu::GpmMetrics none;
      const gpu::GpmMetrics& x = g.gpm ? *g.gpm : none;
      out += fmt::format(" {:>6} {:>6} {:>5}", GpmCell(x.sm_active_pct),
                         GpmCell(x.tensor_active_pct), GpmCell(x.dram_active_pct));
    }
    out += fmt::format("  {:<23} {:<11} {:>5} {:>9}  {}\n", MemCell(g), PowerCell(g), temp, clock,
                       ThrottleCell(g));
  }
  for (const auto& note : GpmNotes(header, s)) out += fmt::format("GPM   {}\n", note);
  return out;
}

std::string HostLines(const host::HostSample& h) {
  std::string out;
  if (h.cpu) {
    out += fmt::format(
        "CPU   {:5.1f}%  user {:.1f}%  sys {:.1f}%  iowait {:.1f}%  steal {:.1f}%  ({} CPUs)\n",
        h.cpu->busy_pct, h.cpu->user_pct, h.cpu->system_pct, h.cpu->iowait_pct, h.cpu->steal_pct,
        h.cpu_count);
  } else {
    out += fmt::format("CPU   n/a (needs two readings)  ({} CPUs)\n", h.cpu_count);
  }
  if (h.mem_used_bytes && h.mem_total_bytes && *h.mem_total_bytes > 0) {
    double used = static_cast<double>(*h.mem_used_bytes),
           total = static_cast<double>(*h.mem_total_bytes);
    out += fmt::format("RAM   {:.1f}/{:.1f} GiB ({:.1f}%)", used / kGiB, total / kGiB,
                       used / total * 100);
  }
  if (h.load1)
    out += fmt::format("  load {:.2f} {:.2f} {:.2f}", *h.load1, h.load5.value_or(0),
                       h.load15.value_or(0));
  if (h.disk_read_bps || h.disk_write_bps) {
    out += fmt::format("  disk read {}/s write {}/s",
                       FormatBytes(static_cast<double>(h.disk_read_bps.value_or(0))),
                       FormatBytes(static_cast<double>(h.disk_write_bps.value_or(0))));
  }
  out += "\n";
  std::string psi;
  auto add_psi = [&](const char* name, const std::optional<host::Pressure>& p) {
    if (p) psi += fmt::format("  {} {:.1f}%", name, p->some_avg10_pct);
  };
  add_psi("cpu", h.psi_cpu);
  add_psi("io", h.psi_io);
  add_psi("memory", h.psi_memory);
  if (!psi.empty()) out += "PSI  " + psi + "   (some, avg10)\n";
  std::string limits;
  if (h.cgroup_cpu_quota_cpus)
    limits += fmt::format("  cpu quota {:.2f} CPUs", *h.cgroup_cpu_quota_cpus);
  if (h.cgroup_mem_limit_bytes)
    limits +=
        fmt::format("  mem limit {}", FormatBytes(static_cast<double>(*h.cgroup_mem_limit_bytes)));
  if (h.shm_total_bytes) {
    limits += fmt::format("  /dev/shm {} of {}",
                          FormatBytes(static_cast<double>(h.shm_used_bytes.value_or(0))),
                          FormatBytes(static_cast<double>(*h.shm_total_bytes)));
  }
  if (!limits.empty()) out += "LIMIT" + limits + "\n";
  return out;
}

}  // namespace

std::string RenderTopText(const sample::RecordingHeader& header, const sample::Sample& s) {
  std::string out = fmt::format("stallscope top  {}  {}\n", EscapeControl(header.hostname),
                                FormatIsoUtc(s.wall_ns));
  if (s.gpus.empty()) {
    out += header.gpu_note.empty() ? "GPU   none found\n"
                                   : fmt::format("GPU   {}\n", EscapeControl(header.gpu_note));
  } else {
    out += GpuTable(header, s);
  }
  out += HostLines(s.host);
  return out;
}

std::string RenderTopJson(const sample::RecordingHeader& header, const sample::Sample& s) {
  // The snapshot is a recording header and one sample under stable keys: one schema to learn.
  std::string out =
      "{\"schema_version\":" + std::to_string(sample::kRecordingSchemaVersion) + ",\"header\":";
  sample::AppendHeaderJson(header, out);
  out += ",\"sample\":";
  sample::AppendSampleJson(header, s, out);
  out += "}\n";
  return out;
}

std::string RenderStatusLine(const sample::Sample& s) {
  std::string out;
  bool several = s.gpus.size() > 1;
  for (size_t i = 0; i < s.gpus.size(); ++i) {
    const auto& g = s.gpus[i];
    std::string label = several ? fmt::format("GPU{}", i) : "GPU";
    if (g.lost) {
      out += fmt::format("{}: LOST | ", label);
      continue;
    }
    out += fmt::format("{}: {} | ", label,
                       g.util_gpu_pct ? fmt::format("{}%", *g.util_gpu_pct) : "n/a");
    if (g.mem_used_bytes && g.mem_total_bytes && *g.mem_total_bytes > 0) {
      double used = static_cast<double>(*g.mem_used_bytes) / kGiB;
      double total = static_cast<double>(*g.mem_total_bytes) / kGiB;
      out += fmt::format("VRAM{}:{:.1f}/{:.1f}GB({:.1f}%) | ", several ? std::to_string(i) : "",
                         used, total, used / total * 100);
    }
  }
  if (s.gpus.empty()) out += "GPU: n/a | ";
  const auto& h = s.host;
  out += h.cpu ? fmt::format("CPU: {:.1f}%", h.cpu->busy_pct) : std::string("CPU: n/a");
  if (h.mem_used_bytes && h.mem_total_bytes && *h.mem_total_bytes > 0) {
    double used = static_cast<double>(*h.mem_used_bytes) / kGiB;
    double total = static_cast<double>(*h.mem_total_bytes) / kGiB;
    out += fmt::format(" | RAM:{:.1f}/{:.1f}GB({:.1f}%)", used, total, used / total * 100);
  }
  return out;
}

std::string RenderLowUtilWarning(double util_pct, size_t window) {
  // Seed 004's warning and its checklist, in the order that costs least to try.
  return fmt::format(
      "WARNING: LOW GPU UTILIZATION ({:.1f}% over the last {} samples). Possible bottlenecks:\n"
      "   - the input pipeline: check DataLoader num_workers, prefetch_factor, pin_memory\n"
      "   - batch size too small for the GPU (check VRAM headroom)\n"
      "   - host syncs or logging every step; run `stallscope run -- CMD` to time the phases\n",
      util_pct, window);
}

}  // namespace stallscope::report
