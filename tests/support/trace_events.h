#pragma once

// Hand-built trace events for the src/trace tests: one `Ev` a line of a table, added to a
// RankTrace with its name interned.

#include <cstdint>
#include <string>

#include "trace/trace_model.h"

namespace stallscope::testing {

/// Short names for the event kinds, so a test table fits a line.
inline constexpr auto kK = trace::EventKind::kKernel;
inline constexpr auto kRt = trace::EventKind::kRuntime;
inline constexpr auto kOp = trace::EventKind::kCpuOp;
inline constexpr auto kAnn = trace::EventKind::kUserAnnotation;

/// One complete event as a test table writes it.
struct Ev {
  trace::EventKind kind;
  std::string name;
  int64_t ts_ns;
  int64_t dur_ns;
  int32_t pid = 0;
  int64_t tid = 0;
  int64_t correlation = -1;
  uint64_t bytes = 0;
  uint8_t flags = trace::kFlagNone;
};

/// Appends `ev` to `t.events`, interning its name in `t.names`.
inline void Add(trace::RankTrace& t, const Ev& ev) {
  trace::Event e;
  e.kind = ev.kind;
  e.name_id = t.names.Intern(ev.name);
  e.ts_ns = ev.ts_ns;
  e.set_dur_ns(ev.dur_ns);
  e.pid = ev.pid;
  e.tid = ev.tid;
  e.correlation = ev.correlation;
  e.bytes = ev.bytes;
  if (ev.flags & trace::kFlagCudaGraph) e.flags = trace::kFlagCudaGraph;  // the only flag
  t.events.push_back(e);
}

}  // namespace stallscope::testing
