#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace stallscope::testing {

/// Compares `actual` with the golden file tests/data/golden/<name>. With
/// STALLSCOPE_UPDATE_GOLDEN=1 the file is rewritten instead (review the diff before committing).
inline void ExpectGolden(const std::string& name, const std::string& actual) {
  std::filesystem::path path =
      std::filesystem::path(STALLSCOPE_SOURCE_DIR) / "tests" / "data" / "golden" / name;
  const char* update = std::getenv("STALLSCOPE_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing golden file " << path
                         << " (run with STALLSCOPE_UPDATE_GOLDEN=1 to create it)";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(expected.str(), actual) << "golden file " << path << " differs; rerun with "
                                    << "STALLSCOPE_UPDATE_GOLDEN=1 and review the diff";
}

}  // namespace stallscope::testing
