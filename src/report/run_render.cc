#include "report/run_render.h"

#include <algorithm>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/json_writer.h"
#include "base/thresholds.h"
#include "base/units.h"
#include "report/ledger_render.h"
#include "report/life_render.h"
#include "report/render.h"
#include "report/stacks_render.h"

namespace stallscope::report {

namespace {

/// Host-sync call sites shown in the text report (all of them are in the JSON).
constexpr size_t kSyncSitesShown = 5;

template <typename T>
std::string OptText(const std::optional<T>& v) {
  if (!v) return "None";
  if constexpr (std::is_same_v<T, bool>) return *v ? "True" : "False";
  return fmt::format("{}", *v);
}

std::string JobLines(const diagnose::RunReport& r) {
  std::string exit = r.meta.exit_code ? fmt::format("exit {}", *r.meta.exit_code)
                                      : "no exit code (still running or monitor killed)";
  if (r.meta.status == rundir::RunStatus::kStopped) {
    exit += " (stopped by stallscope at its --duration)";
  } else if (r.meta.exit_code && *r.meta.exit_code > 128) {
    exit += fmt::format(" (killed by signal {})", *r.meta.exit_code - 128);
  }
  std::string out = fmt::format("Job     {}\n        {}, {} wall\n",
                                EscapeControl(rundir::ShellJoin(r.meta.command)), exit,
                                FormatDurationSeconds(r.wall_s));
  if (r.life.has_steps) out += fmt::format("Life    {}\n", RenderLifeLine(r.life));
  for (const auto& rank : r.phases.ranks) {
    const std::string warmup =
        rank.warmup.empty() ? std::string() : fmt::format(" (+{} warm-up)", rank.warmup.size());
    out += fmt::format(
        "Steps   rank {}: {} steady steps{}, {:.2f} steps/s, step {} ± {} (variation {:.2f}{})\n",
        rank.rank, rank.count, warmup, rank.per_second, FormatDurationSeconds(rank.mean_step_s),
        FormatDurationSeconds(rank.std_step_s), rank.variation_ratio,
        rank.oscillating ? fmt::format(", OSCILLATING: > {}", kThresholds.oscillation_ratio.value)
                         : std::string());
  }
  for (size_t i = 0; i < r.no_phases.size(); ++i) {
    out += fmt::format("{}{}\n", i == 0 ? "Steps   none: " : "        ",
                       EscapeControl(r.no_phases[i]));
  }
  return out;
}

/// One line per distinct interpreter (version, executable, recorder), then how torch's phases are
/// measured where the hooks noted it.
std::string PythonLines(const std::vector<rundir::PythonProcess>& python) {
  struct Group {
    const rundir::PythonProcess* first = nullptr;
    size_t count = 0;
  };
  std::vector<std::pair<std::string, Group>> groups;
  for (const auto& p : python) {
    std::string recorder = p.backend ? *p.backend : "none";
    if (!p.recording && p.backend_error) recorder = "none (" + *p.backend_error + ")";
    std::string key = fmt::format("{} {} {}{}, recorder {}{}",
                                  p.implementation == "cpython" ? "CPython" : p.implementation,
                                  p.version, p.executable, p.venv ? " (venv)" : "", recorder,
                                  p.shim ? "" : ", no startup hook");
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) {
      groups.push_back({key, Group{&p, 0}});
      it = groups.end() - 1;
    }
    ++it->second.count;
  }
  std::string out;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& [key, g] = groups[i];
    out += fmt::format("{}{}: {} process{}\n", i == 0 ? "Python  " : "        ", EscapeControl(key),
                       g.count, g.count == 1 ? "" : "es");
  }
  for (const auto& p : python) {
    if (!p.hooks_noted) continue;
    std::string how;
    for (const auto& [phase, mechanism] : p.mechanisms) {
      how += fmt::format("{}{} {}", how.empty() ? "" : ", ", phase, mechanism);
    }
    if (p.hooks_error) how = "failed: " + *p.hooks_error;
    out += fmt::format("        torch {}: {}\n", EscapeControl(p.torch_version.value_or("?")),
                       EscapeControl(how));
    break;  // every process of a job runs the same torch: one line says it
  }
  return out;
}

