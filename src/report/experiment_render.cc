#include "report/experiment_render.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "base/thresholds.h"
#include "base/units.h"
#include "report/run_render.h"

namespace stallscope::report {
namespace {

using experiment::RunDigest;

std::string Rate(const RunDigest& d) { return d.rate ? fmt::format("{:.2f}", d.rate->per_s) : "-"; }

std::string Interval(const RunDigest& d) {
  if (!d.rate) return "-";
  if (d.rate->lo == d.rate->hi) return "(too few steps)";
  return fmt::format("{:.2f}-{:.2f}", d.rate->lo, d.rate->hi);
}

std::string Share(const std::optional<double>& v) {
  return v ? fmt::format("{:.0f}%", *v * 100) : "-";
}

std::string VerdictClass(const RunDigest& d) {
  return d.principal ? std::string(diagnose::FindingClassName(d.principal->cls)) : "none";
}

std::string Header(std::string_view what, const std::string& dir,
                   const std::vector<std::string>& command, const std::string& bound) {
  return fmt::format("stallscope {}: {}\nJob     {}\nBound   {}\n\n", what, EscapeControl(dir),
                     EscapeControl(rundir::ShellJoin(command)), EscapeControl(bound));
}

void WriteRate(JsonWriter& w, const RunDigest& d) {
  // The rates are the steady state's; start-up and warm-up (issue 26) are said apart.
  const bool life = d.life.has_steps;
  w.Field("startup_s", life ? std::optional<double>(d.life.startup_s) : std::nullopt, 3)
      .Field("warmup_s", life ? std::optional<double>(d.life.warmup_s) : std::nullopt, 3);
  w.Field("warmup_steps", d.warmup_steps)
      .Field("steps", d.rate ? std::optional<int64_t>(d.rate->steps) : std::nullopt)
      .Field("steps_per_s", d.rate ? std::optional<double>(d.rate->per_s) : std::nullopt, 4)
      .Field("steps_per_s_lo", d.rate ? std::optional<double>(d.rate->lo) : std::nullopt, 4)
      .Field("steps_per_s_hi", d.rate ? std::optional<double>(d.rate->hi) : std::nullopt, 4)
      .Field("samples_per_s", d.samples_per_s, 2)
      .Field("data_share", d.data_share, 3)
      .Field("host_syncs_per_step", d.host_syncs_per_step, 2)
      .Field("gpu_util_pct", d.gpu_util_pct, 1)
      .Field("peak_rss_bytes", d.peak_rss_bytes
                                   ? std::optional<int64_t>(static_cast<int64_t>(*d.peak_rss_bytes))
                                   : std::nullopt)
      .Field("job_cpus", d.job_cpus, 2)
      .Field("other_cpus", d.other_cpus, 2)
      .Field("exit_code", d.meta.exit_code)
      .Field("status", rundir::RunStatusName(d.meta.status));
  w.Key("verdict");
  if (d.principal) {
    w.BeginObject()
        .Field("class", diagnose::FindingClassName(d.principal->cls))
        .Field("confidence", d.principal->confidence, 2)
        .Field("cost_fraction", d.principal->cost_fraction, 3)
        .Field("predicted_steps_per_s", d.principal->predicted_steps_per_s, 3)
        .Field("predicted_for", d.principal->predicted_for)
        .EndObject();
  } else {
    w.Null();
  }
}

/// {ratio, lo, hi, significant} of a rate change, or null.
void WriteChange(JsonWriter& w, const std::optional<analysis::RateChange>& c) {
  if (!c) {
    w.Null();
    return;
  }
  w.BeginObject()
      .Field("ratio", c->ratio, 4)
      .Field("lo", c->lo, 4)
      .Field("hi", c->hi, 4)
      .FieldBool("significant", c->significant)
      .EndObject();
}

std::string PassDid(const experiment::PassResult& p) {
  if (!p.run || !p.run->experiment.present) return "";
  const auto& e = p.run->experiment;
  std::string out;
  if (p.spec.id == experiment::PassId::kB) {
    out = fmt::format(
        "{} torch.save call{} skipped, {} eval forward{} served from cache ({} run for real)",
        e.saves_skipped, e.saves_skipped == 1 ? "" : "s", e.eval_forwards_cached,
        e.eval_forwards_cached == 1 ? "" : "s", e.eval_forwards_run);
  } else if (p.spec.id == experiment::PassId::kC) {
    out = fmt::format("{} batches served from {} cached", e.synthetic_batches_served,
                      e.synthetic_batches_cached);
    if (!e.synthetic_not_applied.empty()) out += "; not applied: " + e.synthetic_not_applied;
  }
  if (e.saves_redirected > 0)
    out += fmt::format("{}{} torch.save to scratch", out.empty() ? "" : "; ", e.saves_redirected);
  return out;
}

}  // namespace

std::string RenderPassesText(const experiment::PassesReport& r) {
  std::string out = Header("passes", r.dir, r.command, r.bound);
  out += fmt::format("{:<4}  {:<16}  {:>8}  {:<15}  {:<24}  {:>5}  {}\n", "PASS", "WHAT", "STEPS/S",
                     "95% INTERVAL", "VS BASELINE (95%)", "DATA", "VERDICT");
  for (const auto& p : r.passes) {
    const std::string_view id = experiment::PassIdName(p.spec.id);
    if (!p.run || !p.run->rate || !p.failure.empty()) {
      out += fmt::format("{:<4}  {:<16}  {}\n", id, p.spec.name,
                         EscapeControl(p.failure.empty() ? "no steps measured" : p.failure));
      continue;
    }
    std::string vs = "-";
    if (p.spec.id != experiment::PassId::kA && p.vs_baseline) {
      vs = fmt::format("{:.2f}x ({:.2f}-{:.2f}){}", p.vs_baseline->ratio, p.vs_baseline->lo,
                       p.vs_baseline->hi,
                       p.removed_nothing             ? " nothing removed"
                       : !p.vs_baseline->significant ? " n.s."
                                                     : "");
    }
    // The verdict of A only: B's and C's runs are not the job as it is.
    out += fmt::format("{:<4}  {:<16}  {:>8}  {:<15}  {:<24}  {:>5}  {}\n", id, p.spec.name,
                       Rate(*p.run), Interval(*p.run), vs, Share(p.run->data_share),
                       p.spec.id == experiment::PassId::kA ? VerdictClass(*p.run) : "");
  }
  out += "VS BASELINE: against A and A2 pooled (A2: against A, the machine's drift)\n\n";
  for (const auto& p : r.passes) {
    if (p.spec.id == experiment::PassId::kA) continue;
    if (p.spec.id == experiment::PassId::kA2) continue;
    std::string did = PassDid(p);
    out += fmt::format("{} removes {}{}\n", experiment::PassIdName(p.spec.id), p.spec.removes,
                       did.empty() ? "" : fmt::format("\n  (this run: {})", EscapeControl(did)));
  }
  if (!r.passes.empty() && r.passes.front().run &&
      r.passes.front().run->host_syncs_per_step >= 0.5) {
    out += fmt::format(
        "Host syncs ({:.1f} per step in A: .item(), .cpu(), ...) are counted, not removable by a "
        "pass: the verdict weighs them\n",
        r.passes.front().run->host_syncs_per_step);
  }
  out += fmt::format("\nCONCLUSION  {}\n", EscapeControl(r.conclusion.text));
  for (const auto& c : r.conclusion.caveats) out += fmt::format("CAVEAT      {}\n", c);
  const experiment::PassResult* a = r.passes.empty() ? nullptr : &r.passes.front();
  if (a != nullptr && a->run && a->run->principal && r.conclusion.agrees.value_or(false) &&
      !a->run->principal->recommendations.empty()) {
    out += fmt::format("FIX         {}\n",
                       EscapeControl(a->run->principal->recommendations.front().text));
  } else if (r.conclusion.agrees.has_value() && !*r.conclusion.agrees) {
    out +=
        "NEXT        the passes and the verdict disagree: compare the runs (stallscope compare "
        "A_DIR C_DIR) and read each report (stallscope diagnose DIR)\n";
  }
  if (r.conclusion.recovering == experiment::PassId::kC) {
    out += "NEXT        stallscope sweep --set num_workers=... -- CMD finds the setting\n";
  }
  out +=
      fmt::format("Runs        {}/{{A,B,C,A2}} (stallscope diagnose DIR for each pass's report)\n",
                  EscapeControl(r.dir));
  return out;
}

std::string RenderPassesJson(const experiment::PassesReport& r) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject().Field("dir", r.dir).FieldArray("command", r.command).Field("bound", r.bound);
  w.Key("passes").BeginArray();
  for (const auto& p : r.passes) {
    w.BeginObject()
        .Field("id", experiment::PassIdName(p.spec.id))
        .Field("name", p.spec.name)
        .Field("removes", p.spec.removes)
        .Field("run_dir", p.run ? p.run->dir : std::string())
        .Field("failure", p.failure);
    if (p.run) WriteRate(w, *p.run);
    WriteChange(w.Key("vs_a"), p.vs_baseline);
    w.Field("did", PassDid(p)).FieldBool("removed_nothing", p.removed_nothing);
    w.EndObject();
  }
  w.EndArray();
  w.Key("conclusion")
      .BeginObject()
      .Field("recovering", r.conclusion.recovering
                               ? experiment::PassIdName(*r.conclusion.recovering)
                               : std::string_view())
      .Field("verdict_class", r.conclusion.verdict_class)
      .Field("required_ratio", r.conclusion.required_ratio, 3)
      .Field("agrees", r.conclusion.agrees)
      .Field("text", r.conclusion.text)
      .FieldArray("caveats", r.conclusion.caveats)
      .EndObject();
  w.EndObject();
  out += "\n";
  return out;
}

