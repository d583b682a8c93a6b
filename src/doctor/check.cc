#include "doctor/check.h"

#include <utility>

#include "doctor/env_checks.h"
#include "doctor/gpu_checks.h"
#include "doctor/host_checks.h"
#include "doctor/python_checks.h"
#include "doctor/stacks_check.h"

namespace stallscope::doctor {

std::string_view StatusName(CheckStatus status) {
  switch (status) {
    case CheckStatus::kOk:
      return "ok";
    case CheckStatus::kSkip:
      return "skip";
    case CheckStatus::kWarn:
      return "warn";
    case CheckStatus::kFail:
      return "fail";
  }
  return "?";
}

Check MakeCheck(std::string id, std::string title, CheckStatus status, std::string detail,
                std::string fix) {
  Check c;
  c.id = std::move(id);
  c.title = std::move(title);
  c.status = status;
  c.detail = std::move(detail);
  c.fix = std::move(fix);
  return c;
}

CheckCounts CountChecks(const std::vector<Check>& checks) {
  CheckCounts n;
  for (const Check& c : checks) {
    switch (c.status) {
      case CheckStatus::kOk:
        ++n.ok;
        break;
      case CheckStatus::kSkip:
        ++n.skip;
        break;
      case CheckStatus::kWarn:
        ++n.warn;
        break;
      case CheckStatus::kFail:
        ++n.fail;
        break;
    }
  }
  return n;
}

int ExitCode(const std::vector<Check>& checks) { return CountChecks(checks).fail > 0 ? 1 : 0; }

std::vector<Check> RunChecks(const Facts& facts) {
  std::vector<Check> all;
  auto append = [&all](std::vector<Check> more) {
    for (Check& c : more) all.push_back(std::move(c));
  };
  append(GpuChecks(facts));
  append(HostChecks(facts));
  append(StackChecks(facts));
  append(StorageChecks(facts));
  append(PythonChecks(facts));
  append(EnvChecks(facts));
  return all;
}

}  // namespace stallscope::doctor