std::string OverheadLine(const diagnose::RunOverhead& o) {
  if (!o.monitor_cpu_s) return "";
  std::string out =
      fmt::format("Overhead stallscope used {} of CPU", FormatDurationSeconds(*o.monitor_cpu_s));
  if (o.job_cpu_s && o.monitor_share) {
    out += fmt::format(" = {:.2f}% of the job's {}", *o.monitor_share * 100,
                       FormatDurationSeconds(*o.job_cpu_s));
  }
  if (o.records_per_step) {
    out += fmt::format("; the job wrote {:.1f} phase records per step", *o.records_per_step);
  }
  return out + "\n";
}

std::string LoaderLines(const std::vector<rundir::LoaderInfo>& loaders) {
  std::string out;
  for (const auto& l : loaders) {
    out += fmt::format(
        "DataLoader (rank {}): num_workers={} batch_size={} pin_memory={} persistent_workers={} "
        "prefetch_factor={} drop_last={} dataset={} samples",
        l.rank, OptText(l.num_workers), OptText(l.batch_size), OptText(l.pin_memory),
        OptText(l.persistent_workers), OptText(l.prefetch_factor), OptText(l.drop_last),
        OptText(l.dataset_length));
    if (!l.worker_pids.empty()) out += fmt::format(", workers {}", fmt::join(l.worker_pids, " "));
    out += "\n";
  }
  return out;
}

std::string ProcessTable(const std::vector<diagnose::ProcessRow>& rows) {
  if (rows.empty()) return "";
  std::string out = fmt::format(
      "\n{:>7}  {:<18} {:<26} {:>6} {:>6} {:>5} {:>5} {:>5} {:>4} {:>9} {:>9}\n", "PID", "ROLE",
      "COMMAND", "CPU%", "MAX%", "RUN", "SLEEP", "DISK", "THR", "READ", "WRITTEN");
  for (const auto& p : rows) {
    // Escaped before eliding, so the column is measured on what the terminal shows.
    const std::string cmd = Elide(EscapeControl(p.cmdline.empty() ? p.comm : p.cmdline), 26);
    out += fmt::format(
        "{:>7}  {:<18} {:<26} {:>6.1f} {:>6.1f} {:>4.0f}% {:>4.0f}% {:>4.0f}% {:>4} {:>9} {:>9}\n",
        p.pid, ToString(p.role), cmd, p.cpu_mean_pct, p.cpu_max_pct, p.running_fraction * 100,
        p.sleeping_fraction * 100, p.blocked_fraction * 100, p.threads_max,
        FormatBytes(static_cast<double>(p.read_bytes)),
        FormatBytes(static_cast<double>(p.write_bytes)));
  }
  return out;
}

