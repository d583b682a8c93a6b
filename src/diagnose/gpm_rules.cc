// GPM's say in the GPU rules (gpm_rules.h): NVML's utilization is the share of time any kernel
// ran; GPM's SM active is how much of the GPU the kernels filled, and its tensor pipes say
// whether the math runs on tensor cores (issue 28).
#include "diagnose/gpm_rules.h"

#include <algorithm>

#include <fmt/format.h>

#include "diagnose/rule_util.h"

namespace stallscope::diagnose {

using namespace rule_util;  // NOLINT: the rules' shared vocabulary

namespace {

constexpr const char* kGenericPrecision =
    "bf16 autocast (torch.autocast(\"cuda\", dtype=torch.bfloat16)) and TF32 matmuls "
    "(torch.set_float32_matmul_precision(\"high\")) (seed 001 T9, T13)";

std::string Metric(const GpuFacts& g, std::string_view name) {
  return fmt::format("gpu{}.{}", g.index, name);
}

}  // namespace

bool GpmSaysSmsBusy(const GpuFacts& g) {
  return g.sm_active && *g.sm_active >= T.gpm_sm_active_busy.value;
}

std::optional<Finding> UtilMisleadingByGpm(const Facts& /*c*/, const GpuFacts& g) {
  if (!g.sm_active || g.util_mean * 100.0 <= T.util_misleading_util.value) return std::nullopt;
  const double sm = *g.sm_active;
  if (sm >= T.gpm_sm_active_low.value) return std::nullopt;
  // Up to the bar of effective use the GPU had room; capped like the clock/power estimate.
  const double cost = std::clamp(1.0 - sm / T.gpm_sm_active_busy.value, 0.0, 0.5);
  Finding f = Make(FindingClass::kUtilMisleading, T.confidence_measured.value, cost,
                   fmt::format("GPU {} reports {:.0f}% utilization but its SMs are active {} of "
                               "the time (GPM): kernels too small to fill the GPU",
                               g.index, g.util_mean * 100.0, Pct(sm)));
  f.evidence.push_back(Ev(fmt::format("GPU {} utilization {:.0f}% (above {:.0f}%): some kernel "
                                      "ran, not how much of the GPU it used",
                                      g.index, g.util_mean * 100.0, T.util_misleading_util.value),
                          Metric(g, "util_mean_pct"), g.util_mean * 100.0, "%",
                          T.util_misleading_util.value));
  f.evidence.push_back(Ev(fmt::format("SM active {} (GPM, {} window(s) in the steady state; below "
                                      "{} is ineffective use, DCGM)",
                                      Pct(sm), g.gpm_windows, Pct(T.gpm_sm_active_low.value)),
                          Metric(g, "sm_active"), sm, "fraction", T.gpm_sm_active_low.value));
  if (g.sm_occupancy) {
    f.evidence.push_back(
        Ev(fmt::format("SM occupancy {} (warps resident of the maximum)", Pct(*g.sm_occupancy)),
           Metric(g, "sm_occupancy"), *g.sm_occupancy, "fraction"));
  }
  if (g.power_fraction) {
    f.evidence.push_back(Ev(fmt::format("power {} of limit", Pct(*g.power_fraction)),
                            Metric(g, "power_fraction"), *g.power_fraction, "fraction"));
  }
  Rec(f, 0,
      "confirm with torch.profiler: many short kernels with launch gaps, each using a few SMs "
      "(seed 001 T2)");
  Rec(f, 1,
      "fewer, bigger kernels: a larger batch, torch.compile(mode=\"reduce-overhead\") for CUDA "
      "graphs, fused kernels (seed 001 T15)");
  return f;
}

std::optional<std::string> PrecisionAdvice(const Facts& c, const GpuFacts& g) {
  if (!g.tensor_active) return std::string(kGenericPrecision);
  const double tensor = *g.tensor_active;
  if (tensor >= T.gpm_tensor_busy.value) return std::nullopt;  // already on tensor cores
  if (tensor >= T.gpm_tensor_idle.value || !g.sm_active ||
      *g.sm_active < T.gpm_sm_active_low.value) {
    return std::string(kGenericPrecision);
  }
  const double fp32 = g.fp32_active.value_or(0), fp16 = g.fp16_active.value_or(0);
  if (fp16 > fp32 && fp16 >= T.gpm_tensor_idle.value) {
    return fmt::format(
        "tensor cores idle ({} tensor, {} FP16 pipe, GPM): half-precision math runs on CUDA "
        "cores: matmul sizes multiple of 8, ops through cuBLAS/cuDNN (nn.Linear, matmul), "
        "not elementwise loops (seed 001 T9)",
        Pct(tensor), Pct(fp16));
  }
  const bool tf32_off = c.float32_matmul_precision == "highest";
  return fmt::format(
      "tensor cores idle ({} tensor{}, GPM): the matmuls run in FP32 on CUDA cores{}: "
      "torch.set_float32_matmul_precision(\"high\") for TF32, or bf16 autocast "
      "(torch.autocast(\"cuda\", dtype=torch.bfloat16)) (seed 001 T9, T13)",
      Pct(tensor), g.fp32_active ? fmt::format(", {} FP32 pipe", Pct(fp32)) : std::string(),
      tf32_off ? " (float32_matmul_precision is \"highest\": TF32 off)" : "");
}

void AddGpmEvidence(const GpuFacts& g, Finding& f) {
  if (g.sm_active) {
    f.evidence.push_back(Ev(fmt::format("SM active {} (GPM; {} or more is effective use)",
                                        Pct(*g.sm_active), Pct(T.gpm_sm_active_busy.value)),
                            Metric(g, "sm_active"), *g.sm_active, "fraction",
                            T.gpm_sm_active_busy.value));
  }
  if (g.tensor_active) {
    const bool idle = *g.tensor_active < T.gpm_tensor_idle.value;
    const bool busy = *g.tensor_active >= T.gpm_tensor_busy.value;
    f.evidence.push_back(Ev(fmt::format("tensor pipes active {} (GPM){}", Pct(*g.tensor_active),
                                        idle   ? ": the math is not on tensor cores"
                                        : busy ? ": the math is on tensor cores"
                                               : ""),
                            Metric(g, "tensor_active"), *g.tensor_active, "fraction",
                            idle ? T.gpm_tensor_idle.value : T.gpm_tensor_busy.value));
  }
  if (g.fp32_active && *g.fp32_active > 0) {
    f.evidence.push_back(Ev(fmt::format("FP32 pipe active {} (GPM)", Pct(*g.fp32_active)),
                            Metric(g, "fp32_active"), *g.fp32_active, "fraction"));
  }
}

}  // namespace stallscope::diagnose
