#include "stacks/source_lines.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "temp_dir.h"

namespace stallscope::stacks {
namespace {

TEST(SourceLines, LinesOfAFileTrimmedAndNothingForWhatCannotBeRead) {
  testing::TempDir dir;
  std::ofstream(dir.Sub("a.py")) << "def f():\n    return 1  \n";
  SourceLines lines;
  EXPECT_EQ(lines.Line(getpid(), dir.Sub("a.py"), 2), "return 1");
  EXPECT_EQ(lines.Line(getpid(), dir.Sub("a.py"), 1), "def f():");
  EXPECT_EQ(lines.Line(getpid(), dir.Sub("a.py"), 3), std::nullopt);
  EXPECT_EQ(lines.Line(getpid(), dir.Sub("a.py"), 0), std::nullopt);
  EXPECT_EQ(lines.Line(getpid(), "<frozen importlib._bootstrap>", 5), std::nullopt);
  EXPECT_EQ(lines.Line(getpid(), dir.Sub("missing.py"), 1), std::nullopt);
  ASSERT_EQ(mkfifo(dir.Sub("fifo.py").c_str(), 0644), 0);  // never opened: no hang
  EXPECT_EQ(lines.Line(getpid(), dir.Sub("fifo.py"), 1), std::nullopt);
}

TEST(SourceLines, ARelativeNameIsReadInTheProcesssWorkingDirectory) {
  testing::TempDir dir;
  std::ofstream(dir.Sub("rel.py")) << "x = 1\n";
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(dir.path().c_str()), 0);
  SourceLines lines;
  const auto text = lines.Line(getpid(), "rel.py", 1);
  ASSERT_EQ(chdir(cwd), 0);
  EXPECT_EQ(text, "x = 1");
}

}  // namespace
}  // namespace stallscope::stacks
