// `stallscope compare A B`: two run directories digested (experiment/experiment.h), compared
// (experiment/compare.h) and rendered (report/compare_render.h).

#include <fmt/format.h>

#include "base/units.h"
#include "cli/commands.h"
#include "experiment/compare.h"
#include "experiment/experiment.h"
#include "report/compare_render.h"

namespace stallscope::cli {

int RunCompare(const CompareOptions& o) {
  auto a = experiment::LoadDigest(o.a);
  if (!a.ok()) {
    // LoadRun's message names the directory and what is missing.
    fmt::print(stderr, "stallscope compare: A: {}\n", EscapeControl(a.error().message));
    return 1;
  }
  auto b = experiment::LoadDigest(o.b);
  if (!b.ok()) {
    fmt::print(stderr, "stallscope compare: B: {}\n", EscapeControl(b.error().message));
    return 1;
  }
  experiment::CompareReport report = experiment::Compare(*a, *b);
  fmt::print("{}", o.json ? report::RenderCompareJson(report) : report::RenderCompareText(report));
  return 0;
}

}  // namespace stallscope::cli
