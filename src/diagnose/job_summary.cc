#include "diagnose/job_summary.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "base/stats.h"
#include "diagnose/rule_util.h"

namespace stallscope::diagnose {
namespace {

/// The rank the straggler rule names: in lockstep (every rank waits in comm_wait) the one that
/// waits least, else the slowest mean step (gpu_rules.cc StragglerRule).
std::optional<int32_t> StragglerRank(const std::vector<rundir::JobRank>& ranks, bool lockstep) {
  if (ranks.empty()) return std::nullopt;
  auto it = std::min_element(ranks.begin(), ranks.end(), [&](const auto& a, const auto& b) {
    return lockstep ? a.comm_wait_s < b.comm_wait_s : a.step_s > b.step_s;
  });
  return it->rank;
}

Finding* FindStraggler(Verdict& v) {
  if (v.principal && v.principal->cls == FindingClass::kStraggler) return &*v.principal;
  for (auto& f : v.secondary) {
    if (f.cls == FindingClass::kStraggler) return &f;
  }
  return nullptr;
}

}  // namespace

void SummarizeJob(rundir::JobNodes& job, const analysis::PhaseAnalysis& phases, Verdict& verdict) {
  job.ranks.clear();
  bool lockstep = !phases.ranks.empty();
  for (const auto& s : phases.ranks) {
    if (s.count <= 0) continue;
    rundir::JobRank r{
        .rank = s.rank, .steps = s.count, .steps_per_s = s.per_second, .step_s = s.mean_step_s};
    bool waited = false;
    for (const auto& p : phases.phases) {
      if (p.rank == s.rank && p.name == analysis::kCommWaitPhase) {
        r.comm_wait_s = p.total_s / static_cast<double>(s.count);
        waited = true;
      }
    }
    lockstep = lockstep && waited;
    r.work_s = std::max(0.0, r.step_s - r.comm_wait_s);
    for (const auto& n : job.nodes) {
      if (std::binary_search(n.ranks.begin(), n.ranks.end(), s.rank)) r.node_rank = n.node_rank;
    }
    job.ranks.push_back(r);
  }
  std::vector<double> work, util;
  for (auto& n : job.nodes) {
    n.steps = 0;
    double per_s = 0, step = 0, wait = 0;
    int count = 0;
    for (const auto& r : job.ranks) {
      if (r.node_rank != n.node_rank) continue;
      n.steps += r.steps;
      per_s += r.steps_per_s;
      step += r.step_s;
      wait += r.comm_wait_s;
      ++count;
    }
    if (count > 0) {
      n.steps_per_s = per_s / count;
      n.step_s = step / count;
      n.comm_wait_s = wait / count;
      n.work_s = std::max(0.0, n.step_s - n.comm_wait_s);
      work.push_back(n.work_s);
    }
    if (n.gpu_util_pct) util.push_back(*n.gpu_util_pct);
  }
  job.work_balance = analysis::ComputeBalance(work, kThresholds);
  job.util_balance = util.size() == job.nodes.size() ? analysis::ComputeBalance(util, kThresholds)
                                                     : analysis::Balance{};
  Finding* straggler = FindStraggler(verdict);
  job.straggler_rank.reset();
  job.straggler_node.reset();
  if (straggler == nullptr) return;
  job.straggler_rank = StragglerRank(job.ranks, lockstep);
  if (!job.straggler_rank) return;
  std::vector<double> others;
  const rundir::JobRank* slow = nullptr;
  for (const auto& r : job.ranks) {
    if (r.rank == *job.straggler_rank) {
      slow = &r;
    } else {
      others.push_back(r.work_s);
    }
  }
  const double median = Median(others);
  job.straggler_work_ratio = median > 0 ? slow->work_s / median : 0;
  job.straggler_node = slow->node_rank;
  const auto& node = job.nodes[static_cast<size_t>(slow->node_rank)];
  straggler->reason +=
      fmt::format("; rank {} runs on node {} ({})", slow->rank, node.node_rank, node.hostname);
  straggler->evidence.push_back(
      Evidence{fmt::format("rank {} on node {} ({}): work per step (step − comm_wait) {:.2f}× the "
                           "median other rank's",
                           slow->rank, node.node_rank, node.hostname, job.straggler_work_ratio),
               fmt::format("node{}.rank{}.work_ratio", node.node_rank, slow->rank),
               job.straggler_work_ratio, "×", std::nullopt});
}

}  // namespace stallscope::diagnose
