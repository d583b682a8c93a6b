#pragma once

namespace stallscope::cli {

/// Parses argv, runs the subcommand, returns the process exit code. The only place that catches
/// exceptions (CLI11 reports parse errors with them).
int Run(int argc, char** argv);

}  // namespace stallscope::cli
