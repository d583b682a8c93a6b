#pragma once

// Where the tests find the Holistic Trace Analysis reference traces (shared/traces/hta; their
// origin is in SOURCE.md there). They are read in place and never copied into the repository;
// the tests that need them skip when they are absent.

#include <cstdlib>
#include <filesystem>

namespace stallscope::testing {

/// `$STALLSCOPE_SHARED_DIR/traces/hta` when that variable is set and not empty, else
/// `<source dir>/../shared/traces/hta` (the shared folder next to the checkout). The path is
/// returned whether or not it exists.
inline std::filesystem::path HtaTracesDir() {
  const char* env = std::getenv("STALLSCOPE_SHARED_DIR");
  std::filesystem::path shared =
      env != nullptr && *env != '\0'
          ? std::filesystem::path(env)
          : std::filesystem::path(STALLSCOPE_SOURCE_DIR) / ".." / "shared";
  return shared / "traces" / "hta";
}

}  // namespace stallscope::testing