std::string MachineLines(const diagnose::RunReport& r) {
  const auto& m = r.machine;
  std::string out = "\n";
  if (m.gpus.empty()) {
    out += fmt::format("GPU     {}\n", m.gpu_note.empty() ? "none" : EscapeControl(m.gpu_note));
  }
  for (const auto& g : m.gpus) {
    out += fmt::format("GPU {}   util {:.1f}%", g.index, g.util_pct.mean());
    if (g.util_fine_pct.count() > 0)
      out += fmt::format(" (sub-second {:.1f}%, min {:.0f}%, max {:.0f}%)", g.util_fine_pct.mean(),
                         g.util_fine_pct.min(), g.util_fine_pct.max());
    if (g.memory_used_mib.count() > 0)
      out += fmt::format(", memory {:.0f} MiB", g.memory_used_mib.mean());
    if (g.power_w.count() > 0) out += fmt::format(", power {:.0f} W", g.power_w.mean());
    if (g.throttled_samples > 0)
      out += fmt::format(", throttled in {}/{} samples", g.throttled_samples, g.samples);
    if (g.gpm_sm_active_pct.count() > 0) {
      out += fmt::format(", SM active {:.0f}%", g.gpm_sm_active_pct.mean());
      if (g.gpm_tensor_active_pct.count() > 0)
        out += fmt::format(", tensor {:.0f}%", g.gpm_tensor_active_pct.mean());
      out += fmt::format(" (GPM, {} window{})", g.gpm_sm_active_pct.count(),
                         g.gpm_sm_active_pct.count() == 1 ? "" : "s");
    }
    out += "\n";
  }
  if (m.cpu_busy_pct.count() > 0) {
    out +=
        fmt::format("Host    CPU busy {:.1f}% (max {:.1f}%), iowait {:.1f}%, over {} samples{}\n",
                    m.cpu_busy_pct.mean(), m.cpu_busy_pct.max(), m.cpu_iowait_pct.mean(), m.samples,
                    r.life.has_steps ? " of the steady state" : "");
  } else if (r.life.has_steps && m.samples == 0) {
    out += "Host    no sample fell in the steady state: run it longer, or sample faster (-i)\n";
  }
  return out;
}

std::string FindingHeadline(const diagnose::Finding& f) {
  // gpu_bound is the good case: its share is the work itself, not time lost (issue 39).
  if (f.cls == diagnose::FindingClass::kGpuBound) {
    return fmt::format("{} (confidence {:.2f}, the work itself: {:.0f}% of the step)",
                       diagnose::FindingClassName(f.cls), f.confidence, f.cost_fraction * 100);
  }
  return fmt::format("{} (confidence {:.2f}, costs ~{:.0f}% of wall time)",
                     diagnose::FindingClassName(f.cls), f.confidence, f.cost_fraction * 100);
}

std::string VerdictLines(const diagnose::RunReport& r) {
  std::optional<double> now;
  if (!r.phases.ranks.empty()) now = r.phases.ranks.front().per_second;
  return RenderVerdictText(r.verdict, now);
}

/// One "phases" entry. `side_pid`: of a side process (issue 27 B08: a process of the rank that
/// marks no steps, e.g. a forked child), whose share is of its own span of events, not of steps.
void WriteStatsJson(JsonWriter& w, const analysis::PhaseStats& p,
                    std::optional<int32_t> side_pid = std::nullopt) {
  w.BeginObject()
      .Field("name", p.name)
      .Field("rank", p.rank)
      .Field("count", p.count)
      .Field("total_s", p.total_s, 6)
      .Field("share", p.share, 4)
      .Field("mean_s", p.mean_s, 6)
      .Field("std_s", p.std_s, 6)
      .Field("min_s", p.min_s, 6)
      .Field("max_s", p.max_s, 6)
      .Field("p50_s", p.p50_s, 6)
      .Field("p95_s", p.p95_s, 6)
      .Field("p99_s", p.p99_s, 6);
  if (p.gpu) {
    w.Key("gpu")
        .BeginObject()
        .Field("count", p.gpu->count)
        .Field("total_s", p.gpu->total_s, 6)
        .Field("share", p.gpu->share, 4)
        .Field("mean_s", p.gpu->mean_s, 6)
        .Field("max_s", p.gpu->max_s, 6)
        .EndObject();
  }
  if (side_pid) w.Field("pid", *side_pid).FieldBool("side_process", true);
  w.EndObject();
}

}  // namespace

