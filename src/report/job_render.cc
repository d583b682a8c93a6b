#include "report/job_render.h"

#include <fmt/format.h>
#include <algorithm>

#include "base/json_writer.h"
#include "base/stats.h"
#include "base/thresholds.h"
#include "base/units.h"
#include "report/run_render.h"

namespace stallscope::report {
namespace {

std::string RanksText(const std::vector<int32_t>& ranks) {
  if (ranks.empty()) return "-";
  const bool contiguous = ranks.back() - ranks.front() + 1 == static_cast<int32_t>(ranks.size());
  if (ranks.size() > 1 && contiguous) return fmt::format("{}-{}", ranks.front(), ranks.back());
  std::string out;
  for (int32_t r : ranks) out += fmt::format("{}{}", out.empty() ? "" : ",", r);
  return out;
}

/// "CV 45.1% (Poor)" or "-" (seed 002 classes).
std::string BalanceCell(const analysis::Balance& b) {
  if (!b.cv_pct || !b.quality) return "-";
  return fmt::format("CV {:.1f}% ({})", *b.cv_pct, BalanceClassName(*b.quality));
}

std::string NodeTable(const rundir::JobNodes& job) {
  size_t host_w = 4, dir_w = 3;
  for (const auto& n : job.nodes) {
    host_w = std::max(host_w, EscapeControl(n.hostname).size());
    dir_w = std::max(dir_w, EscapeControl(n.dir).size());
  }
  std::string out = fmt::format(
      "\nNodes  {:>4}  {:<{}}  {:<7} {:>6} {:>8} {:>9} {:>9} {:>9} {:>8}  {}\n", "node", "host",
      host_w, "ranks", "steps", "steps/s", "step", "work", "comm_wait", "GPU util", "dir");
  for (const auto& n : job.nodes) {
    std::string util = n.gpu_util_pct ? fmt::format("{:.0f}%", *n.gpu_util_pct) : "-";
    out +=
        fmt::format("       {:>4}  {:<{}}  {:<7} {:>6} {:>8.2f} {:>9} {:>9} {:>9} {:>8}  {}\n",
                    n.node_rank, EscapeControl(n.hostname), host_w, RanksText(n.ranks), n.steps,
                    n.steps_per_s, FormatDurationSeconds(n.step_s), FormatDurationSeconds(n.work_s),
                    FormatDurationSeconds(n.comm_wait_s), util, EscapeControl(n.dir));
  }
  return out;
}

std::string RankTable(const rundir::JobNodes& job) {
  std::string out = fmt::format("\nRanks  {:>4}  {:>4} {:>6} {:>8} {:>9} {:>9} {:>9}\n", "rank",
                                "node", "steps", "steps/s", "step", "work", "comm_wait");
  for (const auto& r : job.ranks) {
    out += fmt::format("       {:>4}  {:>4} {:>6} {:>8.2f} {:>9} {:>9} {:>9}{}\n", r.rank,
                       r.node_rank, r.steps, r.steps_per_s, FormatDurationSeconds(r.step_s),
                       FormatDurationSeconds(r.work_s), FormatDurationSeconds(r.comm_wait_s),
                       job.straggler_rank == r.rank ? "  <- straggler" : "");
  }
  out +=
      "(work = step − comm_wait: what the rank itself takes per step; comm_wait is time waiting "
      "for the others in all-reduce)\n";
  return out;
}

std::string NextLines(const rundir::JobNodes& job) {
  std::string out = "\nNext:\n";
  if (job.straggler_node) {
    const auto& n = job.nodes[static_cast<size_t>(*job.straggler_node)];
    out += fmt::format(
        "  node {} ({}) holds the straggler, rank {}: its own report shows its processes, host "
        "and GPUs: stallscope diagnose {}\n",
        n.node_rank, EscapeControl(n.hostname), *job.straggler_rank, EscapeControl(n.dir));
  } else {
    out += "  each node's own report (processes, host, GPUs): stallscope diagnose DIR\n";
  }
  std::string dirs;
  for (const auto& n : job.nodes) dirs += " " + EscapeControl(n.dir);
  out += fmt::format("  redo this analysis: stallscope diagnose{}\n", dirs);
  return out;
}

}  // namespace

std::string RenderJobReportText(const diagnose::RunReport& r, const rundir::JobNodes& job) {
  std::string out = fmt::format("stallscope job report: {}  ({} nodes, world size {})\n",
                                EscapeControl(r.meta.name), job.nodes.size(), job.world_size);
  double per_s = 0;
  for (const auto& k : job.ranks) per_s += k.steps_per_s;
  out += RenderVerdictText(
      r.verdict, job.ranks.empty()
                     ? std::nullopt
                     : std::optional<double>(per_s / static_cast<double>(job.ranks.size())));
  if (job.straggler_node) {
    const auto& n = job.nodes[static_cast<size_t>(*job.straggler_node)];
    out += fmt::format(
        "\nStraggler: node {} ({}), rank {}: {:.1f}× the work per step of the median other "
        "rank\n",
        n.node_rank, EscapeControl(n.hostname), *job.straggler_rank, job.straggler_work_ratio);
  }
  out += NodeTable(job);
  out += RankTable(job);
  out += fmt::format(
      "Balance across nodes (seed 002: < {:.0f}% Excellent, < {:.0f}% Good, < {:.0f}% Fair): "
      "work per step {}; GPU utilization {}\n",
      kThresholds.balance_good_cv.value, kThresholds.balance_fair_cv.value,
      kThresholds.balance_poor_cv.value, BalanceCell(job.work_balance),
      BalanceCell(job.util_balance));
  out += RenderPhaseTable(r.phases);
  for (const auto& w : r.warnings) out += fmt::format("warning: {}\n", EscapeControl(w));
  out += NextLines(job);
  return out;
}

namespace {

void WriteBalanceJson(JsonWriter& w, std::string_view key, const analysis::Balance& b) {
  w.Key(key).BeginObject().Field("cv_pct", b.cv_pct, 2);
  if (b.quality) {
    w.Field("class", BalanceClassName(*b.quality));
  } else {
    w.Key("class").Null();
  }
  w.EndObject();
}

}  // namespace

std::string RenderJobReportJson(const diagnose::RunReport& r, const rundir::JobNodes& job) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject();
  WriteRunReportFields(w, r);
  w.Key("nodes").BeginObject().Field("count", job.nodes.size()).Field("world_size", job.world_size);
  w.Key("nodes").BeginArray();
  for (const auto& n : job.nodes) {
    w.BeginObject().Field("node_rank", n.node_rank).Field("hostname", n.hostname);
    w.Field("dir", n.dir).Key("ranks").BeginArray();
    for (int32_t k : n.ranks) w.Int(k);
    w.EndArray().Field("steps", n.steps).Field("steps_per_s", n.steps_per_s, 4);
    w.Field("step_s", n.step_s, 6)
        .Field("work_s", n.work_s, 6)
        .Field("comm_wait_s", n.comm_wait_s, 6);
    w.Field("gpu_util_pct", n.gpu_util_pct, 2).EndObject();
  }
  w.EndArray().Key("ranks").BeginArray();
  for (const auto& k : job.ranks) {
    w.BeginObject().Field("rank", k.rank).Field("node_rank", k.node_rank).Field("steps", k.steps);
    w.Field("steps_per_s", k.steps_per_s, 4).Field("step_s", k.step_s, 6);
    w.Field("work_s", k.work_s, 6).Field("comm_wait_s", k.comm_wait_s, 6).EndObject();
  }
  w.EndArray();
  WriteBalanceJson(w, "work_balance", job.work_balance);
  WriteBalanceJson(w, "util_balance", job.util_balance);
  w.Key("straggler");
  if (job.straggler_node) {
    w.BeginObject().Field("node_rank", *job.straggler_node).Field("rank", *job.straggler_rank);
    w.Field("work_ratio", job.straggler_work_ratio, 3).EndObject();
  } else {
    w.Null();
  }
  w.EndObject().EndObject();
  out += "\n";
  return out;
}

}  // namespace stallscope::report
