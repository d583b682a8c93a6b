#pragma once
// The node-level summary of a merged multi-node job (rundir/job_merge.h): per-node and per-rank
// steps, seed 002 balance, the straggler's node.

#include "analysis/phases.h"
#include "diagnose/verdict.h"
#include "rundir/job_merge.h"

namespace stallscope::diagnose {

/// Per-node and per-rank steps, balance and the straggler's node, from the merged report's
/// phases and its verdict (already diagnosed). Also names the straggler's node in the verdict's
/// straggler finding.
void SummarizeJob(rundir::JobNodes& job, const analysis::PhaseAnalysis& phases, Verdict& verdict);

}  // namespace stallscope::diagnose