std::string RenderVerdictText(const diagnose::Verdict& v, std::optional<double> steps_per_s) {
  std::string note = v.compute_time_note.empty()
                         ? ""
                         : fmt::format("         ({})\n", EscapeControl(v.compute_time_note));
  std::string caveats;
  for (const auto& c : v.caveats) caveats += fmt::format("CAVEAT   {}\n", EscapeControl(c));
  if (!v.principal)
    return "VERDICT  none: no bottleneck named (no steps measured, or nothing above its threshold "
           "and the GPU not busy enough to call it GPU-bound)\n" +
           note + caveats;
  const diagnose::Finding& f = *v.principal;
  // Reasons, fixes and evidence quote phase, kernel and process names: escaped for the terminal.
  std::string out =
      fmt::format("VERDICT  {}\n         {}\n", FindingHeadline(f), EscapeControl(f.reason));
  out += note;
  if (f.predicted_steps_per_s && steps_per_s) {
    out += fmt::format("         predicted after the first fix: {:.2f} steps/s (now {:.2f})\n",
                       *f.predicted_steps_per_s, *steps_per_s);
  }
  out += caveats;
  for (size_t i = 0; i < f.recommendations.size(); ++i) {
    out += fmt::format("{}{}. {}\n", i == 0 ? "FIX      " : "         ", i + 1,
                       EscapeControl(f.recommendations[i].text));
  }
  for (size_t i = 0; i < f.evidence.size(); ++i) {
    out += fmt::format("{}{}\n", i == 0 ? "EVIDENCE " : "         ",
                       EscapeControl(f.evidence[i].text));
  }
  for (size_t i = 0; i < v.secondary.size(); ++i) {
    const auto& s2 = v.secondary[i];
    out += fmt::format("{}{}: {}\n", i == 0 ? "ALSO     " : "         ", FindingHeadline(s2),
                       EscapeControl(s2.reason));
    if (!s2.recommendations.empty())
      out += fmt::format("           fix: {}\n", EscapeControl(s2.recommendations.front().text));
  }
  return out;
}

void WriteFindingJson(JsonWriter& w, const diagnose::Finding& f) {
  w.BeginObject()
      .Field("class", diagnose::FindingClassName(f.cls))
      .Field("confidence", f.confidence, 2)
      .Field("cost_fraction", f.cost_fraction, 3)
      .Field("reason", f.reason)
      .Field("predicted_steps_per_s", f.predicted_steps_per_s, 3);
  w.Key("evidence").BeginArray();
  for (const auto& e : f.evidence) {
    w.BeginObject()
        .Field("text", e.text)
        .Field("metric", e.metric)
        .Field("value", e.value, 4)
        .Field("unit", e.unit);
    w.Field("threshold", e.threshold, 4).EndObject();
  }
  w.EndArray().Key("recommendations").BeginArray();
  for (const auto& rec : f.recommendations)
    w.BeginObject().Field("text", rec.text).Field("cost", rec.cost).EndObject();
  w.EndArray().EndObject();
}

void WriteVerdictJson(JsonWriter& w, const diagnose::Verdict& v) {
  w.Key("verdict").BeginObject().Key("principal");
  if (v.principal) {
    WriteFindingJson(w, *v.principal);
  } else {
    w.Null();
  }
  w.Key("secondary").BeginArray();
  for (const auto& f : v.secondary) WriteFindingJson(w, f);
  w.EndArray().Key("compute_time");
  if (v.compute_time == diagnose::ComputeTime::kUnknown) {
    w.Null();
  } else {
    w.String(diagnose::ComputeTimeName(v.compute_time));
  }
  w.Field("compute_time_note", v.compute_time_note).Key("caveats").BeginArray();
  for (const auto& c : v.caveats) w.String(c);
  w.EndArray().EndObject();
}

