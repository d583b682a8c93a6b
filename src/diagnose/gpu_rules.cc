// The GPU rules of the verdict (README "The verdict"): throttling, misleading utilization, load
// imbalance, stragglers, small batches, memory pressure, and gpu_bound (the good case). Split
// from verdict_rules.cc; listed in Rules() there.
#include "diagnose/gpu_rules.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "analysis/phases.h"
#include "diagnose/gpm_rules.h"
#include "diagnose/rule_util.h"

namespace stallscope::diagnose {
namespace {

using namespace rule_util;  // NOLINT: the rules' shared vocabulary

// ---------------------------------------------------------------------------------------------
// gpu_bound (the good case; compute-bound on CPU-only runs)
// ---------------------------------------------------------------------------------------------

double ComputeShare(const Facts& c) {
  double share = 0;
  for (const auto& [name, s] : c.phase_share) {
    if (analysis::IsComputePhase(name)) share += s;
  }
  return share;
}

/// The fixes of a compute-bound CPU-only job, cheapest first.
void CpuComputeRecs(const Facts& c, Finding& f) {
  int64_t intra = 0;
  for (const auto& t : c.torch) intra = std::max(intra, t.intra_op_threads.value_or(0));
  auto procs = std::max<int64_t>(1, static_cast<int64_t>(c.torch.size()));
  int64_t fair = std::max<int64_t>(1, c.allowed_cpus / procs);
  if (intra > 0 && intra < fair) {
    Rec(f, 0,
        fmt::format("torch.set_num_threads({} → {}) ({} allowed)", intra, fair,
                    Cpus(c.allowed_cpus)));
  }
  Rec(f, 0,
      "bf16 autocast on CPU (torch.autocast(\"cpu\", dtype=torch.bfloat16)) where the CPU "
      "has AVX512-BF16/AMX (seed 001 T13)");
  Rec(f, 1, "fused kernels: torch.compile (seed 001 T15)");
  Rec(f, 2, "more cores, or a GPU");
}

/// "; the other 12% is waiting for data 7%, host work outside the phases 5%": the ledger's parts
/// other than compute, of at least 1% each, largest first; "" when they are less than that.
std::string RemainsText(const Facts& c, double work) {
  const analysis::StepLedger& j = c.ledger.job;
  std::vector<std::pair<analysis::LedgerPart, double>> rest;
  for (size_t i = 0; i < analysis::kLedgerParts; ++i) {
    const auto p = static_cast<analysis::LedgerPart>(i);
    if (p != analysis::LedgerPart::kCompute && j.parts[i] >= 0.01) rest.emplace_back(p, j.parts[i]);
  }
  if (rest.empty() || work >= 0.995) return "";
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out = fmt::format("; the other {} is", Pct(1.0 - std::min(1.0, work)));
  for (size_t i = 0; i < rest.size(); ++i) {
    out += fmt::format("{} {} {}", i == 0 ? "" : ",",
                       analysis::LedgerPartLabel(rest[i].first, c.compute_on_gpu),
                       Pct(rest[i].second));
  }
  return out;
}

/// The GPU with the lowest utilization (nullptr without GPUs).
const GpuFacts* WeakestGpu(const Facts& c) {
  const GpuFacts* g = nullptr;
  for (const auto& x : c.gpus) {
    if (!g || x.util_mean < g->util_mean) g = &x;
  }
  return g;
}

/// gpu_bound's evidence: the work's share and how it was measured, and a low clock or power.
void AddWorkEvidence(const Facts& c, double work, const GpuFacts* g, Finding& f) {
  const bool clock_low =
      g && g->sm_clock_fraction && *g->sm_clock_fraction < T.gpu_bound_clock.value;
  const bool power_low = g && g->power_fraction && *g->power_fraction < T.gpu_bound_power.value;
  const std::string bar = fmt::format("principal above {}, {}", Pct(T.gpu_bound_step_share.value),
                                      T.gpu_bound_step_share.cite());
  if (!c.has_gpu) {
    f.evidence.push_back(
        Ev(fmt::format("forward+backward+optimizer {} of step time ({})", Pct(work), bar),
           "ledger.compute", work, "fraction", T.gpu_bound_step_share.value));
    f.evidence.push_back(AllowedEvidence(c));
  } else if (c.compute_on_gpu) {
    f.evidence.push_back(Ev(fmt::format("forward, backward and optimizer on the GPU {} of the step "
                                        "(CUDA events; {})",
                                        Pct(work), bar),
                            "ledger.compute", work, "fraction", T.gpu_bound_step_share.value));
    f.evidence.push_back(Ev(fmt::format("the host waited for the GPU {} of the step outside the "
                                        "compute phases (in a sync, or loading ahead), and was in "
                                        "them {} of the step",
                                        Pct(c.gpu_moved_share), Pct(c.host_compute_share)),
                            "ledger.host_wait", c.gpu_moved_share, "fraction"));
    if (g) {
      f.evidence.push_back(Ev(fmt::format("NVML utilization {:.0f}% over the steady state (it "
                                          "samples and lags; the events time every step)",
                                          g->util_mean * 100.0),
                              "gpu.util_mean_pct", g->util_mean * 100.0, "%"));
    }
  } else {
    f.evidence.push_back(Ev(fmt::format("GPU utilization {:.0f}% (no CUDA-event times: NVML's "
                                        "share of time a kernel ran; {})",
                                        g->util_mean * 100.0, bar),
                            "gpu.util_mean_pct", g->util_mean * 100.0, "%",
                            T.gpu_bound_step_share.value * 100.0));
  }
  if (g && g->sm_clock_fraction) {
    f.evidence.push_back(
        Ev(fmt::format("SM clock {} of max ({} {})", Pct(*g->sm_clock_fraction),
                       clock_low ? "below" : "threshold", Pct(T.gpu_bound_clock.value)),
           "gpu.sm_clock_fraction", *g->sm_clock_fraction, "fraction", T.gpu_bound_clock.value));
  }
  if (g && g->power_fraction) {
    f.evidence.push_back(
        Ev(fmt::format("power {} of limit ({} {}){}", Pct(*g->power_fraction),
                       power_low ? "below" : "threshold", Pct(T.gpu_bound_power.value),
                       power_low ? ": the kernels do not fill the GPU" : ""),
           "gpu.power_fraction", *g->power_fraction, "fraction", T.gpu_bound_power.value));
  }
}

/// gpu_bound of a run at any share of the model's work (issue 39): the work's share of the step
/// (WorkShare), what the host did meanwhile, and what the rest of the step holds. A low clock or
/// power is evidence that the kernels do not fill the GPU, and what to do about it.
std::optional<Finding> GpuBoundOfRun(const Facts& c) {
  const double work = WorkShare(c);
  // Without steps only NVML's utilization measures the work.
  if (work <= 0 || (c.steps == 0 && !(c.has_gpu && !c.compute_on_gpu))) return std::nullopt;
  const GpuFacts* g = WeakestGpu(c);
  const bool clock_low =
      g && g->sm_clock_fraction && *g->sm_clock_fraction < T.gpu_bound_clock.value;
  const bool power_low = g && g->power_fraction && *g->power_fraction < T.gpu_bound_power.value;
  const bool all_known = g && g->sm_clock_fraction && g->power_fraction;
  const double level = !c.has_gpu ? T.confidence_strong.value
                       : clock_low || power_low || (!c.compute_on_gpu && !all_known)
                           ? T.confidence_fair.value
                           : T.confidence_measured.value;
  const std::string remains = RemainsText(c, work);
  std::string reason;
  if (!c.has_gpu) {
    reason = fmt::format(
        "compute-bound (CPU-only run): forward, backward and optimizer take {} of "
        "each step on {} allowed{}",
        Pct(work), Cpus(c.allowed_cpus), remains);
  } else if (c.compute_on_gpu) {
    reason = fmt::format(
        "CUDA events: the compute phases keep the GPU busy {} of each steady "
        "step: the GPU itself is the limit, and the host waits for it {} of the "
        "step{}",
        Pct(work), Pct(c.gpu_moved_share), remains);
  } else {
    reason = fmt::format(
        "GPU {} is busy {:.0f}% of the time{}{}: the GPU itself is the limit{}", g->index,
        g->util_mean * 100.0,
        g->sm_clock_fraction ? fmt::format(" at {} of max SM clock", Pct(*g->sm_clock_fraction))
                             : std::string(),
        g->power_fraction ? fmt::format(" and {} of its power limit", Pct(*g->power_fraction))
                          : std::string(),
        remains);
  }
  Finding f = Make(FindingClass::kGpuBound,
                   MarginConfidence(work, T.gpu_bound_step_share.value, level), work, reason);
  f.significant = work >= T.gpu_bound_step_share.value;
  AddWorkEvidence(c, work, g, f);
  if (!c.has_gpu) {
    CpuComputeRecs(c, f);
    return f;
  }
  if (g) AddGpmEvidence(*g, f);
  if (auto advice = g ? PrecisionAdvice(c, *g) : PrecisionAdvice(c, GpuFacts{})) Rec(f, 0, *advice);
  if (power_low || clock_low) {
    Rec(f, 1,
        "a larger batch, or fewer and bigger kernels (torch.compile, CUDA graphs): the GPU is "
        "busy but not full (seed 001 T15)");
  }
  Rec(f, 1,
      "fused kernels: F.scaled_dot_product_attention / FlashAttention, torch.compile (seed "
      "001 T14, T15)");
  Rec(f, 2, "a faster GPU, or more GPUs");
  SortRecs(f);
  return f;
}

/// gpu_bound of a profiler trace: its GPUs busy ≥ gpu_bound_util of the window.
std::optional<Finding> GpuBoundOnGpu(const Facts& c) {
  const GpuFacts* weakest = nullptr;
  bool all_known = true;
  for (const auto& g : c.gpus) {
    if (g.util_mean * 100.0 < T.gpu_bound_util.value) return std::nullopt;
    if (g.sm_clock_fraction && *g.sm_clock_fraction < T.gpu_bound_clock.value) return std::nullopt;
    if (g.power_fraction && *g.power_fraction < T.gpu_bound_power.value) return std::nullopt;
    // GPM: busy by NVML's count but the SMs mostly idle is util_misleading's, not the limit.
    if (g.sm_active && *g.sm_active < T.gpm_sm_active_low.value) return std::nullopt;
    all_known = all_known && g.sm_clock_fraction && g.power_fraction;
    if (!weakest || g.util_mean < weakest->util_mean) weakest = &g;
  }
  if (!weakest) return std::nullopt;
  double compute = ComputeShare(c);
  std::string clock = weakest->sm_clock_fraction
                          ? fmt::format(" at {} of max SM clock", Pct(*weakest->sm_clock_fraction))
                          : std::string();
  std::string power = weakest->power_fraction
                          ? fmt::format(" and {} of its power limit", Pct(*weakest->power_fraction))
                          : std::string();
  Finding f = Make(
      FindingClass::kGpuBound, all_known ? T.confidence_measured.value : T.confidence_fair.value,
      compute > 0 ? compute : weakest->util_mean,
      fmt::format("GPU {} is busy {:.0f}% of the time{}{}: the GPU itself is the limit",
                  weakest->index, weakest->util_mean * 100.0, clock, power));
  f.evidence.push_back(Ev(fmt::format("GPU utilization {:.0f}% (threshold {:.0f}%, seed 001 T1)",
                                      weakest->util_mean * 100.0, T.gpu_bound_util.value),
                          "gpu.util_mean_pct", weakest->util_mean * 100.0, "%",
                          T.gpu_bound_util.value));
  if (weakest->sm_clock_fraction) {
    f.evidence.push_back(Ev(
        fmt::format("SM clock {} of max (threshold {})", Pct(*weakest->sm_clock_fraction),
                    Pct(T.gpu_bound_clock.value)),
        "gpu.sm_clock_fraction", *weakest->sm_clock_fraction, "fraction", T.gpu_bound_clock.value));
  }
  if (weakest->power_fraction) {
    f.evidence.push_back(
        Ev(fmt::format("power {} of limit (threshold {})", Pct(*weakest->power_fraction),
                       Pct(T.gpu_bound_power.value)),
           "gpu.power_fraction", *weakest->power_fraction, "fraction", T.gpu_bound_power.value));
  }
  AddGpmEvidence(*weakest, f);
  if (auto advice = PrecisionAdvice(c, *weakest)) Rec(f, 0, *advice);
  Rec(f, 1,
      "fused kernels: F.scaled_dot_product_attention / FlashAttention, torch.compile (seed "
      "001 T14, T15)");
  Rec(f, 2, "a faster GPU, or more GPUs");
  return f;
}

std::optional<Finding> GpuBoundOnCpu(const Facts& c) {
  double compute = ComputeShare(c);
  double data = c.Share(kData);
  double other = c.Share(kOther);
  double limit = T.cpu_compute_other_max.value;
  bool syncs = other >= limit && c.host_syncs_per_step >= T.host_sync_per_step_low.value;
  if (c.steps == 0 || compute < T.cpu_compute_share.value || data >= limit || syncs) {
    return std::nullopt;
  }
  Finding f = Make(FindingClass::kGpuBound, T.confidence_strong.value, compute,
                   fmt::format("compute-bound (CPU-only run): forward, backward and optimizer take "
                               "{} of each step on {} allowed",
                               Pct(compute), Cpus(c.allowed_cpus)));
  f.evidence.push_back(Ev(fmt::format("forward+backward+optimizer {} of step time (threshold {})",
                                      Pct(compute), Pct(T.cpu_compute_share.value)),
                          "phase_share.compute", compute, "fraction", T.cpu_compute_share.value));
  f.evidence.push_back(Ev(
      fmt::format("data_loading {}, other {} (each below {})", Pct(data), Pct(other), Pct(limit)),
      "phase_share.data_loading", data, "fraction", limit));
  f.evidence.push_back(AllowedEvidence(c));
  CpuComputeRecs(c, f);
  return f;
}

}  // namespace

using namespace rule_util;  // NOLINT: the rules' shared vocabulary

// ---------------------------------------------------------------------------------------------
// GPU rules
// ---------------------------------------------------------------------------------------------

std::optional<Finding> ThrottledRule(const Facts& c) {
  const GpuFacts* worst = nullptr;
  for (const auto& g : c.gpus) {
    if (g.throttled_fraction > FadeIn(T.throttled_share.value) &&
        (!worst || g.throttled_fraction > worst->throttled_fraction)) {
      worst = &g;
    }
  }
  if (!worst) return std::nullopt;
  std::string reasons, counts;
  bool power = false, thermal = false, hw = false;
  for (const auto& [name, n] : worst->throttle_reasons) {
    reasons += fmt::format("{}{}", reasons.empty() ? "" : ", ", name);
    counts += fmt::format("{}{} in {} samples", counts.empty() ? "" : ", ", name, n);
    power = power || name == "sw_power_cap";
    thermal = thermal || name.find("thermal") != std::string::npos;
    hw = hw || name == "hw_slowdown" || name == "hw_power_brake";
  }
  if (reasons.empty()) reasons = "slowdown";
  double clock_loss =
      worst->sm_clock_fraction ? std::max(0.0, 1.0 - *worst->sm_clock_fraction) : 0.1;
  double cost = worst->throttled_fraction * std::max(0.05, clock_loss);
  std::string clock = worst->sm_clock_fraction
                          ? fmt::format(" (SM clock {} of max)", Pct(*worst->sm_clock_fraction))
                          : std::string();
  Finding f = Make(FindingClass::kGpuThrottled,
                   MarginConfidence(worst->throttled_fraction, T.throttled_share.value,
                                    T.confidence_strong.value),
                   cost,
                   fmt::format("GPU {} ran with {} clock-event reasons in {} of samples{}",
                               worst->index, reasons, Pct(worst->throttled_fraction), clock));
  f.significant = worst->throttled_fraction >= T.throttled_share.value;
  f.evidence.push_back(
      Ev(fmt::format("GPU {} throttled in {} of samples (threshold {}): {}", worst->index,
                     Pct(worst->throttled_fraction), Pct(T.throttled_share.value), counts),
         fmt::format("gpu{}.throttled_share", worst->index), worst->throttled_fraction, "fraction",
         T.throttled_share.value));
  if (power) {
    Rec(f, 0,
        "check the enforced power limit (nvidia-smi -q -d POWER); an admin may raise it "
        "with nvidia-smi -pl up to the default");
  }
  if (thermal) {
    Rec(f, 2,
        "improve cooling: fans, airflow, ambient temperature (nvidia-smi -q -d "
        "TEMPERATURE,PERFORMANCE; seed 001 U23)");
  }
  if (hw || (!power && !thermal)) {
    Rec(f, 2,
        "hardware slowdown: check the node's power supply and power-brake signal with the "
        "operator");
  }
  SortRecs(f);
  return f;
}

/// With CUDA events: they time the GPU busy through the step, which argues against "a trickle of
/// kernels" (the events' gpu_bound names a low power as evidence, with the same fixes). Issue 39:
/// the finding fades out as the events' busy share nears gpu_bound_util (half confident at it,
/// none from 95%) instead of vanishing at it, and it never outranks gpu_bound (verdict.cc).
std::optional<Finding> FadedByEvents(const Facts& c, std::optional<Finding> f) {
  if (!f || !c.gpu_busy_by_events) return f;
  const double idle = 1.0 - *c.gpu_busy_by_events, bar = 1.0 - T.gpu_bound_util.value / 100.0;
  if (idle <= FadeIn(bar)) return std::nullopt;
  f->confidence = MarginConfidence(idle, bar, f->confidence);
  f->significant = idle >= bar;
  return f;
}

std::optional<Finding> UtilMisleadingRule(const Facts& c) {
  for (const auto& g : c.gpus) {
    if (g.util_mean * 100.0 <= T.util_misleading_util.value) continue;
    // GPM measures what clock and power only suggest: its SM active decides either way.
    if (auto f = UtilMisleadingByGpm(c, g)) return FadedByEvents(c, std::move(f));
    if (g.sm_active) continue;
    // A low clock from throttling is gpu_throttled's finding, not a misleading util.
    bool clock_low = g.sm_clock_fraction && *g.sm_clock_fraction < T.util_misleading_clock.value &&
                     g.throttled_fraction <= T.throttled_share.value;
    bool power_low = g.power_fraction && *g.power_fraction < T.util_misleading_power.value;
    if (!clock_low && !power_low) continue;
    double cost = power_low ? 1.0 - *g.power_fraction / T.gpu_bound_power.value
                            : 1.0 - *g.sm_clock_fraction / T.gpu_bound_clock.value;
    cost = std::clamp(cost, 0.0, 0.5);
    std::string what;
    if (power_low) what += fmt::format("draws {} of its power limit", Pct(*g.power_fraction));
    if (g.sm_clock_fraction) {
      what += fmt::format("{}at {} of max SM clock", what.empty() ? "" : " ",
                          Pct(*g.sm_clock_fraction));
    }
    Finding f = Make(FindingClass::kUtilMisleading, T.confidence_guess.value, cost,
                     fmt::format("GPU {} reports {:.0f}% utilization but {}: a trickle of small "
                                 "kernels, not a busy GPU",
                                 g.index, g.util_mean * 100.0, what));
    f.evidence.push_back(Ev(fmt::format("GPU {} utilization {:.0f}% (above {:.0f}%)", g.index,
                                        g.util_mean * 100.0, T.util_misleading_util.value),
                            fmt::format("gpu{}.util_mean_pct", g.index), g.util_mean * 100.0, "%",
                            T.util_misleading_util.value));
    if (g.sm_clock_fraction) {
      f.evidence.push_back(
          Ev(fmt::format("SM clock {} of max (below {} is suspicious)", Pct(*g.sm_clock_fraction),
                         Pct(T.util_misleading_clock.value)),
             fmt::format("gpu{}.sm_clock_fraction", g.index), *g.sm_clock_fraction, "fraction",
             T.util_misleading_clock.value));
    }
    if (g.power_fraction) {
      f.evidence.push_back(
          Ev(fmt::format("power {} of limit (below {} is suspicious)", Pct(*g.power_fraction),
                         Pct(T.util_misleading_power.value)),
             fmt::format("gpu{}.power_fraction", g.index), *g.power_fraction, "fraction",
             T.util_misleading_power.value));
    }
    Rec(f, 0,
        "confirm with nvidia-smi dmon -s pucvmet -d 1 or torch.profiler: many short kernels "
        "with launch gaps (seed 001 T2)");
    Rec(f, 1,
        "fewer, bigger kernels: a larger batch, torch.compile(mode=\"reduce-overhead\") "
        "for CUDA graphs (seed 001 T15)");
    return FadedByEvents(c, std::move(f));
  }
  return std::nullopt;
}

std::optional<Finding> ImbalanceRule(const Facts& c) {
  if (c.gpus.size() < 2) return std::nullopt;
  // The CV thresholds are in percent (seed 002).
  double ucv = c.util_cv.value_or(0) * 100.0, mcv = c.memory_cv.value_or(0) * 100.0;
  double fair = T.balance_fair_cv.value;
  if (ucv <= FadeIn(fair) && mcv <= FadeIn(fair)) return std::nullopt;
  const GpuFacts* lo = &c.gpus.front();
  const GpuFacts* hi = &c.gpus.front();
  for (const auto& g : c.gpus) {
    if (g.util_mean < lo->util_mean) lo = &g;
    if (g.util_mean > hi->util_mean) hi = &g;
  }
  double worst_cv = std::max(ucv, mcv);
  std::string quality = worst_cv >= T.balance_poor_cv.value ? "Poor" : "Fair";
  // Synchronous data parallelism waits for the busiest GPU: the others idle for the difference.
  double cost = ucv > FadeIn(fair) && hi->util_mean > 0 ? 1.0 - MeanGpuUtil(c) / hi->util_mean : 0;
  std::string reason = ucv >= mcv
                           ? fmt::format(
                                 "GPU utilization varies {:.0f}% (CV, {}) across {} GPUs: GPU {} "
                                 "averages {:.0f}% vs {:.0f}% on GPU {}",
                                 ucv, quality, c.gpus.size(), lo->index, lo->util_mean * 100.0,
                                 hi->util_mean * 100.0, hi->index)
                           : fmt::format("GPU memory use varies {:.0f}% (CV, {}) across {} GPUs",
                                         mcv, quality, c.gpus.size());
  // From weak at Fair to strong at Poor, continuously; faded in below Fair.
  const double level =
      T.confidence_weak.value +
      (T.confidence_strong.value - T.confidence_weak.value) *
          std::clamp((worst_cv - fair) / (T.balance_poor_cv.value - fair), 0.0, 1.0);
  Finding f =
      Make(FindingClass::kLoadImbalance, MarginConfidence(worst_cv, fair, level), cost, reason);
  f.significant = worst_cv >= fair;
  f.evidence.push_back(
      Ev(fmt::format("utilization CV {:.1f}% (Fair ≥ {:.0f}%, Poor ≥ {:.0f}%, seed "
                     "002)",
                     ucv, fair, T.balance_poor_cv.value),
         "gpu.util_cv_pct", ucv, "%", fair));
  f.evidence.push_back(
      Ev(fmt::format("memory CV {:.1f}% (Fair ≥ {:.0f}%, Poor ≥ {:.0f}%, seed 002)", mcv, fair,
                     T.balance_poor_cv.value),
         "gpu.memory_cv_pct", mcv, "%", fair));
  Rec(f, 0,
      "give every rank the same work: DistributedSampler, the same batch_size per rank, "
      "drop_last=True");
  Rec(f, 1,
      "spread or remove rank-0-only side work (logging, eval, checkpointing) that the other "
      "ranks wait for");
  if (mcv > FadeIn(fair)) {
    Rec(f, 1,
        "the fullest GPU holds extra state (optimizer, gathered metrics): shard it (ZeRO / "
        "FSDP) or keep gathered tensors on the CPU");
  }
  return f;
}

namespace {

/// Per-step mean of each phase on each rank: name → (rank → seconds per step).
std::map<std::string, std::map<int32_t, double>> PerStepByRank(const analysis::PhaseAnalysis& r) {
  std::map<std::string, std::map<int32_t, double>> out;
  for (const auto& p : r.phases) {
    const auto* rs = RankOf(r, p.rank);
    if (rs && rs->count > 0) out[p.name][p.rank] = p.total_s / static_cast<double>(rs->count);
  }
  return out;
}

/// The phase in which `rank` spends the most more per step than the median of the other ranks
/// (comm_wait and "other" excluded: they are the consequence, not the cause). Empty name: none.
std::pair<std::string, double> ExcessPhase(
    const std::map<std::string, std::map<int32_t, double>>& per_step, int32_t rank) {
  std::pair<std::string, double> best{"", 0.0};
  for (const auto& [name, by_rank] : per_step) {
    if (name == analysis::kCommWaitPhase || name == kOther) continue;
    auto own = by_rank.find(rank);
    if (own == by_rank.end()) continue;
    std::vector<double> others;
    for (const auto& [r, v] : by_rank) {
      if (r != rank) others.push_back(v);
    }
    const double excess = own->second - Median(others);  // a phase only it has: all excess
    if (excess > best.second) best = {name, excess};
  }
  return best;
}

void StragglerRecommendations(Finding& f, int32_t rank, const std::string& phase, double excess,
                              const Facts& c) {
  if (phase == kData) {
    std::string workers = c.loader && c.loader->num_workers
                              ? fmt::format(" (num_workers={})", *c.loader->num_workers)
                              : std::string();
    Rec(f, 0,
        fmt::format("speed up rank {}'s input pipeline{}: more DataLoader workers or cheaper "
                    "per-sample work on that rank; every rank waits for it",
                    rank, workers));
    Rec(f, 1,
        fmt::format("check what makes rank {}'s data slower (+{} per step): a bigger or "
                    "costlier shard, slower storage, fewer CPUs on its node",
                    rank, Secs(excess)));
  } else if (!phase.empty()) {
    Rec(f, 1,
        fmt::format("find what rank {} does extra in {} (+{} per step): rank-specific side "
                    "work, a bigger data shard, slower storage",
                    rank, phase, Secs(excess)));
  }
  Rec(f, 2,
      fmt::format("check rank {}'s GPU and node: throttling, PCIe/NVLink width, other tenants",
                  rank));
}

/// Lockstep ranks (DDP): equal step times, so the straggler is the rank the others wait for in
/// all-reduce: the one with the least comm_wait.
std::optional<Finding> LockstepStraggler(const analysis::PhaseAnalysis& r, const Facts& c,
                                         const std::map<int32_t, double>& wait, bool gated) {
  if (wait.size() < 2) return std::nullopt;
  const auto fastest_wait = std::min_element(
      wait.begin(), wait.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  const int32_t slow = fastest_wait->first;
  std::vector<double> lost, steps;
  for (const auto& s : r.ranks) {
    if (s.count <= 0) continue;
    steps.push_back(s.mean_step_s);
    if (auto it = wait.find(s.rank); it != wait.end() && s.rank != slow) {
      lost.push_back(it->second - fastest_wait->second);
    }
  }
  const double step = Median(steps);
  if (lost.empty() || step <= 0) return std::nullopt;
  const double lost_s =
      std::accumulate(lost.begin(), lost.end(), 0.0) / static_cast<double>(lost.size());
  const double share = lost_s / step;
  if (share <= 0 || (gated && share <= FadeIn(T.straggler_wait_share.value))) return std::nullopt;
  auto per_step = PerStepByRank(r);
  auto [phase, excess] = ExcessPhase(per_step, slow);
  std::string where = phase.empty()
                          ? std::string()
                          : fmt::format("; its {} takes +{} per step", phase, Secs(excess));
  std::string who;
  if (lost.size() == 1) {
    for (const auto& [rank, w] : wait) {
      if (rank != slow) who = fmt::format("rank {} waits", rank);
    }
  } else {
    who = fmt::format("the other {} ranks wait", lost.size());
  }
  Finding f = Make(
      FindingClass::kStraggler,
      MarginConfidence(share, T.straggler_wait_share.value, T.confidence_strong.value), share,
      fmt::format("{} {} per step{} ({} of each step) in all-reduce for rank {}{}", who,
                  Secs(lost_s), lost.size() == 1 ? "" : " on average", Pct(share), slow, where));
  f.significant = share >= T.straggler_wait_share.value;
  for (const auto& [rank, w] : wait) {
    f.evidence.push_back(Ev(fmt::format("rank {} comm_wait {} per step{}", rank, Secs(w),
                                        rank == slow ? " (the least: the others wait for it)" : ""),
                            fmt::format("rank{}.comm_wait_s", rank), w, "s"));
  }
  f.evidence.push_back(Ev(fmt::format("time lost waiting for rank {}: {} of the step (threshold "
                                      "{}, {})",
                                      slow, Pct(share), Pct(T.straggler_wait_share.value),
                                      T.straggler_wait_share.cite()),
                          "straggler.wait_share", share, "fraction", T.straggler_wait_share.value));
  if (!phase.empty()) {
    f.evidence.push_back(
        Ev(fmt::format("rank {} {} {} per step vs {} on the median other rank", slow, phase,
                       Secs(per_step[phase][slow]), Secs(per_step[phase][slow] - excess)),
           fmt::format("rank{}.{}_excess_s", slow, phase), excess, "s"));
  }
  StragglerRecommendations(f, slow, phase, excess, c);
  return f;
}

}  // namespace

std::optional<Finding> StragglerRule(const Facts& c) {
  std::vector<const analysis::RankSteps*> ranks;
  for (const auto& s : c.phases.ranks) {
    if (s.count > 0 && s.mean_step_s > 0) ranks.push_back(&s);
  }
  if (ranks.size() < 2) return std::nullopt;
  auto per_step = PerStepByRank(c.phases);
  if (c.lockstep) {
    return LockstepStraggler(c.phases, c, per_step[std::string(analysis::kCommWaitPhase)], true);
  }
  std::vector<double> means;
  for (const auto* s : ranks) means.push_back(s->mean_step_s);
  double median = Median(means);
  const auto* slow = *std::max_element(
      ranks.begin(), ranks.end(),
      [](const auto* a, const auto* b) { return a->mean_step_s < b->mean_step_s; });
  double ratio = slow->mean_step_s / median;
  const double excess_ratio = T.straggler_ratio.value - 1.0;
  if (median <= 0 || ratio - 1.0 <= FadeIn(excess_ratio)) return std::nullopt;
  auto [phase, excess] = ExcessPhase(per_step, slow->rank);
  std::string where =
      phase.empty() ? std::string() : fmt::format("; its {} is +{} per step", phase, Secs(excess));
  Finding f = Make(FindingClass::kStraggler,
                   MarginConfidence(ratio - 1.0, excess_ratio, T.confidence_fair.value),
                   1.0 - median / slow->mean_step_s,
                   fmt::format("rank {} takes {} per step, {:.2f}× the median rank ({}){}",
                               slow->rank, Secs(slow->mean_step_s), ratio, Secs(median), where));
  f.significant = ratio >= T.straggler_ratio.value;
  f.evidence.push_back(Ev(fmt::format("rank {} mean step {} vs median {} over {} ranks (threshold "
                                      "{:.2f}×)",
                                      slow->rank, Secs(slow->mean_step_s), Secs(median),
                                      ranks.size(), T.straggler_ratio.value),
                          fmt::format("rank{}.step_ratio", slow->rank), ratio, "×",
                          T.straggler_ratio.value));
  StragglerRecommendations(f, slow->rank, phase, excess, c);
  return f;
}

std::optional<Finding> StragglerFinding(const Facts& c) {
  if (!c.lockstep) return StragglerRule(c);
  auto per_step = PerStepByRank(c.phases);
  return LockstepStraggler(c.phases, c, per_step[std::string(analysis::kCommWaitPhase)], false);
}

std::optional<Finding> SmallBatchRule(const Facts& c) {
  if (!c.has_gpu || c.Share(kData) >= T.data_bound_share.value) return std::nullopt;
  // CUDA events outrank NVML's average: a GPU busy for most of the step is no small batch.
  if (c.GpuBusyByEvents()) return std::nullopt;
  double util = MeanGpuUtil(c) * 100.0;  // the thresholds are in percent
  double mem = 0;
  const GpuFacts* fullest = nullptr;
  for (const auto& g : c.gpus) {
    if (!g.memory_used_fraction) return std::nullopt;
    if (*g.memory_used_fraction >= mem) mem = *g.memory_used_fraction, fullest = &g;
  }
  if (!fullest || util >= T.small_batch_util.value || mem >= T.small_batch_memory.value) {
    return std::nullopt;
  }
  double cost = 0.5 * std::max(0.0, 1.0 - util / T.gpu_bound_util.value);
  Finding f = Make(FindingClass::kSmallBatch, T.confidence_guess.value, cost,
                   fmt::format("GPU {} averages {:.0f}% utilization while using {} of its memory "
                               "({} of {} GiB), and the input pipeline is not the limit",
                               fullest->index, util, Pct(mem), GiB(fullest->memory_used_max_mib),
                               GiB(fullest->memory_total_mib.value_or(0))));
  f.evidence.push_back(
      Ev(fmt::format("GPU utilization {:.0f}% (below {:.0f}%)", util, T.small_batch_util.value),
         "gpu.util_mean_pct", util, "%", T.small_batch_util.value));
  f.evidence.push_back(Ev(
      fmt::format("peak GPU memory {} used (below {})", Pct(mem), Pct(T.small_batch_memory.value)),
      "gpu.memory_used_fraction", mem, "fraction", T.small_batch_memory.value));
  AddLowUtilEvidence(c, f);
  // Grow by powers of two while the peak stays under 80% of memory.
  int64_t factor = 2;
  while (mem * static_cast<double>(factor * 2) < 0.8 && factor < 16) factor *= 2;
  if (c.loader && c.loader->batch_size) {
    Rec(f, 1,
        fmt::format("batch_size={} → {} (peak memory {}: ~{}× headroom); scale the learning "
                    "rate and re-check convergence",
                    *c.loader->batch_size, *c.loader->batch_size * factor, Pct(mem), factor));
  } else {
    Rec(f, 1,
        fmt::format("a {}× bigger batch (peak memory {}); scale the learning rate and "
                    "re-check convergence",
                    factor, Pct(mem)));
  }
  Rec(f, 1, "cut per-kernel launch overhead: torch.compile, CUDA graphs (seed 001 T15)");
  return f;
}

std::optional<Finding> MemoryPressureRule(const Facts& c) {
  const GpuFacts* worst = nullptr;
  for (const auto& g : c.gpus) {
    if (g.memory_used_fraction && *g.memory_used_fraction > T.memory_pressure.value &&
        (!worst || *g.memory_used_fraction > *worst->memory_used_fraction)) {
      worst = &g;
    }
  }
  if (!worst) return std::nullopt;
  // Costs no time by itself (until it OOMs or the allocator retries): priced at 0.
  Finding f =
      Make(FindingClass::kGpuMemoryPressure, T.confidence_fair.value, 0,
           fmt::format("GPU {} peaked at {} of {} GiB ({}), close to out-of-memory", worst->index,
                       GiB(worst->memory_used_max_mib), GiB(worst->memory_total_mib.value_or(0)),
                       Pct(*worst->memory_used_fraction)));
  f.evidence.push_back(
      Ev(fmt::format("peak GPU memory {} used (threshold {})", Pct(*worst->memory_used_fraction),
                     Pct(T.memory_pressure.value)),
         fmt::format("gpu{}.memory_used_fraction", worst->index), *worst->memory_used_fraction,
         "fraction", T.memory_pressure.value));
  Rec(f, 0, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less fragmentation)");
  Rec(f, 1, "bf16 autocast or activation checkpointing to free memory (seed 001 T13, T17)");
  Rec(f, 1, "a smaller micro-batch with gradient accumulation");
  return f;
}

double WorkShare(const Facts& c) {
  if (c.has_gpu && !c.compute_on_gpu) {
    const GpuFacts* g = WeakestGpu(c);
    return g ? std::min(1.0, g->util_mean) : 0.0;
  }
  return c.ledger.job.Share(analysis::LedgerPart::kCompute);
}

std::optional<Finding> GpuBoundFinding(const Facts& c) {
  if (c.trace) return GpuBoundRule(c);
  return GpuBoundOfRun(c);
}

std::optional<Finding> GpuBoundRule(const Facts& c) {
  if (c.trace) return c.has_gpu ? GpuBoundOnGpu(c) : GpuBoundOnCpu(c);
  if (WorkShare(c) <= FadeIn(T.gpu_bound_step_share.value)) return std::nullopt;
  if (c.has_gpu && !c.compute_on_gpu) {
    // NVML's utilization says a kernel ran, not that the GPU worked: a low clock or power, or
    // GPM's SMs mostly idle, argue against it (util_misleading's finding, not this one).
    for (const auto& g : c.gpus) {
      if (g.sm_clock_fraction && *g.sm_clock_fraction < T.gpu_bound_clock.value)
        return std::nullopt;
      if (g.power_fraction && *g.power_fraction < T.gpu_bound_power.value) return std::nullopt;
      if (g.sm_active && *g.sm_active < T.gpm_sm_active_low.value) return std::nullopt;
    }
  }
  return GpuBoundOfRun(c);
}

}  // namespace stallscope::diagnose