namespace {

std::string Variation(const RunDigest& d) {
  if (d.ranks.empty()) return "-";
  return fmt::format("{:.2f} {}", d.ranks.front().variation_ratio,
                     experiment::Sawtooth(d) ? "SAW" : "smooth");
}

std::string GpuUtil(const RunDigest& d) {
  auto u = experiment::JobGpuUtil(d);
  if (!u) return "-";
  auto s = experiment::GpuUtilSpread(d);
  return s ? fmt::format("{:.0f}% ({:.0f})", *u, *s) : fmt::format("{:.0f}%", *u);
}

std::string RunDirName(const experiment::ScalingRun& r) {
  return fmt::format("{}-process{}", r.processes, r.processes == 1 ? "" : "es");
}

}  // namespace

std::string ScalingRunDirName(const experiment::ScalingRun& r) { return RunDirName(r); }

std::string RenderScalingText(const experiment::ScalingReport& r) {
  std::string out = Header("passes --ranks", r.dir, r.command, r.bound);
  out += fmt::format("{:<5}  {:>11}  {:>8}  {:<15}  {:<11}  {:<14}  {}\n", "PROCS", "STEP MEDIAN",
                     "STEPS/S", "95% INTERVAL", "VARIATION", "GPU (SPREAD)", "VERDICT");
  for (const auto& run : r.runs) {
    if (!run.run || !run.run->rate || !run.failure.empty()) {
      out += fmt::format("{:>5}  {}\n", run.processes,
                         EscapeControl(run.failure.empty() ? "no steps measured" : run.failure));
      continue;
    }
    const RunDigest& d = *run.run;
    out += fmt::format("{:>5}  {:>11}  {:>8}  {:<15}  {:<11}  {:<14}  {}\n", run.processes,
                       d.ranks.empty() ? "-" : FormatDurationSeconds(d.ranks.front().median_step_s),
                       Rate(d), Interval(d), Variation(d), GpuUtil(d), VerdictClass(d));
  }
  out += fmt::format(
      "VARIATION: std/mean of rank 0's step time, SAW above {:.1f} (seed 003); GPU: mean "
      "utilization of the job's GPUs (spread: max - min, points)\n",
      kThresholds.oscillation_ratio.value);
  if (const auto& c = r.conclusion.change; c && r.runs.size() >= 2) {
    out += fmt::format(
        "{} vs {} processes: {:.2f}x the steps/s (95% {:.2f}-{:.2f}){}; ideal 1.00x when each "
        "process trains its own batch\n",
        r.runs.back().processes, r.runs.front().processes, c->ratio, c->lo, c->hi,
        c->significant ? "" : ", not significant");
  }
  for (const auto& run : r.runs) {
    if (!run.run || run.run->ranks.size() < 2) continue;
    out += fmt::format("\nRanks of the {}-process run:\n", run.processes);
    for (const auto& rank : run.run->ranks) {
      std::string periodic;
      for (const auto& p : run.run->periodic) {
        if (p.rank != rank.rank) continue;
        periodic += fmt::format("{}{} {} (+{} each)", periodic.empty() ? "  slow: " : ", ", p.phase,
                                p.every_steps > 0 ? fmt::format("every {} steps", p.every_steps)
                                                  : fmt::format("{}×", p.occurrences),
                                FormatDurationSeconds(p.extra_s_each));
      }
      out += fmt::format("  rank {:<3} {:>4} steps  median {:>9}  variation {:.2f}{}\n", rank.rank,
                         rank.steps, FormatDurationSeconds(rank.median_step_s),
                         rank.variation_ratio, EscapeControl(periodic));
    }
  }
  const auto& c = r.conclusion;
  out += fmt::format("\nCONCLUSION  {}: {}\n", experiment::ScalingClassName(c.cls),
                     EscapeControl(c.text));
  for (const auto& e : c.evidence) out += fmt::format("EVIDENCE    {}\n", EscapeControl(e));
  for (size_t i = 0; i < c.fixes.size(); ++i) {
    out += fmt::format("{}{}. {}\n", i == 0 ? "FIX         " : "            ", i + 1,
                       EscapeControl(c.fixes[i]));
  }
  std::string dirs;
  for (const auto& run : r.runs) dirs += (dirs.empty() ? "" : ",") + RunDirName(run);
  out += fmt::format("Runs        {}/{{{}}} (stallscope diagnose DIR for each run's report)\n",
                     EscapeControl(r.dir), dirs);
  return out;
}