std::string RenderPhaseTable(const analysis::PhaseAnalysis& phases) {
  std::string out;
  int32_t current_rank = -1;
  // GPU columns (CUDA events) only when the job recorded GPU times.
  bool gpu = std::any_of(phases.phases.begin(), phases.phases.end(),
                         [](const analysis::PhaseStats& p) { return p.gpu.has_value(); });
  for (const auto& p : phases.phases) {
    if (p.rank != current_rank) {
      current_rank = p.rank;
      out += fmt::format("\nPhases (rank {})      {:>6} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
                         p.rank, "count", "total", "share", "mean", "p50", "p95", "p99", "max");
      out += gpu ? fmt::format("  {:>9} {:>6}\n", "gpu mean", "gpu") : "\n";
    }
    out += fmt::format("  {:<19} {:>6} {:>9} {:>5.1f}% {:>9} {:>9} {:>9} {:>9} {:>9}",
                       EscapeControl(p.name), p.count, FormatDurationSeconds(p.total_s),
                       p.share * 100, FormatDurationSeconds(p.mean_s),
                       FormatDurationSeconds(p.p50_s), FormatDurationSeconds(p.p95_s),
                       FormatDurationSeconds(p.p99_s), FormatDurationSeconds(p.max_s));
    if (p.gpu) {
      out += fmt::format("  {:>9} {:>5.1f}%", FormatDurationSeconds(p.gpu->mean_s),
                         p.gpu->share * 100);
    }
    out += '\n';
  }
  // Issue 27 B08: processes of a rank that mark no steps (forked children, a daemon, DataLoader
  // workers with markers) apart, each share of that process's own span of events.
  for (const auto& side : phases.other_processes) {
    out += fmt::format(
        "\n{:<21} {:>6} {:>9} {:>6} {:>9} {:>9}   rank {}: a side process, no steps of its own; "
        "shares of its own span\n",
        fmt::format("Phases (pid {})", side.pid), "count", "total", "share", "mean", "max",
        side.rank);
    for (const auto& p : side.phases) {
      out += fmt::format("  {:<19} {:>6} {:>9} {:>5.1f}% {:>9} {:>9}\n", EscapeControl(p.name),
                         p.count, FormatDurationSeconds(p.total_s), p.share * 100,
                         FormatDurationSeconds(p.mean_s), FormatDurationSeconds(p.max_s));
    }
  }
  return out;
}

std::string RenderRunReportText(const diagnose::RunReport& r) {
  std::string out = fmt::format("stallscope run report: {}  ({})\n", EscapeControl(r.meta.name),
                                EscapeControl(r.dir));
  out += RenderLifeHeadline(r.life);
  out += VerdictLines(r);
  out += '\n';
  if (!r.ledger.empty()) {
    out += RenderLedgerText(r.ledger, &r.stacks);
    out += '\n';
  }
  out += JobLines(r);
  out += RenderPhaseTable(r.phases);
  if (!r.phases.counters_total.empty()) {
    // Totals of the whole run; per step over the steady steps, as every rate.
    std::map<std::string, int64_t> steady;
    int64_t steps = 0;
    for (const auto& rank : r.phases.ranks) {
      steps += rank.count;
      for (const auto& s : rank.steps) {
        for (const auto& [name, n] : s.counters) steady[name] += n;
      }
    }
    std::string syncs;
    for (const auto& [name, n] : r.phases.counters_total) {
      syncs += fmt::format("{}{} {}", syncs.empty() ? "" : ", ", n, EscapeControl(name));
      if (steps > 0)
        syncs += fmt::format(" ({:.1f}/steady step)",
                             static_cast<double>(steady[name]) / static_cast<double>(steps));
    }
    out += "Counters  " + syncs + "\n";
  }
  for (size_t i = 0; i < r.sync_sites.size() && i < kSyncSitesShown; ++i) {
    out += fmt::format("{}{}\n", i == 0 ? "Syncs at  " : "          ",
                       EscapeControl(diagnose::SyncSiteText(r.sync_sites[i])));
  }
  if (!r.loaders.empty()) {
    out += '\n';  // (not "\n" + string: GCC 12 -O3 warns falsely, -Wrestrict)
    out += LoaderLines(r.loaders);
  }
  if (!r.python.empty()) {
    out += '\n';
    out += PythonLines(r.python);
  }
  if (r.stacks.present) {
    out += '\n';
    out += RenderStacksText(r.stacks);
  }
  out += ProcessTable(r.processes);
  out += MachineLines(r);
  out += OverheadLine(r.overhead);
  for (const auto& w : r.warnings) out += fmt::format("warning: {}\n", EscapeControl(w));
  if (r.phases.lost_records > 0)
    out += fmt::format("warning: {} phase records lost (ring overrun)\n", r.phases.lost_records);
  out += fmt::format("\nCharts: {}/report.html (any run: stallscope report DIR --html FILE)\n",
                     EscapeControl(r.dir));
  out += fmt::format("Redo this analysis: stallscope diagnose {}\n", EscapeControl(r.dir));
  return out;
}

