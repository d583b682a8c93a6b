#include "report/ledger_render.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/units.h"
#include "report/html_render.h"
#include "report/render.h"

namespace stallscope::report {
namespace {

using analysis::LedgerPart;
using analysis::StepLedger;

/// Ranks shown as columns beside the job's.
constexpr size_t kMaxRankColumns = 8;
/// Parts under this share of the step are left out of the text (they stay in the JSON).
constexpr double kShownShare = 0.001;

std::string Pct1(double share) { return fmt::format("{:.1f}%", share * 100.0); }

/// The parts by share, largest first (ties in enum order), those of at least `least`.
std::vector<LedgerPart> PartsBySize(const StepLedger& l, double least) {
  std::vector<LedgerPart> parts;
  for (size_t i = 0; i < analysis::kLedgerParts; ++i) {
    if (l.parts[i] >= least) parts.push_back(static_cast<LedgerPart>(i));
  }
  std::stable_sort(parts.begin(), parts.end(),
                   [&l](LedgerPart a, LedgerPart b) { return l.Share(a) > l.Share(b); });
  return parts;
}

/// "forward_pass 3.1%, backward_pass 1.7%": the members of `p`, largest first.
std::string MembersText(const StepLedger& l, LedgerPart p) {
  std::vector<std::pair<std::string, double>> members;
  for (const auto& [name, share] : l.members) {
    const LedgerPart of =
        name.starts_with("launch:") ? LedgerPart::kHostWork : analysis::LedgerPartOfPhase(name);
    if (of == p && share >= kShownShare) members.emplace_back(name, share);
  }
  std::stable_sort(members.begin(), members.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [name, share] : members) {
    const std::string shown =
        name.starts_with("launch:") ? fmt::format("{} (host, GPU idle)", name.substr(7)) : name;
    out += fmt::format("{}{}{}", out.empty() ? "" : ", ", EscapeControl(shown),
                       members.size() == 1 ? "" : " " + Pct1(share));
  }
  return out;
}

/// Where the main thread was during `other` (the stacks' top lines of the job's code):
/// "<indent> the main thread at train.py:391 (65% of other's samples), train.py:392 (15%)", or "".
std::string OtherLinesText(const diagnose::StackReport& stacks) {
  for (const diagnose::StackGroup& g : stacks.phases) {
    if (g.name != "other" || g.lines.empty()) continue;
    std::string lines;
    for (size_t i = 0; i < g.lines.size() && i < 2; ++i) {
      lines += i == 0 ? fmt::format("{} ({} of other's samples)", EscapeControl(g.lines[i].where),
                                    Pct1(g.lines[i].share))
                      : fmt::format(", {} ({})", EscapeControl(g.lines[i].where),
                                    Pct1(g.lines[i].share));
    }
    return fmt::format("  {:<29} {:>6}  the main thread at {}\n", "", "", lines);
  }
  return "";
}

std::string Heading(const analysis::Ledger& ledger) {
  const StepLedger& j = ledger.job;
  std::string how = fmt::format("{} steady step{} of {}", j.steps, j.steps == 1 ? "" : "s",
                                FormatDurationSeconds(j.step_s));
  if (ledger.ranks.size() > 1) {
    how = fmt::format("{} ranks{}; {}", ledger.ranks.size(),
                      ledger.lockstep ? " in lockstep, the job's part the least any rank spends"
                                      : ", the job's part weighted by each rank's time",
                      how);
  }
  if (j.compute_on_gpu) how += "; compute is the GPU's time by CUDA events";
  return fmt::format("Where the steady step goes ({})\n", how);
}

void WriteStepLedger(JsonWriter& w, const StepLedger& l) {
  w.BeginObject();
  if (l.rank < 0) {
    w.Key("rank").Null();
  } else {
    w.Field("rank", l.rank);
  }
  w.Field("steps", l.steps)
      .Field("step_s", l.step_s, 6)
      .Field("compute_clock", l.compute_on_gpu ? "gpu" : "host")
      .Field("gpu_busy", l.gpu_busy, 4)
      .Field("host_compute", l.host_compute, 4)
      .Field("host_wait", l.host_wait, 4);
  w.Key("parts").BeginObject();
  for (size_t i = 0; i < analysis::kLedgerParts; ++i) {
    w.Key(analysis::LedgerPartName(static_cast<LedgerPart>(i))).Double(l.parts[i], 4);
  }
  w.EndObject().Key("members").BeginObject();
  for (const auto& [name, share] : l.members) w.Key(name).Double(share, 4);
  w.EndObject().EndObject();
}

std::string BarHtml(const std::string& label, const StepLedger& l) {
  std::string out = fmt::format(
      "<div class=\"row\"><span class=\"who\">{}</span><div class=\"bar\">", EscapeHtml(label));
  for (LedgerPart p : PartsBySize(l, 0.0005)) {
    const std::string text =
        fmt::format("{} {}", analysis::LedgerPartLabel(p, l.compute_on_gpu), Pct1(l.Share(p)));
    out += fmt::format("<span class=\"p-{}\" style=\"width:{:.2f}%\" title=\"{}\">{}</span>",
                       analysis::LedgerPartName(p), l.Share(p) * 100.0, EscapeHtml(text),
                       l.Share(p) >= 0.08 ? EscapeHtml(text) : "");
  }
  return out + "</div></div>\n";
}

}  // namespace

std::string RenderLedgerText(const analysis::Ledger& ledger, const diagnose::StackReport* stacks) {
  if (ledger.empty()) return "";
  const StepLedger& j = ledger.job;
  std::string out = Heading(ledger);
  if (ledger.ranks.size() <= 1) {
    for (LedgerPart p : PartsBySize(j, kShownShare)) {
      out += fmt::format("  {:<29} {:>6}  {}\n", analysis::LedgerPartLabel(p, j.compute_on_gpu),
                         Pct1(j.Share(p)), MembersText(j, p));
      if (p == LedgerPart::kHostWork && stacks != nullptr) out += OtherLinesText(*stacks);
      if (p == LedgerPart::kCompute && j.compute_on_gpu && j.host_wait >= kShownShare) {
        out += fmt::format(
            "  {:<29} {:>6}  the host waiting for the GPU (a sync, or loading "
            "ahead), inside GPU compute\n",
            "", fmt::format("({})", Pct1(j.host_wait)));
      }
    }
    return out;
  }
  const size_t shown = std::min(ledger.ranks.size(), kMaxRankColumns);
  out += fmt::format("  {:<29} {:>6}", "", "job");
  for (size_t k = 0; k < shown; ++k)
    out += fmt::format(" {:>8}", fmt::format("rank {}", ledger.ranks[k].rank));
  out += shown < ledger.ranks.size() ? "  (more ranks: report.json ledger.ranks)\n" : "\n";
  for (LedgerPart p : PartsBySize(j, 0.0)) {
    bool any = j.Share(p) >= kShownShare;
    for (size_t k = 0; k < shown; ++k) any = any || ledger.ranks[k].Share(p) >= kShownShare;
    if (!any) continue;
    out += fmt::format("  {:<29} {:>6}", analysis::LedgerPartLabel(p, j.compute_on_gpu),
                       Pct1(j.Share(p)));
    for (size_t k = 0; k < shown; ++k) out += fmt::format(" {:>8}", Pct1(ledger.ranks[k].Share(p)));
    out += "\n";
  }
  return out;
}

void WriteLedgerJson(JsonWriter& w, const analysis::Ledger& ledger) {
  w.Key("ledger");
  if (ledger.empty()) {
    w.Null();
    return;
  }
  w.BeginObject().FieldBool("lockstep", ledger.lockstep).Key("job");
  WriteStepLedger(w, ledger.job);
  w.Key("ranks").BeginArray();
  for (const StepLedger& r : ledger.ranks) WriteStepLedger(w, r);
  w.EndArray().EndObject();
}

std::string RenderLedgerHtml(const analysis::Ledger& ledger) {
  if (ledger.empty()) return "";
  std::string out =
      "<section id=\"ledger\" class=\"ledger\">\n<h2>Where the steady step goes</h2>\n";
  std::string heading = Heading(ledger);
  heading = heading.substr(heading.find('(') + 1);
  heading = heading.substr(0, heading.rfind(')'));
  out += fmt::format("<p class=\"meta\">{}</p>\n", EscapeHtml(heading));
  if (ledger.ranks.size() > 1) out += BarHtml("job", ledger.job);
  for (const StepLedger& r : ledger.ranks) out += BarHtml(fmt::format("rank {}", r.rank), r);
  out += "<p class=\"legend\">";
  for (size_t i = 0; i < analysis::kLedgerParts; ++i) {
    const auto p = static_cast<LedgerPart>(i);
    out += fmt::format("<span class=\"key p-{}\"></span>{} ", analysis::LedgerPartName(p),
                       EscapeHtml(analysis::LedgerPartLabel(p, ledger.job.compute_on_gpu)));
  }
  return out + "</p>\n</section>\n";
}

std::string RenderLedgerChangeText(const analysis::Ledger& a, const analysis::Ledger& b) {
  if (a.empty() || b.empty()) return "";
  // Per part the time per step in A and B: a part's share can stay while its time halves.
  struct Moved {
    LedgerPart part;
    double a_s, b_s;
  };
  std::vector<Moved> moved;
  for (size_t i = 0; i < analysis::kLedgerParts; ++i) {
    if (a.job.parts[i] < 0.005 && b.job.parts[i] < 0.005) continue;
    moved.push_back(
        {static_cast<LedgerPart>(i), a.job.parts[i] * a.job.step_s, b.job.parts[i] * b.job.step_s});
  }
  std::stable_sort(moved.begin(), moved.end(), [](const Moved& x, const Moved& y) {
    return std::fabs(x.b_s - x.a_s) > std::fabs(y.b_s - y.a_s);
  });
  const bool gpu = a.job.compute_on_gpu || b.job.compute_on_gpu;
  std::string out = fmt::format("{:<31} {:>17} {:>17} {:>19}\n", "Where the steady step goes",
                                fmt::format("A {}", FormatDurationSeconds(a.job.step_s)),
                                fmt::format("B {}", FormatDurationSeconds(b.job.step_s)), "change");
  for (const Moved& m : moved) {
    const double a_share = a.job.Share(m.part), b_share = b.job.Share(m.part);
    out +=
        fmt::format("  {:<29} {:>10} {:>6} {:>10} {:>6} {:>10} {:>+6.1f} pt\n",
                    analysis::LedgerPartLabel(m.part, gpu), FormatDurationSeconds(m.a_s),
                    Pct1(a_share), FormatDurationSeconds(m.b_s), Pct1(b_share),
                    (m.b_s >= m.a_s ? "+" : "-") + FormatDurationSeconds(std::fabs(m.b_s - m.a_s)),
                    (b_share - a_share) * 100.0);
  }
  return out;
}

}  // namespace stallscope::report
