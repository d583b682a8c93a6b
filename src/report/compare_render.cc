#include "report/compare_render.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "base/json_writer.h"
#include "base/units.h"
#include "report/ledger_render.h"

namespace stallscope::report {
namespace {

using experiment::CompareOutcome;
using experiment::CompareReport;
using experiment::RunDigest;

/// A difference's values longer than this go on lines of their own (commands, usually).
constexpr size_t kInlineValueBytes = 28;

/// A missing value in a table cell.
constexpr const char* kNone = "-";

std::string RateCell(const RunDigest& d) {
  if (!d.rate) return kNone;
  if (d.rate->lo == d.rate->hi) return fmt::format("{:.2f}", d.rate->per_s);
  // ASCII '-' in table cells: fmt pads by code points, and a table stays aligned everywhere.
  return fmt::format("{:.2f} ({:.2f}-{:.2f})", d.rate->per_s, d.rate->lo, d.rate->hi);
}

/// "18.4 s + 0.7 s": start-up and warm-up, which the rates above leave out.
std::string LifeCell(const RunDigest& d) {
  if (!d.life.has_steps) return kNone;
  return fmt::format("{} + {}", FormatDurationSeconds(d.life.startup_s),
                     FormatDurationSeconds(d.life.warmup_s));
}

std::string VerdictCell(const RunDigest& d) {
  if (!d.principal) return "none";
  return fmt::format("{} ({:.2f}, ~{:.0f}%)", diagnose::FindingClassName(d.principal->cls),
                     d.principal->confidence, d.principal->cost_fraction * 100);
}

template <typename T, typename F>
std::string Cell(const std::optional<T>& v, F format) {
  return v ? format(*v) : std::string(kNone);
}

std::string SideTable(const CompareReport& r) {
  struct SideRow {
    const char* label;
    std::string a, b;
  };
  auto pct = [](double v) { return fmt::format("{:.0f}%", v * 100); };
  auto util = [](double v) { return fmt::format("{:.0f}%", v); };
  auto num1 = [](double v) { return fmt::format("{:.1f}", v); };
  auto bytes = [](uint64_t v) { return FormatBytes(static_cast<double>(v)); };
  const RunDigest& a = r.a;
  const RunDigest& b = r.b;
  // Rates, shares and CPUs are the steady state's (issue 26): start-up and warm-up are apart.
  std::vector<SideRow> rows = {
      {"steps/s (95%)", RateCell(a), RateCell(b)},
      {"steady steps", fmt::format("{}", a.step_s.size()), fmt::format("{}", b.step_s.size())},
      {"start+warm-up", LifeCell(a), LifeCell(b)},
      {"samples/s", Cell(a.samples_per_s, num1), Cell(b.samples_per_s, num1)},
      {"data share", Cell(a.data_share, pct), Cell(b.data_share, pct)},
      {"GPU util", Cell(a.gpu_util_pct, util), Cell(b.gpu_util_pct, util)},
      {"job CPUs", Cell(a.job_cpus, num1), Cell(b.job_cpus, num1)},
      {"other work CPUs", Cell(a.other_cpus, num1), Cell(b.other_cpus, num1)},
      {"peak RSS", Cell(a.peak_rss_bytes, bytes), Cell(b.peak_rss_bytes, bytes)},
      {"wall", FormatDurationSeconds(a.wall_s), FormatDurationSeconds(b.wall_s)},
      {"verdict", VerdictCell(a), VerdictCell(b)},
  };
  size_t wa = 1;
  for (const auto& row : rows) wa = std::max(wa, row.a.size());
  std::string out = fmt::format("\n{:<15} {:<{}}  {}\n", "steady state", "A", wa, "B");
  for (const auto& row : rows)
    out += fmt::format("{:<15} {:<{}}  {}\n", row.label, row.a, wa, row.b);
  return out;
}

std::string PhaseTable(const CompareReport& r) {
  if (r.phases.empty()) return "";
  auto ms = [](const std::optional<double>& v) {
    return v ? fmt::format("{:.1f}", *v) : std::string(kNone);
  };
  size_t wn = 18;
  for (const auto& p : r.phases) wn = std::max(wn, EscapeControl(p.name).size());
  std::string out = fmt::format("\n{:<{}} {:>9} {:>9} {:>9} {:>8} {:>8}\n", "Phases (ms/step)",
                                wn + 2, "A", "B", "change", "share A", "share B");
  for (const auto& p : r.phases) {
    out += fmt::format("  {:<{}} {:>9} {:>9} {:>+9.1f} {:>7.1f}% {:>7.1f}%\n",
                       EscapeControl(p.name), wn, ms(p.a_ms_per_step), ms(p.b_ms_per_step),
                       p.delta_ms_per_step, p.a_share * 100, p.b_share * 100);
  }
  return out;
}

std::string DifferenceLines(const CompareReport& r) {
  if (r.differences.empty())
    return "\nDiffered  nothing stallscope records (command, DataLoader, "
           "environment, CPUs, GPUs, driver, host)\n";
  auto value = [](const std::optional<std::string>& v) {
    return v ? EscapeControl(*v) : std::string("(unset)");
  };
  size_t wn = 0, wa = 1;
  for (const auto& d : r.differences) {
    wn = std::max(wn, EscapeControl(d.name).size());
    std::string a = value(d.a);
    if (a.size() <= kInlineValueBytes) wa = std::max(wa, a.size());
  }
  std::string out = fmt::format("\n{:<{}}  {:<{}}  {}\n", "Differed", wn + 2, "A", wa, "B");
  for (const auto& d : r.differences) {
    std::string name = EscapeControl(d.name), a = value(d.a), b = value(d.b);
    if (a.size() <= kInlineValueBytes && b.size() <= kInlineValueBytes) {
      out += fmt::format("  {:<{}}  {:<{}}  {}\n", name, wn, a, wa, b);
    } else {
      out += fmt::format("  {}\n    A  {}\n    B  {}\n", name, a, b);
    }
  }
  return out;
}

std::string NextLine(const CompareReport& r) {
  size_t steps = std::max(r.a.step_s.size(), r.b.step_s.size());
  switch (r.outcome) {
    case CompareOutcome::kNoSteps:
      return "NEXT     a run without steps has nothing to compare: `stallscope diagnose DIR`\n"
             "         says why no step was measured\n";
    case CompareOutcome::kTooFewSteps:
      return "NEXT     run each job for 30 steps or more (`stallscope run --steps 30 -- ...`),\n"
             "         then compare again\n";
    case CompareOutcome::kNoChange:
      return fmt::format(
          "NEXT     the interval includes no change. To detect a smaller one, run longer\n"
          "         (`stallscope run --steps {}` or more) on a quiet machine, then compare again\n",
          std::max<size_t>(2 * steps, 30));
    case CompareOutcome::kFaster:
    case CompareOutcome::kSlower:
      break;
  }
  if (r.differences.empty())
    return "NEXT     nothing recorded differed: the change came from outside the runs (other\n"
           "         load on the host, the data, code the command does not show)\n";
  if (r.outcome == CompareOutcome::kSlower)
    return "NEXT     B lost speed: undo what it changed (Differed above), one item at a time\n";
  return fmt::format(
      "NEXT     keep what B changed (Differed above); B's bottleneck now:\n"
      "         stallscope diagnose {}\n",
      EscapeControl(r.b.dir));
}

std::string Notes(const CompareReport& r) {
  std::string out;
  for (const auto* side : {&r.a, &r.b}) {
    const char* n = side == &r.a ? "A" : "B";
    for (const auto& c : side->caveats) out += fmt::format("caveat {}: {}\n", n, EscapeControl(c));
    for (const auto& w : side->warnings)
      out += fmt::format("warning {}: {}\n", n, EscapeControl(w));
  }
  return out;
}

void WriteSideJson(JsonWriter& w, const RunDigest& d) {
  w.BeginObject()
      .Field("dir", d.dir)
      .Field("name", d.meta.name)
      .Field("steps", static_cast<int64_t>(d.step_s.size()));
  if (d.rate) {
    w.Field("steps_per_s", d.rate->per_s, 4).Field("lo", d.rate->lo, 4).Field("hi", d.rate->hi, 4);
  } else {
    w.Key("steps_per_s").Null().Key("lo").Null().Key("hi").Null();
  }
  w.Field("samples_per_s", d.samples_per_s, 2)
      .Field("data_share", d.data_share, 4)
      .Field("gpu_util_pct", d.gpu_util_pct, 1)
      .Field("peak_rss_bytes", d.peak_rss_bytes);
  w.Field("job_cpus", d.job_cpus, 2)
      .Field("other_cpus", d.other_cpus, 2)
      .Field("wall_s", d.wall_s, 3)
      .Key("verdict");
  if (d.principal) {
    w.BeginObject()
        .Field("class", diagnose::FindingClassName(d.principal->cls))
        .Field("confidence", d.principal->confidence, 2)
        .Field("cost_fraction", d.principal->cost_fraction, 3)
        .EndObject();
  } else {
    w.Null();
  }
  w.FieldArray("caveats", d.caveats).FieldArray("warnings", d.warnings).EndObject();
}

}  // namespace

std::string RenderCompareText(const CompareReport& r) {
  std::string out = fmt::format("stallscope compare\n  A  {}  ({})\n  B  {}  ({})\n",
                                EscapeControl(r.a.dir), EscapeControl(r.a.meta.name),
                                EscapeControl(r.b.dir), EscapeControl(r.b.meta.name));
  out += fmt::format("RESULT   {}\n", r.conclusion);
  if (r.a_busy_host || r.b_busy_host) {
    out += fmt::format(
        "         {} ran beside other work (busy host): speed changes with it between runs, and\n"
        "         the interval, from each run's own steps, does not include that\n",
        r.a_busy_host && r.b_busy_host ? "A and B"
        : r.a_busy_host                ? "A"
                                       : "B");
  }
  out += SideTable(r);
  if (const std::string ledger = RenderLedgerChangeText(r.a.ledger, r.b.ledger); !ledger.empty()) {
    out += '\n';
    out += ledger;
  }
  out += PhaseTable(r);
  out += DifferenceLines(r);
  out += '\n';
  out += NextLine(r);
  out += Notes(r);
  return out;
}

std::string RenderCompareJson(const CompareReport& r) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject()
      .Field("schema_version", kCompareSchemaVersion)
      .Field("conclusion", r.conclusion)
      .Key("change")
      .BeginObject()
      .Field("outcome", experiment::CompareOutcomeName(r.outcome));
  if (r.change) {
    w.Field("ratio", r.change->ratio, 4)
        .Field("lo", r.change->lo, 4)
        .Field("hi", r.change->hi, 4)
        .FieldBool("significant", r.change->significant);
  } else {
    w.Key("ratio").Null().Key("lo").Null().Key("hi").Null().FieldBool("significant", false);
  }
  w.FieldBool("a_busy_host", r.a_busy_host).FieldBool("b_busy_host", r.b_busy_host);
  w.EndObject().Key("a");
  WriteSideJson(w, r.a);
  w.Key("b");
  WriteSideJson(w, r.b);
  w.Key("phases").BeginArray();
  for (const auto& p : r.phases) {
    w.BeginObject()
        .Field("name", p.name)
        .Field("a_ms_per_step", p.a_ms_per_step, 3)
        .Field("b_ms_per_step", p.b_ms_per_step, 3)
        .Field("delta_ms_per_step", p.delta_ms_per_step, 3);
    w.Field("a_share", p.a_share, 4).Field("b_share", p.b_share, 4).EndObject();
  }
  w.EndArray().Key("ledger");
  if (r.a.ledger.empty() || r.b.ledger.empty()) {
    w.Null();
  } else {
    w.BeginObject().Key("parts").BeginArray();
    for (size_t i = 0; i < analysis::kLedgerParts; ++i) {
      w.BeginObject()
          .Field("part", analysis::LedgerPartName(static_cast<analysis::LedgerPart>(i)))
          .Field("a", r.a.ledger.job.parts[i], 4)
          .Field("b", r.b.ledger.job.parts[i], 4)
          .Field("change", r.b.ledger.job.parts[i] - r.a.ledger.job.parts[i], 4)
          .Field("a_s_per_step", r.a.ledger.job.parts[i] * r.a.ledger.job.step_s, 6)
          .Field("b_s_per_step", r.b.ledger.job.parts[i] * r.b.ledger.job.step_s, 6)
          .EndObject();
    }
    w.EndArray().EndObject();
  }
  w.Key("differences").BeginArray();
  for (const auto& d : r.differences) {
    w.BeginObject().Field("name", d.name).Field("a", d.a).Field("b", d.b).EndObject();
  }
  w.EndArray().EndObject();
  out += "\n";
  return out;
}

}  // namespace stallscope::report
