#include "report/html_data.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "analysis/phases.h"
#include "base/json_writer.h"
#include "base/stats.h"
#include "base/units.h"
#include "base/vocabulary.h"
#include "report/life_render.h"
#include "report/run_render.h"
#include "report/stacks_render.h"
#include "rundir/run_dir.h"
#include "trace/kernels.h"

namespace stallscope::report {
namespace {

using diagnose::Series;
using diagnose::SeriesPoint;

constexpr int kSchemaVersion = 1;

void WriteSeriesList(JsonWriter& w, const std::vector<Series>& series, const PageLimits& limits) {
  size_t per_series =
      series.empty() ? limits.max_buckets_per_series : limits.total_points / (2 * series.size());
  per_series = std::clamp<size_t>(per_series, 50, limits.max_buckets_per_series);
  w.Key("series").BeginArray();
  for (const Series& s : series) {
    if (s.points.empty()) continue;
    std::vector<SeriesPoint> pts = EnvelopeSeries(s.points, per_series);
    w.BeginObject().Field("name", s.name).Field("unit", s.unit).Key("t").BeginArray();
    for (const auto& p : pts) w.Double(p.t_s, 3);
    w.EndArray().Key("v").BeginArray();
    for (const auto& p : pts) w.Double(p.value, 1);
    w.EndArray().EndObject();
  }
  w.EndArray();
}

/// The phases drawn as bands: the input pipeline, the model's work, communication and side work.
bool BandPhase(std::string_view name) {
  return name == phase_name::kDataLoading || name == phase_name::kForward ||
         name == phase_name::kBackward || name == phase_name::kOptimizer ||
         name == phase_name::kCommWait || name == "checkpointing" || name == "evaluation" ||
         name == "sampling" || name == "logging";
}

/// Each band phase of one process as merged intervals: neighbours closer than `merge_s` join,
/// then the closest pairs join until at most `max` remain.
void WriteBands(JsonWriter& w, const analysis::RankSteps& rank_steps, int64_t t0_ns, double span_s,
                const PageLimits& limits) {
  const int32_t rank = rank_steps.rank;
  std::map<std::string, std::vector<std::pair<double, double>>> by_phase;
  for (const auto& i : rank_steps.intervals) {
    if (!BandPhase(i.name)) continue;
    by_phase[i.name].emplace_back(NsToSeconds(i.begin_ns - t0_ns), NsToSeconds(i.end_ns - t0_ns));
  }
  for (auto& [name, iv] : by_phase) {
    std::sort(iv.begin(), iv.end());
    double merge_s = span_s / static_cast<double>(limits.max_bands_per_phase);
    for (int pass = 0; pass < 8; ++pass) {
      std::vector<std::pair<double, double>> merged;
      for (const auto& x : iv) {
        if (!merged.empty() && x.first - merged.back().second <= merge_s) {
          merged.back().second = std::max(merged.back().second, x.second);
        } else {
          merged.push_back(x);
        }
      }
      iv = std::move(merged);
      if (iv.size() <= limits.max_bands_per_phase) break;
      merge_s *= 2;
    }
    w.BeginObject().Field("rank", rank).Field("phase", name).Key("b").BeginArray();
    for (const auto& x : iv) w.Double(x.first, 4);
    w.EndArray().Key("e").BeginArray();
    for (const auto& x : iv) w.Double(x.second, 4);
    w.EndArray().EndObject();
  }
}

/// The steps of each rank: end time, duration, outliers (robust z), the detected period.
void WriteSteps(JsonWriter& w, const analysis::PhaseAnalysis& phases, int64_t t0_ns,
                const PageLimits& limits) {
  w.Key("steps").BeginArray();
  for (const auto& r : phases.ranks) {
    std::vector<double> dur;
    dur.reserve(r.steps.size());
    for (const auto& s : r.steps) dur.push_back(NsToSeconds(s.end_ns - s.begin_ns));
    analysis::Outliers out = analysis::FindOutliers(dur);
    std::optional<analysis::Period> period = analysis::DetectPeriod(dur);
    std::set<size_t> keep(out.indices.begin(), out.indices.end());
    size_t stride = std::max<size_t>(1, (dur.size() + limits.max_steps - 1) / limits.max_steps);
    w.BeginObject()
        .Field("rank", r.rank)
        .Field("per_s", r.per_second, 3)
        .Field("mean_ms", r.mean_step_s * 1e3, 3)
        .Field("variation", r.variation_ratio, 3)
        .Key("t")
        .BeginArray();
    std::vector<size_t> shown;
    for (size_t i = 0; i < dur.size(); ++i) {
      if (i % stride == 0 || keep.count(i) > 0) shown.push_back(i);
    }
    for (size_t i : shown) w.Double(NsToSeconds(r.steps[i].end_ns - t0_ns), 4);
    w.EndArray().Key("ms").BeginArray();
    for (size_t i : shown) w.Double(dur[i] * 1e3, 3);
    w.EndArray().Key("outliers").BeginArray();
    for (size_t k = 0; k < shown.size(); ++k) {
      if (keep.count(shown[k]) > 0) w.Int(k);
    }
    w.EndArray().Key("period");
    if (period && period->significant) {
      w.Double(period->period, 2);
    } else {
      w.Null();
    }
    w.EndObject();
  }
  w.EndArray();
}

/// Per rank, the phase milliseconds of each step (the stacked step-breakdown bars).
void WriteStepPhases(JsonWriter& w, const analysis::PhaseAnalysis& phases,
                     const PageLimits& limits) {
  w.Key("step_phases").BeginArray();
  for (const auto& r : phases.ranks) {
    std::vector<std::string> names;
    for (const auto& p : phases.phases) {
      if (p.rank == r.rank) names.push_back(p.name);
    }
    size_t stride = std::max<size_t>(1, (r.steps.size() + limits.max_steps - 1) / limits.max_steps);
    w.BeginObject().Field("rank", r.rank).FieldArray("names", names).Key("ms").BeginArray();
    for (size_t i = 0; i < r.steps.size(); i += stride) {
      w.BeginArray();
      for (const auto& n : names) {
        auto it = r.steps[i].phase_s.find(n);
        w.Double(it == r.steps[i].phase_s.end() ? 0.0 : it->second * 1e3, 3);
      }
      w.EndArray();
    }
    w.EndArray().EndObject();
  }
  w.EndArray();
}

void WritePhaseShares(JsonWriter& w, const analysis::PhaseAnalysis& phases) {
  w.Key("phase_shares").BeginArray();
  for (const auto& r : phases.ranks) {
    w.BeginObject().Field("rank", r.rank).Key("phases").BeginArray();
    for (const auto& p : phases.phases) {
      if (p.rank != r.rank) continue;
      w.BeginObject()
          .Field("name", p.name)
          .Field("share", p.share, 4)
          .Field("mean_ms", p.mean_s * 1e3, 3)
          .Field("count", p.count)
          .EndObject();
    }
    w.EndArray().EndObject();
  }
  w.EndArray();
}

std::optional<double> MeanOf(const RunningStats& s) {
  if (s.count() == 0) return std::nullopt;
  return s.mean();
}

void WriteGpus(JsonWriter& w, const analysis::RecordingSummary& m) {
  w.Key("gpus").BeginArray();
  for (const auto& g : m.gpus) {
    std::optional<double> util_max;
    if (g.util_pct.count() > 0) util_max = g.util_pct.max();
    w.BeginObject()
        .Field("index", g.index)
        .Field("name", g.name)
        .Field("util_mean", MeanOf(g.util_pct), 1)
        .Field("util_max", util_max, 1)
        .Field("mem_used_mib", MeanOf(g.memory_used_mib), 1)
        .Field("mem_total_mib", g.memory_total_mib, 1)
        .Field("power_w", MeanOf(g.power_w), 1)
        .Field("sm_active_mean", MeanOf(g.gpm_sm_active_pct), 1)
        .Field("tensor_active_mean", MeanOf(g.gpm_tensor_active_pct), 1)
        .Field("dram_active_mean", MeanOf(g.gpm_dram_active_pct), 1)
        .EndObject();
  }
  auto cls = [](const analysis::Balance& b) -> std::optional<std::string> {
    if (!b.quality) return std::nullopt;
    return std::string(BalanceClassName(*b.quality));
  };
  w.EndArray().Key("balance").BeginObject();
  w.Field("util_cv_pct", m.util_balance.cv_pct, 1).Field("util_class", cls(m.util_balance));
  w.Field("memory_cv_pct", m.memory_balance.cv_pct, 1)
      .Field("memory_class", cls(m.memory_balance))
      .EndObject();
}

/// JSON inside <script type="application/json">: "<" only occurs in strings, and as \u003c it
/// can neither end the script element nor open a comment.
std::string ForScriptElement(std::string json) {
  std::string out;
  out.reserve(json.size());
  for (char c : json) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

void Begin(JsonWriter& w, std::string_view kind, std::string_view title) {
  w.BeginObject().Field("schema_version", kSchemaVersion).Field("kind", kind).Field("title", title);
}

}  // namespace

std::vector<SeriesPoint> EnvelopeSeries(const std::vector<SeriesPoint>& points, size_t buckets) {
  if (buckets == 0 || points.size() <= 2 * buckets) return points;
  const double t0 = points.front().t_s, t1 = points.back().t_s;
  const double width = (t1 - t0) / static_cast<double>(buckets);
  std::vector<SeriesPoint> out;
  out.reserve(2 * buckets);
  size_t i = 0;
  for (size_t b = 0; b < buckets && i < points.size(); ++b) {
    const double end = b + 1 == buckets ? INFINITY : t0 + width * static_cast<double>(b + 1);
    size_t lo = i, hi = i;
    for (; i < points.size() && (points[i].t_s < end || i == lo); ++i) {
      if (points[i].value < points[lo].value) lo = i;
      if (points[i].value > points[hi].value) hi = i;
    }
    out.push_back(points[std::min(lo, hi)]);
    if (lo != hi) out.push_back(points[std::max(lo, hi)]);
  }
  return out;
}

/// The run's life for the timeline's shading: its stages, of the reference rank.
void WriteLife(JsonWriter& w, const diagnose::RunLife& l) {
  w.Key("life");
  if (!l.has_steps) {
    w.Null();
    return;
  }
  w.BeginObject().Field("text", RenderLifeLine(l)).FieldBool("sure", l.sure);
  w.Key("stages").BeginArray();
  double at = 0;
  auto stage = [&](const char* name, double seconds) {
    if (seconds <= 0) return;
    w.BeginObject().Field("stage", name).Field("b", at, 3).Field("e", at + seconds, 3).EndObject();
    at += seconds;
  };
  stage("start-up", l.startup_s);
  stage("warm-up", l.warmup_s);
  stage("steady", l.steady_s);
  stage("tail", l.tail_s);
  w.EndArray().EndObject();
}

std::string RunPageData(const rundir::RunData& data, const diagnose::RunReport& report,
                        const PageLimits& limits) {
  const int64_t t0 = data.meta.start_mono_ns != 0
                         ? data.meta.start_mono_ns
                         : (data.recording.samples.empty() ? 0 : data.recording.samples[0].mono_ns);
  std::string out;
  JsonWriter w(out);
  Begin(w, "run", report.meta.name);
  WriteVerdictJson(w, report.verdict);  // writes its own "verdict" key
  w.Key("job")
      .BeginObject()
      .Field("command", rundir::ShellJoin(report.meta.command))
      .Field("status", rundir::RunStatusName(report.meta.status))
      .Field("exit_code", report.meta.exit_code)
      .Field("wall_s", report.wall_s, 3)
      .Field("host", report.meta.hostname)
      .EndObject();
  WriteLife(w, report.life);
  w.Key("timeline").BeginObject();
  WriteSeriesList(w, diagnose::RawMachineSeries(data.recording, t0), limits);
  w.Key("bands").BeginArray();
  for (const auto& r : report.phases.ranks)
    WriteBands(w, r, t0, std::max(report.wall_s, 1e-3), limits);
  w.EndArray().EndObject();
  WriteSteps(w, report.phases, t0, limits);
  WriteStepPhases(w, report.phases, limits);
  WritePhaseShares(w, report.phases);
  WriteGpus(w, report.machine);
  WriteProcessesJson(w, report.processes);
  WriteLoadersJson(w, report.loaders);
  WriteStacksJson(w, report.stacks);
  w.Key("kernels").BeginArray().EndArray().Key("idle").BeginArray().EndArray();
  w.FieldArray("warnings", report.warnings).EndObject();
  return ForScriptElement(std::move(out));
}

std::string RecordingPageData(const std::string& path, const sample::Recording& recording,
                              const analysis::RecordingSummary& summary, const PageLimits& limits) {
  const int64_t t0 = recording.samples.empty() ? 0 : recording.samples[0].mono_ns;
  std::string out;
  JsonWriter w(out);
  Begin(w, "recording", path);
  w.Key("verdict").Null().Key("job").Null().Key("life").Null().Key("timeline").BeginObject();
  WriteSeriesList(w, diagnose::RawMachineSeries(recording, t0), limits);
  w.Key("bands").BeginArray().EndArray().EndObject();
  analysis::PhaseAnalysis none;
  WriteSteps(w, none, 0, limits);
  WriteStepPhases(w, none, limits);
  WritePhaseShares(w, none);
  WriteGpus(w, summary);
  WriteProcessesJson(w, {});
  WriteLoadersJson(w, {});
  w.Key("kernels").BeginArray().EndArray().Key("idle").BeginArray().EndArray();
  w.FieldArray("warnings", summary.warnings).EndObject();
  return ForScriptElement(std::move(out));
}

std::string TracePageData(const std::string& title, const diagnose::TraceReport& report,
                          const PageLimits& limits) {
  std::string out;
  JsonWriter w(out);
  Begin(w, "trace", title);
  WriteVerdictJson(w, report.verdict);  // writes its own "verdict" key
  w.Key("job").Null().Key("life").Null().Key("timeline").BeginObject();
  w.Key("series").BeginArray().EndArray().Key("bands").BeginArray().EndArray().EndObject();
  int64_t t0 = 0;
  for (const auto& r : report.phases.ranks) {
    if (!r.steps.empty()) t0 = t0 == 0 ? r.steps[0].begin_ns : std::min(t0, r.steps[0].begin_ns);
  }
  WriteSteps(w, report.phases, t0, limits);
  WriteStepPhases(w, report.phases, limits);
  WritePhaseShares(w, report.phases);
  w.Key("gpus").BeginArray().EndArray().Key("balance").Null();
  WriteProcessesJson(w, {});
  WriteLoadersJson(w, {});
  w.Key("kernels").BeginArray();
  for (const auto& r : report.ranks) {
    for (size_t i = 0; i < r.kernels.kernels.size() && i < limits.top_kernels; ++i) {
      const auto& k = r.kernels.kernels[i];
      w.BeginObject()
          .Field("rank", r.rank)
          .Field("name", trace::ShortKernelName(k.name, 120))
          .Field("count", k.count)
          .Field("total_ms", static_cast<double>(k.total_ns) / 1e6, 3)
          .Field("mean_us", k.mean_ns / 1e3, 2)
          .Field("share", k.busy_share, 4)
          .EndObject();
    }
  }
  w.EndArray().Key("idle").BeginArray();
  for (const auto& r : report.ranks) {
    for (const auto& d : r.idle.devices) {
      w.BeginObject()
          .Field("rank", r.rank)
          .Field("device", d.device)
          .Field("window_ms", static_cast<double>(d.window_ns) / 1e6, 3)
          .Field("busy_ms", static_cast<double>(d.busy_ns) / 1e6, 3)
          .Key("causes")
          .BeginObject();
      for (size_t c = 0; c < trace::kIdleCauseCount; ++c) {
        auto cause = static_cast<trace::IdleCause>(c);
        w.Field(trace::IdleCauseName(cause), static_cast<double>(d.idle.Get(cause)) / 1e6, 3);
      }
      w.EndObject().EndObject();
    }
  }
  w.EndArray();
  std::vector<std::string> warnings = report.warnings;
  for (const auto& r : report.ranks)
    warnings.insert(warnings.end(), r.warnings.begin(), r.warnings.end());
  w.FieldArray("warnings", warnings).EndObject();
  return ForScriptElement(std::move(out));
}

}  // namespace stallscope::report
