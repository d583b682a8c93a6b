#include "report/html_render.h"

#include <fmt/format.h>

#include "base/thresholds.h"
#include "diagnose/findings.h"
#include "report/ledger_render.h"
#include "report/life_render.h"

namespace stallscope::embedded {
extern const std::string_view kUplotJs;
extern const std::string_view kUplotCss;
extern const std::string_view kPageJs;
extern const std::string_view kPageCss;
}  // namespace stallscope::embedded

namespace stallscope::report {
namespace {

/// An embedded script or style, made unable to end its element early ("</script" inside a
/// string literal of the library would).
std::string Inline(std::string_view body, std::string_view tag) {
  std::string out(body);
  std::string close = fmt::format("</{}", tag);
  for (size_t at = 0; (at = out.find(close, at)) != std::string::npos; at += close.size() + 1)
    out.replace(at, 1, "<\\");
  return out;
}

/// page.js with the thresholds it quotes filled in from the table: "{{outlier_robust_z}}" is the
/// cut of the step outliers html_data.cc marks (analysis::FindOutliers).
std::string PageJs() {
  std::string js(embedded::kPageJs);
  const std::string_view key = "{{outlier_robust_z}}";
  const std::string value = fmt::format("{}", kThresholds.outlier_robust_z.value);
  for (size_t at = 0; (at = js.find(key, at)) != std::string::npos; at += value.size())
    js.replace(at, key.size(), value);
  return js;
}

std::string VerdictHtml(const diagnose::Verdict* v) {
  if (v == nullptr) return "";
  std::string out = "<section id=\"verdict\" class=\"verdict\">\n";
  if (!v->principal) {
    out +=
        "<h2>Verdict</h2><p class=\"reason\">no bottleneck found: nothing measured stands "
        "out</p>\n";
  } else {
    const auto& f = *v->principal;
    // gpu_bound is the good case: its share is the work itself, not time lost (issue 39).
    const std::string what =
        f.cls == diagnose::FindingClass::kGpuBound
            ? fmt::format("the work itself: {:.0f}% of the step", f.cost_fraction * 100)
            : fmt::format("costs ~{:.0f}% of wall time", f.cost_fraction * 100);
    out += fmt::format(
        "<h2>Verdict <span class=\"cls\">{}</span></h2>\n<p class=\"meta\">confidence {:.2f}, "
        "{}</p>\n<p class=\"reason\">{}</p>\n",
        EscapeHtml(diagnose::FindingClassName(f.cls)), f.confidence, what, EscapeHtml(f.reason));
    if (!f.recommendations.empty()) {
      out += "<h3>Fix, cheapest first</h3><ol class=\"fixes\">\n";
      for (const auto& r : f.recommendations)
        out += fmt::format("<li>{}</li>\n", EscapeHtml(r.text));
      out += "</ol>\n";
    }
    if (!f.evidence.empty()) {
      out += "<h3>Evidence</h3><ul class=\"evidence\">\n";
      for (const auto& e : f.evidence) out += fmt::format("<li>{}</li>\n", EscapeHtml(e.text));
      out += "</ul>\n";
    }
  }
  if (!v->secondary.empty()) {
    out += "<h3>Also</h3><ul class=\"also\">\n";
    for (const auto& f : v->secondary) {
      out += fmt::format("<li><b>{}</b> ~{:.0f}%: {}</li>\n",
                         EscapeHtml(diagnose::FindingClassName(f.cls)), f.cost_fraction * 100,
                         EscapeHtml(f.reason));
    }
    out += "</ul>\n";
  }
  for (const auto& c : v->caveats)
    out += fmt::format("<p class=\"caveat\">{}</p>\n", EscapeHtml(c));
  out += "</section>\n";
  return out;
}

/// The life of the run before the verdict: the START-UP headline when start-up and warm-up were
/// most of the run, and the life line.
std::string LifeHtml(const diagnose::RunLife* life) {
  if (life == nullptr || !life->has_steps) return "";
  std::string out = "<section id=\"life\" class=\"life\">\n";
  std::string headline = RenderLifeHeadline(*life);
  if (!headline.empty()) {
    while (!headline.empty() && headline.back() == '\n') headline.pop_back();
    out += fmt::format("<p class=\"startup\">{}</p>\n", EscapeHtml(headline));
  }
  out += fmt::format("<p class=\"line\"><b>Life</b> {}</p>\n</section>\n",
                     EscapeHtml(RenderLifeLine(*life)));
  return out;
}

}  // namespace

std::string EscapeHtml(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        if ((static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
          out += "\xEF\xBF\xBD";
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string RenderHtmlPage(std::string_view kind, std::string_view title,
                           const diagnose::Verdict* verdict, std::string_view data_json,
                           const diagnose::RunLife* life, const analysis::Ledger* ledger) {
  std::string out;
  out.reserve(data_json.size() + embedded::kUplotJs.size() + 16384);
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  // Nothing from the network: the policy forbids every fetch, inline code only.
  out +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n";
  out += fmt::format("<title>stallscope {}: {}</title>\n", EscapeHtml(kind), EscapeHtml(title));
  out += "<style>\n" + Inline(embedded::kUplotCss, "style") + "\n" +
         Inline(embedded::kPageCss, "style") + "\n</style>\n</head>\n<body>\n";
  out += fmt::format(
      "<header><h1>stallscope</h1><p class=\"sub\"><span class=\"kind\">{}</span> "
      "<span class=\"title\">{}</span></p></header>\n<main>\n",
      EscapeHtml(kind), EscapeHtml(title));
  out += LifeHtml(life);
  out += VerdictHtml(verdict);
  if (ledger != nullptr) out += RenderLedgerHtml(*ledger);
  out +=
      "<div id=\"app\"><noscript>The charts need JavaScript; the verdict above does not."
      "</noscript></div>\n</main>\n";
  out += "<script type=\"application/json\" id=\"stallscope-data\">";
  out += data_json;
  out += "</script>\n<script>\n" + Inline(embedded::kUplotJs, "script") + "\n</script>\n";
  out += "<script>\n" + Inline(PageJs(), "script") + "\n</script>\n</body>\n</html>\n";
  return out;
}

std::string RenderRunHtml(const rundir::RunData& data, const diagnose::RunReport& report) {
  return RenderHtmlPage("run", report.meta.name, &report.verdict, RunPageData(data, report),
                        &report.life, &report.ledger);
}

std::string RenderRecordingHtml(const std::string& path, const sample::Recording& recording,
                                const analysis::RecordingSummary& summary) {
  return RenderHtmlPage("recording", path, nullptr, RecordingPageData(path, recording, summary));
}

std::string RenderTraceHtml(const std::string& title, const diagnose::TraceReport& report) {
  return RenderHtmlPage("trace", title, &report.verdict, TracePageData(title, report));
}

}  // namespace stallscope::report
