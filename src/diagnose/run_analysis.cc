#include "diagnose/run_analysis.h"

#include <fmt/format.h>

#include "base/thresholds.h"
#include "diagnose/verdict.h"

namespace stallscope::diagnose {

RunAnalysis AnalyzeRun(const RunData& data) {
  RunAnalysis a;
  a.report = BuildRunReport(data);
  a.facts = BuildRunFacts(data, a.report);
  a.report.verdict = Diagnose(a.facts);
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
  TRY(run.data, LoadRun(dir));
  run.analysis = AnalyzeRun(run.data);
  return run;
}

}  // namespace stallscope::diagnose
