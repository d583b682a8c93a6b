#pragma once

// The H100 run of `make gpu-check` (shared/gpu/h100-2026-11-26/gpu-check.tgz: its run
// directories, recordings and profiler trace), unpacked once per test process into a private
// temporary folder. Read in place from the shared folder and never copied into the repository;
// the tests that need it skip when it is absent.

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace stallscope::testing {

/// `$STALLSCOPE_SHARED_DIR` when set and not empty, else `<source dir>/../shared` (the shared
/// folder next to the checkout). Returned whether or not it exists.
inline std::filesystem::path SharedDir() {
  const char* env = std::getenv("STALLSCOPE_SHARED_DIR");
  return env != nullptr && *env != '\0'
             ? std::filesystem::path(env)
             : std::filesystem::path(STALLSCOPE_SOURCE_DIR) / ".." / "shared";
}

/// The unpacked `gpucheck/` folder of the H100 run (run-compute/, run-periodic/, profile/,
/// table.md, ...), or nullopt when the tarball is absent or cannot be unpacked. Unpacked on the
/// first call into `$TMPDIR/stallscope_h100_<pid>` (one per test process: ctest runs tests in
/// parallel) and removed when the process exits.
inline std::optional<std::filesystem::path> H100GpuCheckDir() {
  static const std::optional<std::filesystem::path> dir =
      []() -> std::optional<std::filesystem::path> {
    const std::filesystem::path tgz = SharedDir() / "gpu" / "h100-2026-11-26" / "gpu-check.tgz";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(tgz, ec)) return std::nullopt;
    const std::filesystem::path out =
        std::filesystem::temp_directory_path() / ("stallscope_h100_" + std::to_string(getpid()));
    std::filesystem::remove_all(out, ec);
    std::filesystem::create_directories(out, ec);
    const std::string cmd = "tar xzf '" + tgz.string() + "' -C '" + out.string() + "'";
    if (std::system(cmd.c_str()) != 0) return std::nullopt;
    static const std::string cleanup = out.string();
    std::atexit([] {
      std::error_code e;
      std::filesystem::remove_all(cleanup, e);
    });
    if (!std::filesystem::is_directory(out / "gpucheck", ec)) return std::nullopt;
    return out / "gpucheck";
  }();
  return dir;
}

}  // namespace stallscope::testing
