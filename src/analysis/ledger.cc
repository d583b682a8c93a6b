#include "analysis/ledger.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "base/name_table.h"
#include "base/vocabulary.h"

namespace stallscope::analysis {

std::string_view LedgerPartName(LedgerPart p) { return NameIn(kLedgerPartNames, p); }

std::string_view LedgerPartLabel(LedgerPart p, bool on_gpu) {
  switch (p) {
    case LedgerPart::kCompute:
      return on_gpu ? "GPU compute" : "compute";
    case LedgerPart::kData:
      return "waiting for data";
    case LedgerPart::kComm:
      return "communication";
    case LedgerPart::kRankWait:
      return "waiting for a slower rank";
    case LedgerPart::kSideWork:
      return "side work";
    case LedgerPart::kHostWork:
      return "host work outside the phases";
    case LedgerPart::kUnaccounted:
      return "unaccounted";
  }
  return "unknown";
}

LedgerPart LedgerPartOfPhase(std::string_view phase) {
  if (IsComputePhase(phase)) return LedgerPart::kCompute;
  if (phase == phase_name::kDataLoading) return LedgerPart::kData;
  if (phase == phase_name::kCommWait || phase == phase_name::kCommunication)
    return LedgerPart::kComm;
  if (phase == phase_name::kCheckpointing || phase == phase_name::kEvalForward)
    return LedgerPart::kSideWork;
  return LedgerPart::kHostWork;
}

namespace {

/// The prefix of a member that is the host's time in a compute phase while the GPU idled.
constexpr std::string_view kLaunchPrefix = "launch:";

double& Part(StepLedger& l, LedgerPart p) { return l.parts[static_cast<size_t>(p)]; }

/// GPU seconds of a compute phase on one rank as a share of its steps, extrapolated from the
/// instances that have one to all of them; nullopt when fewer than gpu_time_coverage do.
std::optional<double> GpuShareOf(const PhaseStats& p, const ThresholdSet& t) {
  if (!p.gpu || p.gpu->count <= 0 || p.count <= 0) return std::nullopt;
  auto have = static_cast<double>(p.gpu->count), all = static_cast<double>(p.count);
  if (have < t.gpu_time_coverage.value * all) return std::nullopt;
  return p.gpu->share * std::max(1.0, all / have);
}

/// One rank's phases: host shares and the GPU shares of its timed compute phases.
struct RankPhases {
  const RankSteps* steps = nullptr;
  std::map<std::string, double> host;
  std::map<std::string, double> gpu;
};

/// Which compute phases count GPU time: those every rank timed (a rank without GPU times: host
/// time for all, so that ranks compare).
std::set<std::string> GpuTimedPhases(const std::vector<RankPhases>& ranks) {
  std::set<std::string> out;
  if (ranks.empty()) return out;
  for (const auto& entry : ranks.front().gpu) {
    const std::string& name = entry.first;
    bool all = std::all_of(ranks.begin(), ranks.end(),
                           [&name](const RankPhases& r) { return r.gpu.count(name) > 0; });
    if (all) out.insert(name);
  }
  return out;
}

/// CUDA's asynchrony (python/stallscope/_cuda.py): forward and backward return once their
/// kernels are queued, so their host share is launch time, and the GPU's work is host time
/// wherever the job synchronises next: `other` (an .item(), a blocking copy), or data_loading
/// while the GPU still runs the step. A timed compute phase's rule share becomes max(host, GPU),
/// and what it gains comes out of `other`, then data_loading, then the other non-compute phases,
/// largest first: that is the host waiting for the GPU. Returns the GPU time left over when those
/// are used up (it ran while the host was in another compute phase).
double MoveGpuTime(const RankPhases& r, const std::set<std::string>& timed, StepLedger& l) {
  l.phase_share = r.host;
  double gained = 0;
  for (const std::string& name : timed) {
    const double g = r.gpu.at(name);
    double& s = l.phase_share[name];
    if (g > s) {
      gained += g - s;
      s = g;
    }
  }
  std::vector<std::pair<std::string, double>> donors;
  for (const auto& [name, s] : l.phase_share) {
    if (!IsComputePhase(name)) donors.emplace_back(name, s);
  }
  auto order = [](const std::string& n) {
    return n == phase_name::kOther ? 0 : n == phase_name::kDataLoading ? 1 : 2;
  };
  std::stable_sort(donors.begin(), donors.end(), [&](const auto& a, const auto& b) {
    return order(a.first) != order(b.first) ? order(a.first) < order(b.first) : a.second > b.second;
  });
  for (const auto& [name, s] : donors) {
    const double take = std::min(s, gained - l.host_wait);
    if (take <= 0) break;
    l.phase_share[name] -= take;
    l.host_wait += take;
  }
  return gained - l.host_wait;
}

/// One rank's ledger (before lockstep splits its comm_wait).
StepLedger RankLedger(const RankPhases& r, const std::set<std::string>& timed) {
  StepLedger l;
  l.rank = r.steps->rank;
  l.steps = r.steps->count;
  l.step_s = r.steps->mean_step_s;
  l.compute_on_gpu = !timed.empty();
  for (const auto& [name, s] : r.host) {
    if (IsComputePhase(name)) l.host_compute += s;
  }
  const double spill = MoveGpuTime(r, timed, l);
  // Members: the GPU's time for timed compute phases, the host's for the rest; the host's time
  // in a timed compute phase beyond the GPU's is GPU idle while the host worked (launch overhead,
  // the optimizer's Python), less what the spilled GPU time covered of it.
  double busy = 0, overhead = 0;
  for (const auto& [name, s] : l.phase_share) {
    if (!timed.count(name)) {
      l.members[name] = s;
      continue;
    }
    const double g = r.gpu.at(name), h = r.host.at(name);
    l.members[name] = g;
    busy += g;
    overhead += std::max(0.0, h - g);
  }
  if (l.compute_on_gpu) {
    l.gpu_busy = std::min(1.0, busy);
    const double kept = overhead > 0 ? std::max(0.0, overhead - spill) / overhead : 0.0;
    for (const std::string& name : timed) {
      const double o = std::max(0.0, r.host.at(name) - r.gpu.at(name)) * kept;
      if (o > 0) l.members[std::string(kLaunchPrefix) + name] = o;
    }
  }
  for (const auto& [name, s] : l.members) {
    const LedgerPart p =
        name.starts_with(kLaunchPrefix) ? LedgerPart::kHostWork : LedgerPartOfPhase(name);
    Part(l, p) += s;
  }
  // Nested phases count twice in the phases' shares, and GPU time can exceed the step: scaled so
  // the parts add up to 1. Phase records that cover less than the step leave the rest unexplained.
  const double sum = std::accumulate(l.parts.begin(), l.parts.end(), 0.0);
  if (sum > 1.0) {
    for (double& p : l.parts) p /= sum;
    for (auto& [name, s] : l.members) s /= sum;
  } else if (l.steps > 0) {
    Part(l, LedgerPart::kUnaccounted) = 1.0 - sum;
  }
  return l;
}

/// The job in lockstep: each part the least any rank spends; rank_wait the rest (one rank's extra
/// time in a phase makes the others wait in their all-reduce). Each rank's comm_wait beyond the
/// least-waiting rank's is its rank_wait.
StepLedger LockstepJob(std::vector<StepLedger>& ranks) {
  StepLedger job;
  const double least_comm =
      std::min_element(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) {
        return a.Share(LedgerPart::kComm) < b.Share(LedgerPart::kComm);
      })->Share(LedgerPart::kComm);
  for (StepLedger& r : ranks) {
    Part(r, LedgerPart::kRankWait) = r.Share(LedgerPart::kComm) - least_comm;
    Part(r, LedgerPart::kComm) = least_comm;
  }
  auto least = [&ranks](auto field) {
    double v = field(ranks.front());
    for (const auto& r : ranks) v = std::min(v, field(r));
    return v;
  };
  double sum = 0;
  for (size_t i = 0; i < kLedgerParts; ++i) {
    if (static_cast<LedgerPart>(i) == LedgerPart::kRankWait) continue;
    job.parts[i] = least([i](const StepLedger& r) { return r.parts[i]; });
    sum += job.parts[i];
  }
  Part(job, LedgerPart::kRankWait) = std::max(0.0, 1.0 - sum);
  std::set<std::string> members, phases;
  for (const auto& r : ranks) {
    for (const auto& [name, s] : r.members) members.insert(name);
    for (const auto& [name, s] : r.phase_share) phases.insert(name);
  }
  auto at = [](const std::map<std::string, double>& m, const std::string& name) {
    auto it = m.find(name);
    return it == m.end() ? 0.0 : it->second;
  };
  for (const auto& name : members) {
    job.members[name] = least([&](const StepLedger& r) { return at(r.members, name); });
  }
  for (const auto& name : phases) {
    job.phase_share[name] = least([&](const StepLedger& r) { return at(r.phase_share, name); });
  }
  job.compute_on_gpu = ranks.front().compute_on_gpu;
  if (job.compute_on_gpu)
    job.gpu_busy = least([](const StepLedger& r) { return r.gpu_busy.value_or(0); });
  job.host_compute = least([](const StepLedger& r) { return r.host_compute; });
  job.host_wait = least([](const StepLedger& r) { return r.host_wait; });
  return job;
}

/// The job of independent ranks: each rank weighted by its steady time.
StepLedger PooledJob(const std::vector<StepLedger>& ranks, const std::vector<RankPhases>& phases) {
  StepLedger job;
  double total_s = 0;
  for (const auto& p : phases) total_s += p.steps->duration_s;
  for (size_t k = 0; k < ranks.size(); ++k) {
    const StepLedger& r = ranks[k];
    const double w = total_s > 0 ? phases[k].steps->duration_s / total_s
                                 : 1.0 / static_cast<double>(ranks.size());
    for (size_t i = 0; i < kLedgerParts; ++i) job.parts[i] += w * r.parts[i];
    for (const auto& [name, s] : r.members) job.members[name] += w * s;
    for (const auto& [name, s] : r.phase_share) job.phase_share[name] += w * s;
    if (r.gpu_busy) job.gpu_busy = job.gpu_busy.value_or(0) + w * *r.gpu_busy;
    job.host_compute += w * r.host_compute;
    job.host_wait += w * r.host_wait;
  }
  job.compute_on_gpu = ranks.front().compute_on_gpu;
  return job;
}

}  // namespace

