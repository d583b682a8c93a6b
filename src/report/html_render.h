#pragma once

#include <string>
#include <string_view>

#include "diagnose/life.h"
#include "diagnose/verdict.h"
#include "report/html_data.h"

namespace stallscope::report {

/// `s` as HTML text: & < > " ' escaped, control characters (other than \n and \t) as U+FFFD.
[[nodiscard]] std::string EscapeHtml(std::string_view s);

/// One self-contained HTML page: the chart library (uPlot, from npm, embedded at build time),
/// the page's own script and style (src/report/html/), `data_json` (html_data.h, already safe
/// inside a script element) and the verdict rendered as static HTML, so it reads without
/// scripts too (a mail client). No network: nothing is loaded from anywhere. `life`: a run's
/// life (start-up, warm-up, steady state, tail), said before the verdict; null otherwise.
/// `ledger`: where a run's steady step goes, a stacked bar per rank after the verdict.
[[nodiscard]] std::string RenderHtmlPage(std::string_view kind, std::string_view title,
                                         const diagnose::Verdict* verdict,
                                         std::string_view data_json,
                                         const diagnose::RunLife* life = nullptr,
                                         const analysis::Ledger* ledger = nullptr);

/// The whole page of a run directory, a recording, or profiler traces (html_data.h's data).
[[nodiscard]] std::string RenderRunHtml(const rundir::RunData& data,
                                        const diagnose::RunReport& report);
[[nodiscard]] std::string RenderRecordingHtml(const std::string& path,
                                              const sample::Recording& recording,
                                              const analysis::RecordingSummary& summary);
[[nodiscard]] std::string RenderTraceHtml(const std::string& title,
                                          const diagnose::TraceReport& report);

}  // namespace stallscope::report
