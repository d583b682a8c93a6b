#include "stacks/source_lines.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <optional>
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

// Issue 40 P07: a process in another mount namespace with the same root directory (`unshare
// -m`, a tmpfs over a folder) sees another file at the same path: its line is read through
// /proc/PID/root, not from our own namespace's file. Needs root (CAP_SYS_ADMIN for unshare).
TEST(SourceLines, AProcessInAnotherMountNamespaceGetsItsOwnFilesLine) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a mount namespace";
  testing::TempDir dir;
  const std::string app = dir.Sub("app");
  ASSERT_EQ(mkdir(app.c_str(), 0755), 0);
  std::ofstream(app + "/job.py") << "OUTSIDE = 1\n";
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child: its own mount namespace, a tmpfs over app/ holding another job.py.
    char status = 'x';
    if (unshare(CLONE_NEWNS) == 0 &&
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
        mount("tmpfs", app.c_str(), "tmpfs", 0, nullptr) == 0) {
      const std::string file = app + "/job.py";
      const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const char text[] = "INSIDE = 1\n";
      if (fd >= 0 && write(fd, text, sizeof(text) - 1) == sizeof(text) - 1) status = 'k';
      if (fd >= 0) close(fd);
    }
    (void)!write(ready[1], &status, 1);
    char byte = 0;
    (void)!read(done[0], &byte, 1);  // until the parent has read the line
    _exit(0);
  }
  char status = 0;
  ASSERT_EQ(read(ready[0], &status, 1), 1);
  std::optional<std::string> inside;
  if (status == 'k') inside = SourceLines().Line(child, app + "/job.py", 1);
  const char byte = 'd';
  (void)!write(done[1], &byte, 1);
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
  if (status != 'k') GTEST_SKIP() << "no mount namespace here (unshare or mount refused)";
  EXPECT_EQ(inside, "INSIDE = 1");
  EXPECT_EQ(SourceLines().Line(getpid(), app + "/job.py", 1), "OUTSIDE = 1");
}

// A job's frames may name any files (co_filename is the job's to set): the text held stays
// within SourceLines::kMaxBytes; files past it give no line.
TEST(SourceLines, TextHeldIsBounded) {
  testing::TempDir dir;
  const std::string big(7 << 20, 'x');  // under the 8 MiB a file may have
  SourceLines lines;
  for (int i = 0; i < 4; ++i)
    std::ofstream(dir.Sub(fmt::format("big{}.py", i))) << "x = 1\n" << big;
  EXPECT_EQ(lines.Line(getpid(), dir.Sub("big0.py"), 1), "x = 1");
  EXPECT_EQ(lines.Line(getpid(), dir.Sub("big1.py"), 1), "x = 1");
  EXPECT_EQ(lines.Line(getpid(), dir.Sub("big2.py"), 1), std::nullopt);  // past 16 MiB
  EXPECT_EQ(lines.Line(getpid(), dir.Sub("big3.py"), 1), std::nullopt);
  EXPECT_EQ(lines.Line(getpid(), dir.Sub("big0.py"), 1), "x = 1");
}

}  // namespace
}  // namespace stallscope::stacks
