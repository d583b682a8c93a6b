#pragma once

#include <optional>
#include <span>

#include "cli/commands.h"

namespace stallscope::cli {

/// One option taking a value or a flag: CLI11 builds it in the full binary (cli.cc), and
/// ParseRecordArgs reads it in the front binary, so both know the same options.
struct OptionSpec {
  const char* names;  ///< CLI11's form: "-i,--interval" or "--csv"
  const char* help;
  const char* default_value;  ///< nullptr: none
  int32_t min_value = 0;      ///< an integer option's smallest value
  // Where the value goes: exactly one is set. RecordOptionSpecs() set text, number or flag;
  // SamplingOptionSpecs() set sampling.
  std::string* (*text)(RecordOptions&) = nullptr;        ///< a text option of `record`
  int32_t* (*number)(RecordOptions&) = nullptr;          ///< an integer option of `record`
  bool* (*flag)(RecordOptions&) = nullptr;               ///< a flag of `record`
  std::string* (*sampling)(SamplingOptions&) = nullptr;  ///< a sampling option (any command)
  bool* (*sampling_flag)(SamplingOptions&) = nullptr;    ///< a sampling flag (any command)
};

/// `record`'s own options (not its `command` positional), in --help order.
std::span<const OptionSpec> RecordOptionSpecs();
/// --nvml-lib, --proc-root, --pcie, --no-gpm, --gpm-interval: every sampling command takes them.
std::span<const OptionSpec> SamplingOptionSpecs();
/// --demo (machine.h DemoGpuDir): the commands that show GPUs, `top`, `record` and `serve`.
std::span<const OptionSpec> DemoOptionSpecs();

/// What `record --help` (and run's) says about how often each GPU field is read (issue 28): the
/// tiers with their periods from the thresholds table.
std::string PollingHelp();

/// `stallscope record ...` (argv[1] == "record") parsed as CLI11 parses it in the full binary, in
/// the common forms only: `--name value`, `--name=value`, `-i value`, flags, a command after
/// `--`. Anything else (help, an unknown option, a repeated one, a malformed number, a command
/// without `--`) gives nullopt, and the front binary leaves it to the full one, which prints
/// CLI11's help or error. record_args_test checks the two agree.
std::optional<RecordOptions> ParseRecordArgs(int argc, const char* const* argv);

}  // namespace stallscope::cli
