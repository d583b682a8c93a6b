#include "diagnose/run_analysis.h"

#include "diagnose/stack_attribution.h"
#include "diagnose/verdict.h"

namespace stallscope::diagnose {

RunAnalysis AnalyzeRun(const rundir::RunData& data) {
  RunAnalysis a;
  a.report = BuildRunReport(data);
  a.report.stacks = AttributeStacks(data, a.report);
  a.facts = BuildRunFacts(data, a.report);
  a.report.ledger = a.facts.ledger;
  a.report.verdict = Diagnose(a.facts);  // the verdict's one writer
  return a;
}

Result<LoadedRun> LoadAndAnalyzeRun(const std::string& dir) {
  LoadedRun run;
  TRY(run.data, rundir::LoadRun(dir));
  run.analysis = AnalyzeRun(run.data);
  return run;
}

}  // namespace stallscope::diagnose
