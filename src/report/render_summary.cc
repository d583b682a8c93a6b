#include <fmt/format.h>

#include "base/json_writer.h"
#include "base/thresholds.h"
#include "base/units.h"
#include "report/render.h"

namespace stallscope::report {
namespace {

std::string BalanceText(const analysis::Balance& b) {
  if (!b.cv_pct) return "n/a";
  return fmt::format("CV = {:.1f}% ({})", *b.cv_pct, BalanceClassName(*b.quality));
}

void WriteStats(JsonWriter& w, std::string_view key, const RunningStats& s, int decimals) {
  w.Key(key);
  if (s.count() == 0) {
    w.Null();
    return;
  }
  w.BeginObject()
      .Field("mean", s.mean(), decimals)
      .Field("std", s.stddev(), decimals)
      .Field("min", s.min(), decimals)
      .Field("max", s.max(), decimals)
      .Field("count", s.count())
      .EndObject();
}

void WriteBalance(JsonWriter& w, std::string_view key, const analysis::Balance& b) {
  w.Key(key).BeginObject().Field("cv_pct", b.cv_pct, 2).Key("quality");
  if (b.quality) {
    w.String(BalanceClassName(*b.quality));
  } else {
    w.Null();
  }
  w.EndObject();
}

std::string NextStep(const analysis::RecordingSummary& s) {
  double util_sum = 0;
  int n = 0;
  for (const auto& g : s.gpus) {
    if (g.util_pct.count() > 0) {
      util_sum += g.util_pct.mean();
      ++n;
    }
  }
  if (n > 0 && util_sum / n < kThresholds.low_util_warn.value) {
    return fmt::format(
        "Next: GPU utilization averaged {:.1f}%; run `stallscope run -- CMD` to see "
        "which phase keeps the GPUs waiting.",
        util_sum / n);
  }
  if (s.memory_balance.quality == BalanceClass::kPoor ||
      s.util_balance.quality == BalanceClass::kPoor) {
    return fmt::format(
        "Next: load is imbalanced (CV >= {:.0f}%); check the DDP configuration, the batch split "
        "across ranks and the data distribution.",
        kThresholds.balance_poor_cv.value);
  }
  return {};
}

}  // namespace

std::string RenderSummaryText(const analysis::RecordingSummary& s) {
  std::string out =
      fmt::format("{} samples over {} on {}\n", s.samples, FormatDurationNs(s.duration_ns),
                  s.hostname.empty() ? std::string("an unnamed host") : EscapeControl(s.hostname));
  for (const auto& w : s.warnings) out += "warning: " + EscapeControl(w) + "\n";
  out += "\nPer-GPU Breakdown:\n";
  if (s.gpus.empty()) {
    out += fmt::format("    (no GPUs{})\n",
                       s.gpu_note.empty() ? "" : ": " + EscapeControl(s.gpu_note));
  }
  for (const auto& g : s.gpus) {
    std::string mem = g.memory_used_mib.count() > 0
                          ? fmt::format("{:.1f} MB (±{:.1f})", g.memory_used_mib.mean(),
                                        g.memory_used_mib.stddev())
                          : std::string("n/a");
    std::string util = g.util_pct.count() > 0 ? fmt::format("util {:5.1f}% (±{:4.1f})",
                                                            g.util_pct.mean(), g.util_pct.stddev())
                                              : std::string("util n/a");
    std::string extra;
    if (g.power_w.count() > 0) extra += fmt::format("  power {:.1f} W", g.power_w.mean());
    if (g.lost_samples > 0) extra += fmt::format("  LOST in {} samples", g.lost_samples);
    if (g.throttled_samples > 0)
      extra += fmt::format("  throttled in {} samples", g.throttled_samples);
    if (g.gpm_sm_active_pct.count() > 0) {
      extra += fmt::format("  SM active {:.0f}%", g.gpm_sm_active_pct.mean());
      if (g.gpm_tensor_active_pct.count() > 0)
        extra += fmt::format(", tensor {:.0f}%", g.gpm_tensor_active_pct.mean());
      extra += " (GPM)";
    }
    out += fmt::format("    GPU {}: {:<22} {}{}\n", g.index, mem, util, extra);
  }
  if (!s.gpus.empty()) {
    out += fmt::format("    Total:  {:.1f} MB\n", s.total_memory_used_mib);
    out += fmt::format("    Balance: {}  (memory)\n", BalanceText(s.memory_balance));
    out += fmt::format("    Balance: {}  (utilization)\n", BalanceText(s.util_balance));
  }
  out += "\nHost:\n";
  if (s.cpu_busy_pct.count() > 0) {
    out += fmt::format("    CPU busy {:.1f}% (±{:.1f}), iowait {:.1f}%\n", s.cpu_busy_pct.mean(),
                       s.cpu_busy_pct.stddev(), s.cpu_iowait_pct.mean());
  }
  if (s.mem_used_bytes.count() > 0) {
    out += fmt::format("    RAM used {:.1f} GiB (peak {:.1f} GiB)\n",
                       s.mem_used_bytes.mean() / kGiB, s.mem_used_bytes.max() / kGiB);
  }
  if (s.exit_code) out += fmt::format("    command exit code {}\n", *s.exit_code);
  if (s.cpu_busy_pct.count() == 0 && s.mem_used_bytes.count() == 0 && !s.exit_code) {
    out += "    (not in the recording)\n";
  }
  std::string next = NextStep(s);
  if (!next.empty()) out += "\n" + next + "\n";
  return out;
}

std::string RenderSummaryJson(const analysis::RecordingSummary& s) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject()
      .Field("schema_version", 1)
      .Field("hostname", s.hostname)
      .Field("samples", s.samples)
      .Field("duration_ns", s.duration_ns);
  w.Key("gpus").BeginArray();
  for (const auto& g : s.gpus) {
    w.BeginObject().Field("gpu_index", g.index).Field("gpu_name", g.name);
    w.Field("samples", g.samples).Field("lost_samples", g.lost_samples);
    w.Field("throttled_samples", g.throttled_samples);
    w.Field("memory_total_mib", g.memory_total_mib, 1);
    WriteStats(w, "memory_used_mib", g.memory_used_mib, 1);
    WriteStats(w, "utilization_pct", g.util_pct, 1);
    WriteStats(w, "utilization_fine_pct", g.util_fine_pct, 1);
    WriteStats(w, "power_w", g.power_w, 1);
    WriteStats(w, "temperature_c", g.temperature_c, 1);
    WriteStats(w, "sm_clock_mhz", g.sm_clock_mhz, 0);
    WriteStats(w, "gpm_sm_active_pct", g.gpm_sm_active_pct, 1);
    WriteStats(w, "gpm_sm_occupancy_pct", g.gpm_sm_occupancy_pct, 1);
    WriteStats(w, "gpm_tensor_active_pct", g.gpm_tensor_active_pct, 1);
    WriteStats(w, "gpm_dram_active_pct", g.gpm_dram_active_pct, 1);
    WriteStats(w, "gpm_fp32_active_pct", g.gpm_fp32_active_pct, 1);
    WriteStats(w, "gpm_fp16_active_pct", g.gpm_fp16_active_pct, 1);
    w.EndObject();
  }
  w.EndArray();
  w.Field("total_memory_used_mib", s.total_memory_used_mib, 1);
  WriteBalance(w, "memory_balance", s.memory_balance);
  WriteBalance(w, "utilization_balance", s.util_balance);
  w.Key("host").BeginObject();
  WriteStats(w, "cpu_busy_pct", s.cpu_busy_pct, 1);
  WriteStats(w, "cpu_iowait_pct", s.cpu_iowait_pct, 1);
  WriteStats(w, "mem_used_bytes", s.mem_used_bytes, 0);
  w.EndObject();
  w.Field("exit_code", s.exit_code);
  w.FieldArray("warnings", s.warnings).EndObject();
  out += "\n";
  return out;
}

}  // namespace stallscope::report
