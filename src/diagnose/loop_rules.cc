// The training loop's rules of the verdict (README "The verdict"): host syncs and per-step
// logging, and periodic side work (checkpointing, sampling, eval). Split from verdict_rules.cc;
// listed in Rules() there.
#include "diagnose/loop_rules.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "analysis/detect.h"
#include "analysis/phases.h"
#include "diagnose/rule_util.h"
#include "diagnose/trace_rules.h"

namespace stallscope::diagnose {
namespace {

using namespace rule_util;  // NOLINT: the rules' shared vocabulary

constexpr std::string_view kAsyncCheckpoint =
    "async checkpointing: torch.distributed.checkpoint.async_save, or copy the state_dict to CPU "
    "and torch.save it on a background thread";

/// "40 eval forwards", "1 checkpointing", "3 forward_pass" for `n` extra instances of `phase`.
std::string InstancesText(const std::string& phase, double n) {
  const auto k = static_cast<int64_t>(std::llround(n));
  if (phase == "eval_forward") return Plural(k, "eval forward", "eval forwards");
  if (phase == "checkpointing") return Plural(k, "checkpoint save", "checkpoint saves");
  return fmt::format("{}× {}", k, phase);
}

/// What an occurrence of `g` holds beyond an ordinary step (issue 26: periodic work named by
/// its content, not "other"): "40 eval forwards (52 ms) + 0.11 s host work (sync at
/// sample.py:91)". The phases that took a tenth of the extra time or more (or ran extra
/// instances), largest first; the host-sync sites first seen inside one of its occurrences; "".
std::string PeriodicContent(const analysis::PeriodicPhase& g, const Facts& c) {
  std::vector<std::pair<std::string, double>> phases(g.extra_phase_s.begin(),
                                                     g.extra_phase_s.end());
  for (const auto& [name, n] : g.extra_phase_n) {
    if (!g.extra_phase_s.count(name) && n >= 0.5) phases.emplace_back(name, 0.0);
  }
  std::stable_sort(phases.begin(), phases.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  int parts = 0;
  bool only_own = true;  // the only part is the group's own phase's time: its name says it all
  for (const auto& [name, s] : phases) {
    auto n = g.extra_phase_n.find(name);
    const bool instances = n != g.extra_phase_n.end() && n->second >= 0.5;
    if (name == kData || (!instances && s < 0.1 * g.extra_s_each)) continue;
    ++parts;
    only_own = only_own && name == g.phase && !instances;
    std::string part;
    if (name == kOther) {
      part = Secs(s) + " host work";
    } else if (instances) {
      part = InstancesText(name, n->second) + (s > 0 ? fmt::format(" ({})", Secs(s)) : "");
    } else {
      part = fmt::format("{} {}", name, Secs(s));
    }
    out += (out.empty() ? "" : " + ") + part;
  }
  std::string sites;
  int shown = 0;
  for (const auto& site : c.sync_site_rows) {
    if (site.rank != g.rank || shown == 2) continue;
    const bool inside = std::any_of(g.windows.begin(), g.windows.end(), [&](const auto& w) {
      return site.first_ts_ns >= w.first && site.first_ts_ns <= w.second;
    });
    if (!inside) continue;
    const std::string& file = site.user_file.empty() ? site.file : site.user_file;
    const int64_t line = site.user_file.empty() ? site.line : site.user_line;
    const size_t slash = file.rfind('/');
    sites += fmt::format("{}{}:{}", sites.empty() ? "" : ", ",
                         slash == std::string::npos ? file : file.substr(slash + 1), line);
    ++shown;
  }
  if (parts == 1 && only_own && g.phase != kOther) out = g.phase;
  if (!sites.empty()) {
    out += fmt::format(" (sync{} at {})", shown == 1 ? "" : "s", sites);
  } else {
    double syncs = 0;
    for (const auto& [name, n] : g.extra_counters) {
      if (name.starts_with("host_sync")) syncs += n;
    }
    if (syncs >= 0.5)
      out += fmt::format(" + {}", Plural(std::llround(syncs), "host sync", "host syncs"));
  }
  return out;
}

void PeriodicRecs(const analysis::PeriodicPhase& g, int64_t ranks, Finding& f) {
  std::string interval = g.every_steps > 0 ? fmt::format("every {} steps", g.every_steps)
                                           : std::string("at its current interval");
  std::string doubled = g.every_steps > 0 ? fmt::format("every {} steps", 2 * g.every_steps)
                                          : std::string("half as often");
  auto n = [&g](const char* phase) {
    auto it = g.extra_phase_n.find(phase);
    return it == g.extra_phase_n.end() ? 0.0 : it->second;
  };
  if (g.phase == "checkpointing" || (g.phase == kOther && n("checkpointing") >= 0.5)) {
    Rec(f, 0,
        fmt::format("checkpoint {} instead of {} (halves its {} of wall time)", doubled, interval,
                    Pct(g.share_of_wall)));
    Rec(f, 1, std::string(kAsyncCheckpoint));
    if (ranks > 1) Rec(f, 1, "save from rank 0 only (or shard the save across ranks)");
  } else if (g.phase == "eval_forward" || g.phase == "sampling" || g.phase == "evaluation" ||
             n("eval_forward") >= 0.5) {
    Rec(f, 0,
        fmt::format("sample/evaluate {} instead of {} (halves its {} of wall time)", doubled,
                    interval, Pct(g.share_of_wall)));
    Rec(f, 1,
        "move sampling/eval off the critical path: a separate job on saved checkpoints, or "
        "on fewer ranks");
  } else {
    Rec(f, 0, fmt::format("run the {} work {} instead of {}", g.phase, doubled, interval));
    if (g.phase == kOther) {
      Rec(f, 1,
          "name the periodic work outside any phase with stallscope.phase(...) to see what "
          "it is (logging? eval?)");
    } else {
      Rec(f, 1,
          fmt::format("move {} off the critical path (a background thread or a separate "
                      "job)",
                      g.phase));
    }
  }
}

}  // namespace

using namespace rule_util;  // NOLINT: the rules' shared vocabulary

// ---------------------------------------------------------------------------------------------
// host_sync_or_logging
// ---------------------------------------------------------------------------------------------

std::optional<Finding> HostSyncRule(const Facts& c) {
  // A GPU timeline shows the syncs' effect directly: the idle they cause.
  if (c.trace && c.trace->gpu_devices > 0) return TraceSyncRule(c);
  const double other = c.Share(kOther), syncs = c.host_syncs_per_step;
  const bool with_time =
      other > FadeIn(T.host_sync_other_share.value) && syncs >= T.host_sync_per_step_low.value;
  if (c.steps == 0 || !(with_time || syncs >= T.host_sync_per_step_high.value)) return std::nullopt;
  return HostSyncFinding(c);
}

std::optional<Finding> HostSyncFinding(const Facts& c) {
  double other = c.Share(kOther);
  double syncs = c.host_syncs_per_step;
  double confidence =
      MarginConfidence(other, T.host_sync_other_share.value, T.confidence_pattern.value);
  if (syncs >= T.host_sync_per_step_high.value)
    confidence = std::max(confidence, T.confidence_weak.value);
  Finding f = Make(FindingClass::kHostSyncOrLogging, confidence, other,
                   fmt::format("{} of each step is spent outside forward/backward/optimizer/data "
                               "with {:.1f} host syncs (.item/.cpu) per step",
                               Pct(other), syncs));
  f.significant =
      other >= T.host_sync_other_share.value || syncs >= T.host_sync_per_step_high.value;
  f.evidence.push_back(ShareEvidence(c, kOther, T.host_sync_other_share));
  f.evidence.push_back(
      Ev(fmt::format("{:.1f} host syncs per step (threshold {:.0f} with time "
                     "outside phases, or {:.0f})",
                     syncs, T.host_sync_per_step_low.value, T.host_sync_per_step_high.value),
         "host_syncs_per_step", syncs, "per step", T.host_sync_per_step_low.value));
  std::vector<std::pair<std::string, double>> top(c.host_syncs_by_counter.begin(),
                                                  c.host_syncs_by_counter.end());
  std::stable_sort(top.begin(), top.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string counters;
  for (const auto& [name, n] : top) {
    counters += fmt::format("{}{} {:.1f}/step", counters.empty() ? "" : ", ", name, n);
  }
  // Log every N steps: the smallest usual interval that leaves < 1% of the step to logging.
  int64_t every = 100;
  for (int64_t n : {10, 20, 50, 100}) {
    if (other / static_cast<double>(n) < T.logging_residual_share.value) {
      every = n;
      break;
    }
  }
  Rec(f, 1,
      fmt::format("log every {} steps instead of every step (cuts the {} to ≈ {})", every,
                  Pct(other), Pct(other / static_cast<double>(every))));
  Rec(f, 1,
      "accumulate metrics on the device (loss_sum += loss.detach()) and sync once per log "
      "interval");
  if (!counters.empty()) {
    std::string sites;
    for (size_t i = 0; i < c.sync_sites.size() && i < 3; ++i) {
      sites += fmt::format("{}{}", i == 0 ? " at " : ", ", c.sync_sites[i]);
    }
    Rec(f, 1, fmt::format("avoid .item()/.cpu()/.numpy() in the step loop: {}{}", counters, sites));
  }
  auto per_step = [&](const char* name) {
    auto it = c.host_syncs_by_counter.find(name);
    return it == c.host_syncs_by_counter.end() ? 0.0 : it->second;
  };
  if (per_step("host_sync.copy_h2d") > 0) {
    Rec(f, 0,
        "copy batches without blocking: DataLoader(pin_memory=True) and "
        ".to(device, non_blocking=True)");
  }
  if (per_step("host_sync.synchronize") > 0 || per_step("host_sync.empty_cache") > 0) {
    Rec(f, 0,
        "remove torch.cuda.synchronize() / torch.cuda.empty_cache() from the step loop (keep "
        "them for timing code you turn on deliberately)");
  }
  SortRecs(f);
  return f;
}

// ---------------------------------------------------------------------------------------------
// periodic_side_work
// ---------------------------------------------------------------------------------------------

std::optional<Finding> PeriodicRule(const Facts& c) {
  // The loader rules own data_loading spikes (epoch starts, prefetch).
  std::map<std::string, analysis::PeriodicPhase> by_phase;
  for (auto& g : analysis::FindPeriodicPhases(c.phases)) {
    // Slow forward/backward/optimizer steps are noise or contention, not side work.
    // comm_wait in turn is a rank waiting for another's side work: the straggler's, not side work.
    bool core = analysis::IsComputePhase(g.phase) || g.phase == analysis::kCommWaitPhase;
    if (g.phase == kData || core || g.share_of_wall <= FadeIn(T.periodic_share.value)) continue;
    auto it = by_phase.find(g.phase);
    if (it == by_phase.end() || g.share_of_wall > it->second.share_of_wall) {
      by_phase[g.phase] = std::move(g);
    }
  }
  if (by_phase.empty()) return std::nullopt;
  std::vector<const analysis::PeriodicPhase*> groups;
  double cost = 0;
  for (const auto& [name, g] : by_phase) {
    groups.push_back(&g);
    cost += g.share_of_wall;
  }
  std::stable_sort(groups.begin(), groups.end(), [](const auto* a, const auto* b) {
    return a->share_of_wall > b->share_of_wall;
  });
  auto describe = [&c](const analysis::PeriodicPhase& g) {
    std::string when = g.every_steps > 0 ? fmt::format("every {} steps", g.every_steps)
                                         : fmt::format("at {} irregular steps", g.occurrences);
    const std::string content = PeriodicContent(g, c);
    return fmt::format("{}: {}, +{} each, {} of wall time", when,
                       content.empty() ? g.phase : content, Secs(g.extra_s_each),
                       Pct(g.share_of_wall));
  };
  const auto& top = *groups.front();
  Finding f = Make(
      FindingClass::kPeriodicSideWork,
      MarginConfidence(cost, T.periodic_share.value,
                       top.every_steps > 0 ? T.confidence_pattern.value : T.confidence_weak.value),
      cost,
      fmt::format("{} steps are slow in turn ({})", Plural(top.occurrences, "of the", "of the"),
                  describe(top)));
  f.significant = cost >= T.periodic_share.value;
  // One sentence: "every 20 steps: checkpointing, +0.9 s each, 21% of wall time".
  f.reason = fmt::format("{}: {}", FindingClassName(f.cls), describe(top));
  for (const auto* g : groups) {
    f.evidence.push_back(Ev(fmt::format("{} (rank {}, {} occurrences; threshold {})", describe(*g),
                                        g->rank, g->occurrences, Pct(T.periodic_share.value)),
                            fmt::format("periodic.{}.share_of_wall", g->phase), g->share_of_wall,
                            "fraction", T.periodic_share.value));
    PeriodicRecs(*g, c.ranks, f);
  }
  SortRecs(f);
  return f;
}

// ---------------------------------------------------------------------------------------------
// The ledger's host_work and side_work at any share (issue 39: the principal part's finding
// when no rule above speaks for it)
// ---------------------------------------------------------------------------------------------

std::optional<Finding> HostWorkFinding(const Facts& c) {
  if (c.steps == 0) return std::nullopt;
  if (c.host_syncs_per_step >= T.host_sync_per_step_low.value) return HostSyncFinding(c);
  const analysis::StepLedger& j = c.ledger.job;
  const double share = j.Share(analysis::LedgerPart::kHostWork);
  if (share <= 0) return std::nullopt;
  // What it is made of, largest first: `other`, the job's own phases, launch overhead.
  std::vector<std::pair<std::string, double>> parts;
  for (const auto& [name, s] : j.members) {
    if (s > 0 && analysis::LedgerPartOfPhase(name) == analysis::LedgerPart::kHostWork)
      parts.emplace_back(name, s);
  }
  std::stable_sort(parts.begin(), parts.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string made_of, launch;
  for (const auto& [name, s] : parts) {
    const bool is_launch = name.starts_with("launch:");
    const std::string what = is_launch
                                 ? fmt::format("the host in {} while the GPU idled", name.substr(7))
                             : name == kOther ? std::string("outside every phase")
                                              : fmt::format("in the job's phase {}", name);
    made_of += fmt::format("{}{} {}", made_of.empty() ? "" : ", ", what, Pct(s));
    if (is_launch) launch = name.substr(7);
  }
  Finding f =
      Make(FindingClass::kHostSyncOrLogging,
           MarginConfidence(share, T.host_sync_other_share.value, T.confidence_fair.value), share,
           fmt::format("{} of each step is the host's own work while no training phase "
                       "runs ({}), without host syncs",
                       Pct(share), made_of));
  f.significant = share >= T.host_sync_other_share.value;
  f.evidence.push_back(ShareEvidence(c, kOther, T.host_sync_other_share));
  f.evidence.push_back(Ev(fmt::format("host work {} of the step: {}", Pct(share), made_of),
                          "ledger.host_work", share, "fraction", T.host_sync_other_share.value));
  f.evidence.push_back(Ev(fmt::format("{:.1f} host syncs per step (below {:.0f}: not logging's "
                                      "syncs)",
                                      c.host_syncs_per_step, T.host_sync_per_step_low.value),
                          "host_syncs_per_step", c.host_syncs_per_step, "per step",
                          T.host_sync_per_step_low.value));
  if (!launch.empty()) {
    Rec(f, 1,
        fmt::format("less Python per step in {}: a fused or foreach optimizer "
                    "(torch.optim.AdamW(..., fused=True)), torch.compile, CUDA graphs",
                    launch));
  }
  Rec(f, 0,
      "name that work with `with stallscope.phase(\"...\"):` to see it in the phase table, or "
      "read the lines below (run --stacks)");
  Rec(f, 1, "run it every N steps, or on a background thread, instead of in every step");
  SortRecs(f);
  return f;
}

std::optional<Finding> SideWorkFinding(const Facts& c) {
  if (auto f = PeriodicRule(c)) return f;
  const analysis::StepLedger& j = c.ledger.job;
  const double share = j.Share(analysis::LedgerPart::kSideWork);
  if (c.steps == 0 || share <= 0) return std::nullopt;
  std::string what;
  bool saves = false;
  for (const auto& [name, s] : j.members) {
    if (s <= 0 || analysis::LedgerPartOfPhase(name) != analysis::LedgerPart::kSideWork) continue;
    what += fmt::format("{}{} {}", what.empty() ? "" : ", ", name, Pct(s));
    saves = saves || name == phase_name::kCheckpointing;
  }
  Finding f = Make(FindingClass::kPeriodicSideWork,
                   MarginConfidence(share, T.periodic_share.value, T.confidence_weak.value), share,
                   fmt::format("side work inside the steps takes {} of each step ({}), in every "
                               "step rather than in turn",
                               Pct(share), what));
  f.significant = share >= T.periodic_share.value;
  f.evidence.push_back(Ev(fmt::format("side work {} of the step: {} (threshold {}, {})", Pct(share),
                                      what, Pct(T.periodic_share.value), T.periodic_share.cite()),
                          "ledger.side_work", share, "fraction", T.periodic_share.value));
  if (saves) {
    Rec(f, 0, "checkpoint every N steps, not every step");
    Rec(f, 1, std::string(kAsyncCheckpoint));
  }
  Rec(f, 0, "evaluate or sample every N steps, not every step");
  Rec(f, 1, "move eval off the training job: a separate job on saved checkpoints");
  SortRecs(f);
  return f;
}

// ---------------------------------------------------------------------------------------------
// communication_bound of a run (issue 39): ranks in lockstep that wait alike in collectives
// ---------------------------------------------------------------------------------------------

std::optional<Finding> CommWaitRule(const Facts& c) {
  if (c.trace || !c.lockstep) return std::nullopt;
  if (c.ledger.job.Share(analysis::LedgerPart::kComm) <= FadeIn(T.comm_wait_share.value))
    return std::nullopt;
  return CommWaitFinding(c);
}

std::optional<Finding> CommWaitFinding(const Facts& c) {
  if (c.trace || !c.lockstep) return std::nullopt;
  const analysis::StepLedger& j = c.ledger.job;
  const double share = j.Share(analysis::LedgerPart::kComm);
  if (share <= 0) return std::nullopt;
  const double uneven = j.Share(analysis::LedgerPart::kRankWait);
  Finding f =
      Make(FindingClass::kCommunicationBound,
           MarginConfidence(share, T.comm_wait_share.value, T.confidence_strong.value), share,
           fmt::format("the {} ranks wait alike in all-reduce {} of each step: the "
                       "gradients' communication is not hidden by backward",
                       c.ranks, Pct(share)));
  f.significant = share >= T.comm_wait_share.value;
  f.evidence.push_back(
      Ev(fmt::format("communication (what every rank waits in comm_wait) {} of "
                     "the step (threshold {}, {})",
                     Pct(share), Pct(T.comm_wait_share.value), T.comm_wait_share.cite()),
         "ledger.communication", share, "fraction", T.comm_wait_share.value));
  for (const analysis::StepLedger& r : c.ledger.ranks) {
    const double wait =
        r.Share(analysis::LedgerPart::kComm) + r.Share(analysis::LedgerPart::kRankWait);
    f.evidence.push_back(Ev(fmt::format("rank {} waits in comm_wait {} of its step ({} per step)",
                                        r.rank, Pct(wait), Secs(wait * r.step_s)),
                            fmt::format("rank{}.comm_wait_share", r.rank), wait, "fraction"));
  }
  f.evidence.push_back(
      Ev(fmt::format("the ranks' waits differ by {} of the step: {} (a rank the others wait for "
                     "costs {} or more, {})",
                     Pct(uneven),
                     uneven < T.straggler_wait_share.value ? "no straggler" : "a straggler too",
                     Pct(T.straggler_wait_share.value), T.straggler_wait_share.cite()),
         "ledger.rank_wait", uneven, "fraction", T.straggler_wait_share.value));
  Rec(f, 0,
      "DDP: gradient_as_bucket_view=True and static_graph=True (when the graph does not change "
      "between steps); tune bucket_cap_mb (default 25): larger buckets make fewer all-reduces, "
      "smaller ones start them earlier in backward");
  Rec(f, 0,
      "gradient accumulation with model.no_sync() on the inner steps: one all-reduce per k "
      "micro-batches");
  const std::string batch =
      c.loader && c.loader->batch_size
          ? fmt::format(" (batch_size={} → {})", *c.loader->batch_size, 2 * *c.loader->batch_size)
          : std::string();
  Rec(f, 0,
      fmt::format("a larger batch per rank{}: as much communication per step, more compute to "
                  "hide it",
                  batch));
  Rec(f, 0,
      "see how much all-reduce backward already hides: profile a few steps (torch.profiler) and "
      "run `stallscope trace` on the trace; a run measures only the wait compute left exposed");
  Rec(f, 1,
      "compress the gradients: model.register_comm_hook(None, "
      "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.bf16_compress_hook)");
  Rec(f, 1,
      "NCCL: check the transport and the bus bandwidth (NCCL_DEBUG=INFO, nccl-tests' "
      "all_reduce_perf) before tuning NCCL_ALGO or NCCL_PROTO");
  Rec(f, 1, "FSDP: forward_prefetch=True and backward_prefetch=BackwardPrefetch.BACKWARD_PRE");
  Rec(f, 2, "a faster interconnect (NVLink, InfiniBand), or fewer ranks across the slow link");
  SortRecs(f);
  return f;
}

}  // namespace stallscope::diagnose
