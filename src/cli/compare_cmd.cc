// `stallscope compare A B`: two run directories digested (diagnose/experiment.h), compared
// (diagnose/compare.h) and rendered (report/compare_render.h).

#include <fmt/format.h>

#include "base/units.h"
#include "cli/commands.h"
#include "diagnose/compare.h"
#include "diagnose/experiment.h"
#include "report/compare_render.h"

namespace stallscope::cli {

int RunCompare(const CompareOptions& o) {
  auto a = diagnose::LoadDigest(o.a);
  if (!a.ok()) {
    // LoadRun's message names the directory and what is missing.
    fmt::print(stderr, "stallscope compare: A: {}\n", EscapeControl(a.error().message));
    return 1;
  }
  auto b = diagnose::LoadDigest(o.b);
  if (!b.ok()) {
    fmt::print(stderr, "stallscope compare: B: {}\n", EscapeControl(b.error().message));
    return 1;
  }
  diagnose::CompareReport report = diagnose::Compare(*a, *b);
  fmt::print("{}", o.json ? report::RenderCompareJson(report) : report::RenderCompareText(report));
  return 0;
}

}  // namespace stallscope::cli
