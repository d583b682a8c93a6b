#include "diagnose/run_analysis.h"

#include <fmt/format.h>

#include "base/thresholds.h"
#include "diagnose/stack_attribution.h"
#include "diagnose/verdict.h"

namespace stallscope::diagnose {

RunAnalysis AnalyzeRun(const rundir::RunData& data) {
  RunAnalysis a;
  a.report = BuildRunReport(data);
  a.facts = BuildRunFacts(data, a.report);
  a.report.verdict = Diagnose(a.facts);
  a.report.stacks = AttributeStacks(data, a.report);
  AddStackEvidence(a.report.verdict, a.report.stacks);
  if (const std::string& damage = data.events.events_bin_damage; !damage.empty()) {
    // Issue 27 B10: the phases then come from the rings alone, which keep each process's last
    // records only; with no ring left there are none, and "no phases" is no finding.
    a.report.verdict.caveats.push_back(fmt::format(
        "events.bin is corrupt or unreadable ({}): {}", damage,
        data.events.events.empty()
            ? "no ring in phases/ holds the phases either, so this run's phases are lost"
            : "the phases were read from the rings in phases/ instead, which keep only each "
              "process's latest records"));
  }
  const RunLife& life = a.report.life;
  if (life.has_steps && !life.sure) {
    a.report.verdict.caveats.push_back(fmt::format(
        "the steady state is only {:.1f} s ({} step{}); a sure verdict needs at least {:.0f} s "
        "and {:.0f} steady steps: run it longer",
        life.steady_s, life.steady_steps, life.steady_steps == 1 ? "" : "s",
        kThresholds.steady_sure_s.value, kThresholds.steady_sure_steps.value));
  }
  return a;
}

Result<LoadedRun> LoadAndAnalyzeRun(const std::string& dir) {
  LoadedRun run;
  TRY(run.data, rundir::LoadRun(dir));
  run.analysis = AnalyzeRun(run.data);
  return run;
}

}  // namespace stallscope::diagnose
