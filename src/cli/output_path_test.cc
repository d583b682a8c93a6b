#include "cli/output_path.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.h"

namespace stallscope::cli {
namespace {

namespace fs = std::filesystem;

TEST(RefuseOutputPath, NewEmptyDevicesAndStdoutAreFine) {
  testing::TempDir dir("output_path");
  const std::string empty = (dir.path() / "empty").string();
  std::ofstream{empty};
  EXPECT_FALSE(RefuseOutputPath("-o", (dir.path() / "new.jsonl").string(), false));
  EXPECT_FALSE(RefuseOutputPath("-o", empty, false));  // mktemp's file: nothing to lose
  EXPECT_FALSE(RefuseOutputPath("-o", "/dev/null", false));
  EXPECT_FALSE(RefuseOutputPath("-o", "-", false));
}

TEST(RefuseOutputPath, AFileWithSomethingInItNeedsForce) {
  testing::TempDir dir("output_path");
  const std::string mine = (dir.path() / "mine.json").string();
  std::ofstream(mine) << "my notes\n";
  auto refused = RefuseOutputPath("--export-perfetto", mine, false);
  ASSERT_TRUE(refused);
  EXPECT_EQ(*refused, "--export-perfetto " + mine +
                          ": exists (9 B); give --force to replace it, or another "
                          "--export-perfetto");
  EXPECT_FALSE(RefuseOutputPath("--export-perfetto", mine, true));
}

TEST(RefuseOutputPath, ADirectoryIsRefusedEvenWithForce) {
  testing::TempDir dir("output_path");
  auto refused = RefuseOutputPath("-o", dir.path().string(), true);
  ASSERT_TRUE(refused);
  EXPECT_EQ(*refused, "-o " + dir.path().string() + ": is a directory");
}

TEST(RefuseOutputPath, AnInputIsRefusedEvenWithForceThroughLinks) {
  testing::TempDir dir("output_path");
  const fs::path input = dir.path() / "trace.json";
  std::ofstream(input) << "{}";
  fs::create_symlink(input, dir.path() / "sym.json");
  fs::create_hard_link(input, dir.path() / "hard.json");
  const std::vector<std::string> inputs = {input.string()};
  for (const char* name : {"trace.json", "sym.json", "hard.json"}) {
    const std::string out = (dir.path() / name).string();
    auto refused = RefuseOutputPath("--export-perfetto", out, true, inputs);
    ASSERT_TRUE(refused) << name;
    EXPECT_EQ(*refused, "--export-perfetto " + out + ": is the input " + input.string() +
                            "; choose another file");
  }
  const std::vector<std::string> other = {(dir.path() / "other.json").string()};
  EXPECT_FALSE(RefuseOutputPath("--export-perfetto", input.string(), true, other));
}

}  // namespace
}  // namespace stallscope::cli
