#pragma once

// A check's outcome as data, and the list of every check doctor runs. Check ids are stable (the
// README lists them, `--json` consumers match on them): never rename one.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/facts.h"

namespace stallscope::doctor {

/// Ordered by severity: the worst of several is the largest.
enum class CheckStatus : uint8_t { kOk, kSkip, kWarn, kFail };

/// "ok", "skip", "warn", "fail" (the JSON values; the text report upper-cases them).
[[nodiscard]] std::string_view StatusName(CheckStatus status);

struct Check {
  std::string id;               ///< "gpu.pcie_link": group, dot, name
  std::string title;            ///< "PCIe link"
  std::optional<uint32_t> gpu;  ///< NVML index of the GPU it is about
  CheckStatus status = CheckStatus::kOk;
  std::string detail;  ///< what was found, with numbers and units
  std::string fix;     ///< what to do about it; empty when there is nothing to do
};

/// Shorthand constructors for the check functions.
[[nodiscard]] Check MakeCheck(std::string id, std::string title, CheckStatus status,
                              std::string detail, std::string fix = {});

struct CheckCounts {
  int ok = 0;
  int skip = 0;
  int warn = 0;
  int fail = 0;
};
[[nodiscard]] CheckCounts CountChecks(const std::vector<Check>& checks);

/// The process exit status for a list of checks: 1 when any check FAILs, else 0.
[[nodiscard]] int ExitCode(const std::vector<Check>& checks);

/// Every check, in report order: driver and GPUs, host, storage, Python and torch, environment.
[[nodiscard]] std::vector<Check> RunChecks(const Facts& facts);

/// What the renderers print: the facts, the checks and when and where they were taken.
struct Report {
  std::string tool_version;  ///< "stallscope 0.1.0"
  std::string hostname;
  int64_t wall_ns = 0;
  Facts facts;
  std::vector<Check> checks;
};

}  // namespace stallscope::doctor