namespace {

void WriteJobJson(JsonWriter& w, const diagnose::RunReport& r) {
  w.Key("job")
      .BeginObject()
      .Field("name", r.meta.name)
      .FieldArray("command", r.meta.command)
      .Field("exit_code", r.meta.exit_code)
      .Field("status", rundir::RunStatusName(r.meta.status))
      .Field("wall_s", r.wall_s, 3);
  w.Field("start_time", FormatIsoUtc(r.meta.start_wall_ns))
      .FieldBool("auto_hooks", r.meta.auto_hooks)
      .FieldArray("no_phases", r.no_phases)
      .EndObject();
}

void WriteStepsJson(JsonWriter& w, const diagnose::RunReport& r) {
  int64_t steps = 0;
  double duration = 0;
  for (const auto& rank : r.phases.ranks) {
    steps = std::max(steps, rank.count);
    duration = std::max(duration, rank.duration_s);
  }
  w.Key("steps")
      .BeginObject()
      .Field("count", steps)
      .Field("per_second", duration > 0 ? static_cast<double>(steps) / duration : 0.0, 4);
  w.Key("ranks").BeginArray();
  for (const auto& rank : r.phases.ranks) {
    w.BeginObject().Field("rank", rank.rank).Field("pid", rank.pid).Field("count", rank.count);
    w.Field("per_second", rank.per_second, 4)
        .Field("mean_step_s", rank.mean_step_s, 6)
        .Field("std_step_s", rank.std_step_s, 6);
    w.Field("variation_ratio", rank.variation_ratio, 4).FieldBool("oscillating", rank.oscillating);
    w.Key("step_s").BeginArray();
    for (const auto& s : rank.steps) w.Double(NsToSeconds(s.end_ns - s.begin_ns), 6);
    w.EndArray().Field("warmup_steps", rank.warmup.size()).Key("warmup_step_s").BeginArray();
    for (const auto& s : rank.warmup) w.Double(NsToSeconds(s.end_ns - s.begin_ns), 6);
    w.EndArray().EndObject();
  }
  w.EndArray().EndObject();
}

void WriteSyncSitesJson(JsonWriter& w, const diagnose::RunReport& r) {
  w.Key("sync_sites").BeginArray();
  for (const auto& s : r.sync_sites) {
    w.BeginObject()
        .Field("pid", s.pid)
        .Field("rank", s.rank)
        .Field("kind", s.kind)
        .Field("file", s.file)
        .Field("line", s.line)
        .Field("function", s.function);
    if (!s.user_file.empty()) w.Field("user_file", s.user_file).Field("user_line", s.user_line);
    w.Field("count", s.count).EndObject();
  }
  w.EndArray();
}

}  // namespace

void WriteLoadersJson(JsonWriter& w, const std::vector<rundir::LoaderInfo>& loaders) {
  w.Key("dataloaders").BeginArray();
  for (const auto& l : loaders) {
    w.BeginObject()
        .Field("pid", l.pid)
        .Field("rank", l.rank)
        .Field("num_workers", l.num_workers)
        .Field("batch_size", l.batch_size);
    w.Field("pin_memory", l.pin_memory)
        .Field("persistent_workers", l.persistent_workers)
        .Field("prefetch_factor", l.prefetch_factor);
    w.Field("drop_last", l.drop_last)
        .Field("dataset_length", l.dataset_length)
        .Key("worker_pids")
        .BeginArray();
    for (int32_t pid : l.worker_pids) w.Int(pid);
    w.EndArray().EndObject();
  }
  w.EndArray();
}