Ledger BuildLedger(const PhaseAnalysis& phases, const ThresholdSet& t) {
  Ledger out;
  std::vector<RankPhases> ranks;
  for (const RankSteps& r : phases.ranks) {
    if (r.count <= 0) continue;
    RankPhases rp;
    rp.steps = &r;
    for (const PhaseStats& p : phases.phases) {
      if (p.rank != r.rank) continue;
      rp.host[p.name] += p.share;
      if (!IsComputePhase(p.name)) continue;
      if (auto g = GpuShareOf(p, t)) rp.gpu[p.name] = *g;
    }
    ranks.push_back(std::move(rp));
  }
  if (ranks.empty()) return out;
  const std::set<std::string> timed = GpuTimedPhases(ranks);
  for (const RankPhases& r : ranks) out.ranks.push_back(RankLedger(r, timed));
  out.lockstep = ranks.size() >= 2 && std::all_of(ranks.begin(), ranks.end(), [](const auto& r) {
                   return r.host.count(std::string(phase_name::kCommWait)) > 0;
                 });
  if (out.ranks.size() == 1) {
    out.job = out.ranks.front();
  } else if (out.lockstep) {
    out.job = LockstepJob(out.ranks);
  } else {
    out.job = PooledJob(out.ranks, ranks);
  }
  out.job.rank = -1;
  out.job.steps = 0;
  double duration_s = 0;
  for (const auto& r : ranks) {
    out.job.steps += r.steps->count;
    duration_s += r.steps->duration_s;
  }
  out.job.step_s = out.job.steps > 0 ? duration_s / static_cast<double>(out.job.steps) : 0;
  return out;
}

}  // namespace stallscope::analysis