std::string RenderScalingJson(const experiment::ScalingReport& r) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject()
      .Field("kind", "ranks")
      .Field("dir", r.dir)
      .FieldArray("command", r.command)
      .Field("launcher", r.launcher)
      .Field("bound", r.bound);
  w.Key("runs").BeginArray();
  for (const auto& run : r.runs) {
    w.BeginObject()
        .Field("processes", static_cast<int64_t>(run.processes))
        .FieldArray("command", run.command)
        .Field("run_dir", run.run ? run.run->dir : std::string())
        .Field("failure", run.failure);
    if (run.run) {
      const RunDigest& d = *run.run;
      WriteRate(w, d);
      w.Field("median_step_s",
              d.ranks.empty() ? std::nullopt : std::optional<double>(d.ranks.front().median_step_s),
              6)
          .Field("variation_ratio",
                 d.ranks.empty() ? std::nullopt
                                 : std::optional<double>(d.ranks.front().variation_ratio),
                 3)
          .FieldBool("sawtooth", experiment::Sawtooth(d))
          .Field("job_gpu_util_pct", experiment::JobGpuUtil(d), 1)
          .Field("job_gpu_util_spread_pct", experiment::GpuUtilSpread(d), 1);
      w.Key("job_gpus").BeginArray();
      for (const auto& g : d.job_gpus) {
        w.BeginObject()
            .Field("index", static_cast<int64_t>(g.index))
            .Field("util_pct", g.util_pct, 1)
            .EndObject();
      }
      w.EndArray().Key("ranks").BeginArray();
      for (const auto& rank : d.ranks) {
        w.BeginObject()
            .Field("rank", static_cast<int64_t>(rank.rank))
            .Field("steps", rank.steps)
            .Field("median_step_s", rank.median_step_s, 6)
            .Field("variation_ratio", rank.variation_ratio, 3);
        w.Key("slow").BeginArray();
        for (const auto& p : d.periodic) {
          if (p.rank != rank.rank) continue;
          w.BeginObject()
              .Field("phase", p.phase)
              .Field("every_steps", p.every_steps)
              .Field("occurrences", p.occurrences)
              .Field("extra_s_each", p.extra_s_each, 4)
              .Field("share_of_wall", p.share_of_wall, 3)
              .EndObject();
        }
        w.EndArray().EndObject();
      }
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray();
  const auto& c = r.conclusion;
  WriteChange(w.Key("change"), c.change);
  w.Key("conclusion")
      .BeginObject()
      .Field("class", experiment::ScalingClassName(c.cls))
      .Field("text", c.text)
      .Field("cost_fraction", c.cost_fraction, 3)
      .FieldArray("evidence", c.evidence)
      .FieldArray("fixes", c.fixes)
      .EndObject();
  w.EndObject();
  out += "\n";
  return out;
}

std::string RenderSweepText(const experiment::SweepReport& r) {
  constexpr int kBar = 40;
  std::string out = Header("sweep", r.dir, r.command, r.bound);
  size_t width = 7;
  for (const auto& row : r.rows) width = std::max(width, row.point.label.size());
  out += fmt::format("{:<{}}  {:>8}  {:<15}  {:>9}  {:>5}  {:>5}  {:>9}  {:>5}  {}\n", "SETTING",
                     width, "STEPS/S", "95% INTERVAL", "SAMPLES/S", "DATA", "GPU", "PEAK RSS",
                     "CPUS", "VERDICT");
  for (size_t i : r.summary.order) {
    const auto& row = r.rows[i];
    std::string label = EscapeControl(row.point.label);
    if (!row.run || !row.run->rate || !row.failure.empty()) {
      out += fmt::format("{:<{}}  {}\n", label, width, EscapeControl(row.failure));
      continue;
    }
    const RunDigest& d = *row.run;
    out += fmt::format(
        "{:<{}}  {:>8}  {:<15}  {:>9}  {:>5}  {:>5}  {:>9}  {:>5}  {}\n", label, width, Rate(d),
        Interval(d), d.samples_per_s ? fmt::format("{:.1f}", *d.samples_per_s) : "-",
        Share(d.data_share), d.gpu_util_pct ? fmt::format("{:.0f}%", *d.gpu_util_pct) : "-",
        d.peak_rss_bytes ? FormatBytes(static_cast<double>(*d.peak_rss_bytes)) : "-",
        d.job_cpus ? fmt::format("{:.1f}", *d.job_cpus) : "-", VerdictClass(d));
  }
  if (r.summary.best) {
    const double best = r.rows[*r.summary.best].run->rate->per_s;
    out += "\n";
    for (size_t i : r.summary.order) {
      const auto& row = r.rows[i];
      if (!row.run || !row.run->rate || !row.failure.empty()) continue;
      int n = static_cast<int>(row.run->rate->per_s / best * kBar + 0.5);
      std::string bar;
      for (int k = 0; k < n; ++k) bar += "█";
      out += fmt::format("{:<{}}  {} {:.2f}\n", EscapeControl(row.point.label), width, bar,
                         row.run->rate->per_s);
    }
    out += fmt::format("\nBEST         {} ({:.2f} steps/s)\n",
                       EscapeControl(r.rows[*r.summary.best].point.label), best);
  } else {
    out += "\nBEST         none: no combination gave a step rate\n";
  }
  if (r.summary.recommended) {
    const auto& rec = r.rows[*r.summary.recommended];
    out += fmt::format(
        "RECOMMENDED  {} ({:.2f} steps/s): the least job CPU within {:.0f}% of the best\n",
        EscapeControl(rec.point.label), rec.run->rate->per_s,
        (1 - kThresholds.sweep_recommend_within.value) * 100);
  }
  for (const auto& c : r.summary.predictions) {
    out += fmt::format(
        "PREDICTION   the verdict of {} predicted {:.2f} steps/s with {}; measured {:.2f} "
        "({:+.0f}%)\n",
        EscapeControl(r.rows[c.from].point.label), c.predicted, EscapeControl(c.setting),
        c.measured, c.error * 100);
  }
  out += fmt::format("Runs         {}/ (one run directory per setting: stallscope diagnose DIR)\n",
                     EscapeControl(r.dir));
  return out;
}

std::string RenderSweepJson(const experiment::SweepReport& r) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject().Field("dir", r.dir).FieldArray("command", r.command).Field("bound", r.bound);
  w.Key("rows").BeginArray();
  for (size_t i : r.summary.order) {
    const auto& row = r.rows[i];
    w.BeginObject().Field("label", row.point.label);
    w.Key("setting").BeginObject();
    for (const auto& [k, v] : row.point.setting) w.Field(k, v);
    w.EndObject();
    w.FieldArray("command", row.point.command)
        .Field("run_dir", row.run ? row.run->dir : std::string())
        .Field("failure", row.failure);
    if (row.run) WriteRate(w, *row.run);
    w.EndObject();
  }
  w.EndArray();
  auto label = [&](const std::optional<size_t>& i) {
    return i ? r.rows[*i].point.label : std::string();
  };
  w.Field("best", label(r.summary.best)).Field("recommended", label(r.summary.recommended));
  w.Key("predictions").BeginArray();
  for (const auto& c : r.summary.predictions) {
    w.BeginObject()
        .Field("by", r.rows[c.from].point.label)
        .Field("setting", c.setting)
        .Field("predicted_steps_per_s", c.predicted, 4)
        .Field("measured_steps_per_s", c.measured, 4)
        .Field("error", c.error, 4)
        .EndObject();
  }
  w.EndArray().EndObject();
  out += "\n";
  return out;
}

}  // namespace stallscope::report
