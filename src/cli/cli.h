#pragma once

#include <optional>

#include "cli/commands.h"

namespace stallscope::cli {

/// Parses argv, runs the subcommand, returns the process exit code. The only place that catches
/// exceptions (CLI11 reports parse errors with them).
int Run(int argc, char** argv);

/// `stallscope record ...` as Run parses it (CLI11), without running it: nullopt when CLI11
/// rejects the line or prints help. record_args_test holds ParseRecordArgs to it.
std::optional<RecordOptions> ParseRecordWithCli11(int argc, const char* const* argv);

}  // namespace stallscope::cli
