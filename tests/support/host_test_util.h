#pragma once

// Test-only helpers for the host module: fixture paths and throwaway copies of fixture trees.

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "host/host.h"
#include "temp_dir.h"

namespace stallscope::host::testing {

/// tests/data/<rel> in the source tree.
inline std::filesystem::path DataPath(std::string_view rel) {
  return std::filesystem::path(STALLSCOPE_SOURCE_DIR) / "tests" / "data" / rel;
}

/// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
using TempDir = stallscope::testing::TempDir;

/// Copies the fixture tree tests/data/<rel> to `dest`, overwriting files already there (so a
/// second call with a "*_next" fixture overlays the files that changed).
inline void CopyFixture(std::string_view rel, const std::filesystem::path& dest) {
  namespace fs = std::filesystem;
  fs::create_directories(dest);
  fs::copy(DataPath(rel), dest, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

/// Writes `text` to `path`, replacing it.
inline void WriteFile(const std::filesystem::path& path, std::string_view text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

/// A ProcFs over copies of tests/data/proc/<proc>, tests/data/cgroup/<cgroup> and
/// tests/data/proc/<proc>_sysfs under `root`; /dev/shm is `root` itself (any existing path).
inline ProcFs FixtureFs(const std::filesystem::path& root) {
  ProcFs fs;
  fs.proc_root = (root / "proc").string();
  fs.cgroup_root = (root / "cgroup").string();
  fs.sys_root = (root / "sys").string();
  fs.shm_path = root.string();
  return fs;
}

}  // namespace stallscope::host::testing