void WriteProcessesJson(JsonWriter& w, const std::vector<diagnose::ProcessRow>& processes) {
  w.Key("processes").BeginArray();
  for (const auto& p : processes) {
    w.BeginObject()
        .Field("pid", p.pid)
        .Field("ppid", p.ppid)
        .Field("role", ToString(p.role))
        .Field("comm", p.comm)
        .Field("cmdline", p.cmdline);
    w.Field("samples", p.samples)
        .Field("cpu_mean_pct", p.cpu_mean_pct, 1)
        .Field("cpu_max_pct", p.cpu_max_pct, 1);
    w.Field("running_share", p.running_fraction, 3)
        .Field("sleeping_share", p.sleeping_fraction, 3)
        .Field("blocked_share", p.blocked_fraction, 3);
    w.Field("threads_max", p.threads_max)
        .Field("read_bytes", p.read_bytes)
        .Field("write_bytes", p.write_bytes);
    w.Field("nonvoluntary_switches_per_s", p.nonvoluntary_switches_per_s, 1).EndObject();
  }
  w.EndArray();
}

namespace {

void WritePythonJson(JsonWriter& w, const diagnose::RunReport& r) {
  w.Key("python").BeginArray();
  for (const auto& p : r.python) {
    w.BeginObject()
        .Field("pid", p.pid)
        .Field("ppid", p.ppid)
        .Field("implementation", p.implementation)
        .Field("version", p.version)
        .Field("executable", p.executable);
    w.FieldBool("venv", p.venv).FieldBool("shim", p.shim).FieldBool("recording", p.recording);
    w.Field("backend", p.backend).Field("backend_error", p.backend_error);
    w.Field("torch", p.torch_version).Field("hooks_error", p.hooks_error);
    w.Key("mechanisms").BeginObject();
    for (const auto& [phase, how] : p.mechanisms) w.Key(phase).String(how);
    w.EndObject().EndObject();
  }
  w.EndArray();
}

void WriteSeriesJson(JsonWriter& w, const diagnose::RunReport& r) {
  w.Key("series").BeginArray();
  for (const auto& s : r.series) {
    w.BeginObject().Field("name", s.name).Field("unit", s.unit).Key("points").BeginArray();
    for (const auto& p : s.points) w.BeginArray().Double(p.t_s, 3).Double(p.value, 2).EndArray();
    w.EndArray().EndObject();
  }
  w.EndArray();
}

}  // namespace

void WriteRunReportFields(JsonWriter& w, const diagnose::RunReport& r) {
  w.Field("schema_version", rundir::kRunSchemaVersion);
  WriteVerdictJson(w, r.verdict);
  WriteLedgerJson(w, r.ledger);
  WriteJobJson(w, r);
  WriteLifeJson(w, r.life, r.meta.start_mono_ns);
  WriteStepsJson(w, r);
  w.Key("phases").BeginArray();
  for (const auto& p : r.phases.phases) WriteStatsJson(w, p);
  for (const auto& side : r.phases.other_processes) {
    for (const auto& p : side.phases) WriteStatsJson(w, p, side.pid);
  }
  w.EndArray();
  w.Key("counters").BeginObject();
  for (const auto& [name, n] : r.phases.counters_total) w.Key(name).Int(n);
  w.EndObject();
  WriteSyncSitesJson(w, r);
  WriteLoadersJson(w, r.loaders);
  WriteProcessesJson(w, r.processes);
  WritePythonJson(w, r);
  w.Key("overhead")
      .BeginObject()
      .Field("monitor_cpu_s", r.overhead.monitor_cpu_s, 3)
      .Field("job_cpu_s", r.overhead.job_cpu_s, 3)
      .Field("monitor_share", r.overhead.monitor_share, 5)
      .Field("records", r.overhead.records)
      .Field("records_per_step", r.overhead.records_per_step, 2)
      .EndObject();
  WriteStacksJson(w, r.stacks);
  WriteSeriesJson(w, r);
  w.FieldArray("warnings", r.warnings);
}

std::string RenderRunReportJson(const diagnose::RunReport& r) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject();
  WriteRunReportFields(w, r);
  w.EndObject();
  out += "\n";
  return out;
}

}  // namespace stallscope::report
