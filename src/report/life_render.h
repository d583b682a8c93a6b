#pragma once
// The life of a run (diagnose/life.h) for people and for report.json: one line, the headline that
// leads a report when start-up and warm-up were most of the run, and the "life" object.

#include <cstdint>
#include <string>

#include "base/json_writer.h"
#include "diagnose/life.h"

namespace stallscope::report {

/// "start-up 18.4 s (import torch 3.9 s, set-up 8.4 s, first batch 5.6 s: 4 workers started) ·
/// warm-up 0.2 s over 1 step (forward_pass +0.1 s) · steady 1.0 s over 149 steps · tail 0.9 s
/// (exit 0.9 s)". Empty when no step was measured. Parts under 50 ms are left out, at most four
/// per stage; names are escaped for a terminal.
[[nodiscard]] std::string RenderLifeLine(const diagnose::RunLife& life);

/// When start-up and warm-up were most of the run, the line that leads the report ("START-UP
/// ..."), ending in a newline; else "". (The advice to run longer is a verdict caveat.)
[[nodiscard]] std::string RenderLifeHeadline(const diagnose::RunLife& life);

/// report.json's "life" object (README "report.json"): its numbers, parts and line. `start_ns`:
/// the job's start (CLOCK_MONOTONIC), for the steady window in seconds since it.
void WriteLifeJson(JsonWriter& w, const diagnose::RunLife& life, int64_t start_ns);

}  // namespace stallscope::report
