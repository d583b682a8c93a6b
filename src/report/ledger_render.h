#pragma once
// The step ledger (analysis/ledger.h) for people and machines: report.txt's "Where the steady
// step goes", report.json's "ledger" (docs/formats.md), the HTML report's stacked bars, and
// `compare`'s ledger A vs B. Pure functions of the ledger.

#include <string>

#include "analysis/ledger.h"
#include "base/json_writer.h"
#include "diagnose/stack_attribution.h"

namespace stallscope::report {

/// report.txt: one line per part, largest first (parts under 0.1% left out), with what it is
/// made of for one rank; a column per rank (up to 8) beside the job's for several. With the
/// stacks' lines (`stacks`, may be null), host work says where the main thread was during
/// `other`. "" when the run measured no steady steps.
[[nodiscard]] std::string RenderLedgerText(const analysis::Ledger& ledger,
                                           const diagnose::StackReport* stacks = nullptr);

/// report.json "ledger": null without steady steps, else {lockstep, job: {...}, ranks: [{...}]},
/// each {rank (null for the job), steps, step_s, compute_clock ("gpu" | "host"), gpu_busy
/// (null without CUDA events), host_compute, host_wait, parts: {compute, data, communication,
/// rank_wait, side_work, host_work, unaccounted}, members: {phase: share}}.
void WriteLedgerJson(JsonWriter& w, const analysis::Ledger& ledger);

/// The HTML report's section: a stacked bar per rank (the job's first when there are several),
/// a legend, the shares in each part's title. "" without steady steps.
[[nodiscard]] std::string RenderLedgerHtml(const analysis::Ledger& ledger);

/// `compare`: each part of the job's ledger in A and in B, time per step and share, and the
/// change; the parts whose time per step moved most first (parts under 0.5% in both left out).
/// "" when either has no steps.
[[nodiscard]] std::string RenderLedgerChangeText(const analysis::Ledger& a,
                                                 const analysis::Ledger& b);

}  // namespace stallscope::report
