#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/machine.h"

namespace stallscope::cli {

struct RecordOptions {
  SamplingOptions sampling;
  std::string interval = "1s";
  std::string output;  ///< empty → stallscope-record-<time>.jsonl; "-" → stdout
  std::string duration;
  bool csv = false;
  int32_t pid = 0;
  std::vector<std::string> command;
};
/// `stallscope record`. Returns the followed command's exit code, else 0; 1 on errors.
int RunRecord(const RecordOptions& options);

struct TopOptions {
  SamplingOptions sampling;
  std::string interval = "1s";
  bool once = false;
  bool json = false;
  bool status = false;
  int64_t count = 0;  ///< stop after this many refreshes (0 = until Ctrl-C)
};
/// `stallscope top`.
int RunTop(const TopOptions& options);

struct SummaryOptions {
  std::string path;
  bool json = false;
};
/// `stallscope summary`.
int RunSummary(const SummaryOptions& options);

}  // namespace stallscope::cli
