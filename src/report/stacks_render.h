#pragma once
// Where the job's Python was (diagnose::StackReport): report.txt's "Python" lines and
// report.json's "stacks" object (docs/formats.md "report.json stacks").

#include <string>

#include "base/json_writer.h"
#include "diagnose/stack_attribution.h"

namespace stallscope::report {

/// report.txt: per phase of the main threads (most samples first) and for the DataLoader
/// workers, the top lines with their shares; empty when the run has no stack samples.
[[nodiscard]] std::string RenderStacksText(const diagnose::StackReport& s);

/// report.json "stacks": null without samples, else {main_hz, worker_hz, samples,
/// steady_samples, torn, failed, cpu_s, phases: [{name, samples, lines: [{where, file, function,
/// line, text, library, samples, share, via, via_share}]}], workers: {...} | null,
/// gpu_idle: {...} | null, unreadable}.
void WriteStacksJson(JsonWriter& w, const diagnose::StackReport& s);

}  // namespace stallscope::report
