#pragma once

// How fast the training data directory can be read, in bounded time and without writing to it:
// a scan (file count and sizes), whole-file reads of randomly chosen files (MB/s, files/s: what a
// Dataset that reads one file per sample gets) and 4 KiB reads at random offsets (IOPS and
// latency: what an indexed or sharded format gets). Reads use O_DIRECT, so the device is
// measured and not the page cache; where the filesystem refuses O_DIRECT, buffered reads after
// dropping the file's cached pages (posix_fadvise DONTNEED), which the result says.

#include <cstdint>
#include <string>

#include "doctor/facts.h"

namespace stallscope::doctor {

struct DataProbeOptions {
  int64_t time_budget_ns = 3'000'000'000;  ///< the whole probe, scan included
  uint32_t threads = 4;                    ///< parallel readers (DataLoader workers), 1..16
  uint64_t max_files = 200'000;            ///< the scan stops here
  bool force_buffered = false;             ///< tests: take the no-O_DIRECT path
};

/// Probes `dir`. Never fails: an unreadable directory is reported in DataFacts::error, files
/// that cannot be read are counted in read_errors and skipped.
[[nodiscard]] DataFacts ProbeData(const std::string& dir, const DataProbeOptions& options);

}  // namespace stallscope::doctor
