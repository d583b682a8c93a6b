#include "rundir/job_merge.h"

#include <fmt/format.h>
#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include "base/thresholds.h"

namespace stallscope::rundir {
namespace {

/// Linux pids stay below 2^22 (pid_max's ceiling, PID_MAX_LIMIT): node k's clashing pids move to
/// k·2^22 + pid, unique for up to 511 nodes.
constexpr int32_t kPidSpan = 1 << 22;

bool IsNodeRankFlag(const std::string& a) { return a == "--node-rank" || a == "--node_rank"; }

bool IsNodeRankAssignment(const std::string& a) {
  return a.starts_with("--node-rank=") || a.starts_with("--node_rank=");
}

/// The node's identity from its run: global ranks and world size from the processes that wrote
/// phase records, GPU utilization from the recording.
JobNode Identify(const RunData& run) {
  JobNode n;
  n.dir = run.paths.dir;
  n.hostname = run.meta.hostname;
  std::set<int32_t> ranks;
  for (const auto& p : run.events.processes) {
    ranks.insert(p.rank);
    n.world_size = std::max(n.world_size, p.world_size);
  }
  n.ranks.assign(ranks.begin(), ranks.end());
  auto summary = analysis::Summarize(run.recording);
  if (!summary.gpus.empty()) {
    double sum = 0;
    for (const auto& g : summary.gpus) sum += g.util_pct.mean();
    n.gpu_util_pct = sum / static_cast<double>(summary.gpus.size());
  }
  return n;
}

/// The first reason `runs[i]` is not of the same job as runs[0], or "".
std::string Mismatch(const std::vector<RunData>& runs, const std::vector<JobNode>& nodes,
                     size_t i) {
  const auto& n = nodes[i];
  if (n.ranks.empty()) return "no ranks recorded (no phase events): cannot place it in the job";
  if (n.world_size != nodes[0].world_size) {
    return fmt::format("world size {} but {} has {}: not the same job", n.world_size, nodes[0].dir,
                       nodes[0].world_size);
  }
  if (JobCommand(runs[i].meta.command) != JobCommand(runs[0].meta.command)) {
    return fmt::format("another command than {}: not the same job", nodes[0].dir);
  }
  for (size_t j = 0; j < i; ++j) {
    for (int32_t r : n.ranks) {
      if (std::binary_search(nodes[j].ranks.begin(), nodes[j].ranks.end(), r)) {
        return fmt::format("rank {} is also in {}: the same node twice?", r, nodes[j].dir);
      }
    }
  }
  return {};
}

/// Moves node `k`'s records onto the lead node's clock and, when they clash, out of its pids.
void Rebase(RunData& run, int64_t shift_ns, bool move_pids, int k) {
  auto pid = [&](int32_t p) { return move_pids ? p + k * kPidSpan : p; };
  for (auto& e : run.events.events) {
    e.ts_ns += shift_ns;
    e.pid = pid(e.pid);
  }
  for (auto& p : run.events.processes) {
    p.start_monotonic_ns += shift_ns;
    p.pid = pid(p.pid);
  }
  for (auto& m : run.events.meta) {
    m.ts_ns += shift_ns;
    m.pid = pid(m.pid);
  }
  std::map<std::pair<int32_t, uint16_t>, std::string> names;
  for (auto& [key, name] : run.events.names) names[{pid(key.first), key.second}] = name;
  run.events.names = std::move(names);
}

/// Appends node run `from` (already rebased) to the merged data.
void Append(RunData& into, RunData& from, const std::string& label) {
  auto& e = into.events;
  e.events.insert(e.events.end(), from.events.events.begin(), from.events.events.end());
  e.names.insert(from.events.names.begin(), from.events.names.end());
  e.processes.insert(e.processes.end(), from.events.processes.begin(), from.events.processes.end());
  e.meta.insert(e.meta.end(), from.events.meta.begin(), from.events.meta.end());
  std::stable_sort(e.meta.begin(), e.meta.end(),
                   [](const auto& a, const auto& b) { return a.ts_ns < b.ts_ns; });
  e.lost_records += from.events.lost_records;
  e.invalid_records += from.events.invalid_records;
  auto& py = into.python.processes;
  py.insert(py.end(), from.python.processes.begin(), from.python.processes.end());
  into.python.malformed_lines += from.python.malformed_lines;
  into.implausible_events += from.implausible_events;
  for (const auto& w : from.warnings) into.warnings.push_back(fmt::format("{}: {}", label, w));
  if (!into.meta.exit_code.value_or(0) && from.meta.exit_code.value_or(0)) {
    into.meta.exit_code = from.meta.exit_code;
    into.meta.status = from.meta.status;
  }
}

}  // namespace

std::vector<std::string> JobCommand(const std::vector<std::string>& command) {
  std::vector<std::string> out;
  for (size_t i = 0; i < command.size(); ++i) {
    if (IsNodeRankFlag(command[i])) {
      ++i;  // and its value
    } else if (!IsNodeRankAssignment(command[i])) {
      out.push_back(command[i]);
    }
  }
  return out;
}

Result<MergedJob> MergeRuns(std::vector<RunData> runs, bool force) {
  if (runs.empty()) return Error{ErrorCode::kInvalidArgument, "no run directories"};
  std::vector<JobNode> nodes;
  for (const auto& r : runs) nodes.push_back(Identify(r));
  // Node rank: the order of the lowest global rank each node ran (torchrun gives node k the
  // ranks k·nproc .. k·nproc + nproc − 1). Runs without ranks go last.
  std::vector<size_t> order(runs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (nodes[a].ranks.empty() != nodes[b].ranks.empty()) return nodes[b].ranks.empty();
    return !nodes[a].ranks.empty() && nodes[a].ranks.front() < nodes[b].ranks.front();
  });
  std::vector<RunData> sorted_runs;
  std::vector<JobNode> sorted_nodes;
  for (size_t i : order) {
    sorted_runs.push_back(std::move(runs[i]));
    sorted_nodes.push_back(std::move(nodes[i]));
  }
  std::vector<std::string> forced;
  for (size_t i = 0; i < sorted_runs.size(); ++i) {
    std::string why = Mismatch(sorted_runs, sorted_nodes, i);
    if (why.empty()) continue;
    std::string line = fmt::format("{}: {}", sorted_nodes[i].dir, why);
    if (!force) return Error{ErrorCode::kInvalidArgument, line + " (--force merges it anyway)"};
    forced.push_back(line + " (merged: --force)");
  }
  MergedJob job;
  job.data = std::move(sorted_runs[0]);
  job.data.warnings.insert(job.data.warnings.begin(), forced.begin(), forced.end());
  const int64_t lead_offset = job.data.meta.start_wall_ns - job.data.meta.start_mono_ns;
  std::set<int32_t> pids;
  for (const auto& p : job.data.events.processes) pids.insert(p.pid);
  for (size_t k = 1; k < sorted_runs.size(); ++k) {
    RunData& run = sorted_runs[k];
    const int64_t shift = (run.meta.start_wall_ns - run.meta.start_mono_ns) - lead_offset;
    bool clash = std::any_of(run.events.processes.begin(), run.events.processes.end(),
                             [&](const auto& p) { return pids.contains(p.pid); });
    Rebase(run, shift, clash, static_cast<int>(k));
    for (const auto& p : run.events.processes) pids.insert(p.pid);
    if (run.meta.end_mono_ns) {
      job.data.meta.end_mono_ns =
          std::max(job.data.meta.end_mono_ns.value_or(0), *run.meta.end_mono_ns + shift);
    }
    Append(job.data, run, fmt::format("node {} ({})", k, sorted_nodes[k].dir));
  }
  for (size_t k = 0; k < sorted_nodes.size(); ++k) sorted_nodes[k].node_rank = static_cast<int>(k);
  job.nodes.world_size = sorted_nodes[0].world_size;
  job.nodes.nodes = std::move(sorted_nodes);
  job.data.info = DecodeInfoRecords(job.data.events);  // every node's, pids as merged
  return job;
}

}  // namespace stallscope::rundir
