#include "cli/output_path.h"

#include <sys/stat.h>
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
  for (OutputWrite how : {OutputWrite::kInPlace, OutputWrite::kReplace}) {
    EXPECT_FALSE(RefuseOutputPath("-o", (dir.path() / "new.jsonl").string(), false, how));
    EXPECT_FALSE(RefuseOutputPath("-o", empty, false, how));  // mktemp's file: nothing to lose
    EXPECT_FALSE(RefuseOutputPath("-o", "-", false, how));
  }
  EXPECT_FALSE(RefuseOutputPath("-o", "/dev/null", false, OutputWrite::kInPlace));
}

TEST(RefuseOutputPath, AFileWithSomethingInItNeedsForce) {
  testing::TempDir dir("output_path");
  const std::string mine = (dir.path() / "mine.json").string();
  std::ofstream(mine) << "my notes\n";
  for (OutputWrite how : {OutputWrite::kInPlace, OutputWrite::kReplace}) {
    auto refused = RefuseOutputPath("--export-perfetto", mine, false, how);
    ASSERT_TRUE(refused);
    EXPECT_EQ(*refused, "--export-perfetto " + mine +
                            ": exists (9 B); give --force to replace it, or another "
                            "--export-perfetto");
    EXPECT_FALSE(RefuseOutputPath("--export-perfetto", mine, true, how));
  }
}

TEST(RefuseOutputPath, ADirectoryIsRefusedEvenWithForce) {
  testing::TempDir dir("output_path");
  for (OutputWrite how : {OutputWrite::kInPlace, OutputWrite::kReplace}) {
    auto refused = RefuseOutputPath("-o", dir.path().string(), true, how);
    ASSERT_TRUE(refused);
    EXPECT_EQ(*refused, "-o " + dir.path().string() + ": is a directory");
  }
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
    auto refused = RefuseOutputPath("--export-perfetto", out, true, OutputWrite::kInPlace, inputs);
    ASSERT_TRUE(refused) << name;
    EXPECT_EQ(*refused, "--export-perfetto " + out + ": is the input " + input.string() +
                            "; choose another file");
  }
  const std::vector<std::string> other = {(dir.path() / "other.json").string()};
  EXPECT_FALSE(
      RefuseOutputPath("--export-perfetto", input.string(), true, OutputWrite::kInPlace, other));
}

// Issue 27 B01: `report --html` writes a temporary file and renames it over the path, so a FIFO,
// a device (as root, `--html /dev/null` replaced the machine's /dev/null) or a symbolic link
// there was replaced by a regular file. kReplace refuses any node that is not a regular file,
// --force or not; kInPlace (opened where it is: record -o, --export-perfetto) writes through it.
TEST(RefuseOutputPath, ANodeThatIsNotARegularFileIsNeverReplaced) {
  testing::TempDir dir("output_path");
  const std::string fifo = (dir.path() / "out.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string target = (dir.path() / "target.html").string();
  std::ofstream(target) << "<html>";
  const std::string link = (dir.path() / "link.html").string();
  fs::create_symlink(target, link);
  const std::string empty_target = (dir.path() / "empty.html").string();
  std::ofstream{empty_target};
  const std::string link_to_empty = (dir.path() / "link_empty.html").string();
  fs::create_symlink(empty_target, link_to_empty);
  const std::string dangling = (dir.path() / "dangling.html").string();
  fs::create_symlink(dir.path() / "gone.html", dangling);
  struct Case {
    std::string path;
    std::string kind;  // in the message
  } cases[] = {
      {fifo, "a FIFO"},
      {"/dev/null", "a character device"},
      {link, "a symbolic link"},
      {link_to_empty, "a symbolic link"},
      {dangling, "a symbolic link"},
  };
  for (const Case& c : cases) {
    for (bool force : {false, true}) {
      auto refused = RefuseOutputPath("--html", c.path, force, OutputWrite::kReplace);
      ASSERT_TRUE(refused) << c.path << " force=" << force;
      EXPECT_EQ(*refused, "--html " + c.path + ": is " + c.kind +
                              ", not a regular file; it is never replaced (give a file path)");
    }
    // Written through (the link's target: a regular file with something in it needs --force).
    EXPECT_EQ(RefuseOutputPath("-o", c.path, true, OutputWrite::kInPlace), std::nullopt) << c.path;
  }
  EXPECT_FALSE(RefuseOutputPath("-o", fifo, false, OutputWrite::kInPlace));
  EXPECT_FALSE(RefuseOutputPath("-o", "/dev/null", false, OutputWrite::kInPlace));
  EXPECT_FALSE(RefuseOutputPath("-o", dangling, false, OutputWrite::kInPlace));
  EXPECT_TRUE(RefuseOutputPath("-o", link, false, OutputWrite::kInPlace));  // target has data
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

}  // namespace
}  // namespace stallscope::cli
