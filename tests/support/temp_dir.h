#pragma once

// A scratch directory for tests: created fresh, removed with its contents at the end of scope.

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace stallscope::testing {

class TempDir {
 public:
  /// `<base>/<prefix>.XXXXXX`; base defaults to $TMPDIR (or /tmp).
  explicit TempDir(std::string_view prefix = "stallscope_test",
                   const std::filesystem::path& base = std::filesystem::temp_directory_path()) {
    std::string pattern = (base / (std::string(prefix) + ".XXXXXX")).string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
    EXPECT_FALSE(path_.empty()) << "mkdtemp failed for " << pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// A path inside the directory, as a string (nothing is created).
  std::string Sub(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace stallscope::testing
