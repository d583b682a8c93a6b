#include "base/file_read.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.h"

namespace stallscope {
namespace {

using testing::TempDir;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

struct Seen {
  std::vector<std::string> lines;
  std::vector<bool> complete;
};

Result<LineCounts> Lines(const std::string& path, Seen& seen, size_t cap = kMaxJsonLineBytes) {
  return ForEachLine(
      path,
      [&](const TextLine& l) {
        seen.lines.emplace_back(l.text);
        seen.complete.push_back(l.complete);
      },
      cap);
}

TEST(ReadOnlyFile, OpensRegularFilesAndFollowsLinksToThem) {
  TempDir dir;
  WriteFile(dir.Sub("a"), "hello");
  ASSERT_EQ(symlink(dir.Sub("a").c_str(), dir.Sub("link").c_str()), 0);
  for (const char* name : {"a", "link"}) {
    auto f = ReadOnlyFile::Open(dir.Sub(name));
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->size_bytes(), 5u);
    char buf[16];
    auto n = f->Read(buf, sizeof(buf));
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(std::string(buf, *n), "hello");
  }
}

// Issue 27 B14: a FIFO without a writer blocked open(2) forever (diagnose hung on a run
// directory). A hang here is the bug: ctest's timeout catches it.
TEST(ReadOnlyFile, RefusesFifoDirectorySocketAndDeviceWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(mkfifo(dir.Sub("fifo").c_str(), 0644), 0);
  ASSERT_EQ(mkdir(dir.Sub("dir").c_str(), 0755), 0);
  const int sock = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = dir.Sub("sock");
  ASSERT_LT(sock_path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, sock_path.c_str(), sock_path.size() + 1);
  ASSERT_EQ(bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  struct Case {
    std::string path;
    const char* kind;
  };
  for (const Case& c : {Case{dir.Sub("fifo"), "a FIFO"}, Case{dir.Sub("dir"), "a directory"},
                        Case{"/dev/zero", "a character device"}}) {
    auto f = ReadOnlyFile::Open(c.path);
    ASSERT_FALSE(f.ok()) << c.path;
    EXPECT_EQ(f.error().code, ErrorCode::kUnsupported) << c.path;
    EXPECT_EQ(f.error().message, c.path + ": not a regular file (" + c.kind + "); not read");
  }
  // A socket cannot be opened at all (ENXIO): an error naming it, never a hang.
  auto s = ReadOnlyFile::Open(sock_path);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find(sock_path), std::string::npos);
  close(sock);
}

TEST(ReadOnlyFile, MissingIsNotFoundAndNamesTheFile) {
  TempDir dir;
  for (const std::string& path : {dir.Sub("none"), dir.Sub("none/below")}) {
    auto f = ReadOnlyFile::Open(path);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.error().code, ErrorCode::kNotFound) << path;
    EXPECT_EQ(f.error().message.rfind(path + ": cannot open: ", 0), 0u) << f.error().message;
  }
}

TEST(ReadSmallFile, ReadsUpToTheLimitAndRefusesMore) {
  TempDir dir;
  WriteFile(dir.Sub("f"), "0123456789");
  EXPECT_EQ(ReadSmallFile(dir.Sub("f"), 10).value(), "0123456789");
  auto big = ReadSmallFile(dir.Sub("f"), 9);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(big.error().message.find("over the 9 byte limit"), std::string::npos);
  WriteFile(dir.Sub("empty"), "");
  EXPECT_EQ(ReadSmallFile(dir.Sub("empty"), 0).value(), "");
  ASSERT_EQ(mkfifo(dir.Sub("fifo").c_str(), 0644), 0);
  EXPECT_EQ(ReadSmallFile(dir.Sub("fifo"), 100).error().code, ErrorCode::kUnsupported);
}

// /proc files stat as 0 bytes: read to their end all the same (this process's maps has many
// lines; before, one byte was read), and the limit still holds.
TEST(ReadSmallFile, ProcFilesAreReadToTheirEnd) {
  const auto maps = ReadSmallFile("/proc/self/maps", size_t{16} << 20);
  ASSERT_TRUE(maps.ok()) << maps.error().message;
  EXPECT_GT(std::count(maps->begin(), maps->end(), '\n'), 5);  // stat says 0 bytes
  EXPECT_EQ(maps->back(), '\n');
  auto capped = ReadSmallFile("/proc/self/maps", 100);
  ASSERT_FALSE(capped.ok());
  EXPECT_EQ(capped.error().code, ErrorCode::kUnsupported);
}

TEST(ForEachLine, Table) {
  struct Case {
    const char* name;
    std::string text;
    size_t cap;
    std::vector<std::string> lines;
    bool last_complete;
    int64_t overlong;
  };
  const std::vector<Case> cases = {
      {"empty file", "", 8, {}, true, 0},
      {"one line", "abc\n", 8, {"abc"}, true, 0},
      {"torn last line", "abc\nde", 8, {"abc", "de"}, false, 0},
      {"blank lines kept", "\n\nx\n", 8, {"", "", "x"}, true, 0},
      {"exactly the cap", "12345678\n", 8, {"12345678"}, true, 0},
      {"one over the cap", "123456789\nok\n", 8, {"ok"}, true, 1},
      {"overlong torn tail", "ok\n123456789", 8, {"ok"}, true, 1},
      {"two overlong", "aaaaaaaaaa\nbbbbbbbbbbbb\nc\n", 8, {"c"}, true, 2},
  };
  TempDir dir;
  for (const Case& c : cases) {
    WriteFile(dir.Sub("f"), c.text);
    Seen seen;
    auto counts = Lines(dir.Sub("f"), seen, c.cap);
    ASSERT_TRUE(counts.ok()) << c.name;
    EXPECT_EQ(seen.lines, c.lines) << c.name;
    EXPECT_EQ(counts->lines, static_cast<int64_t>(c.lines.size())) << c.name;
    EXPECT_EQ(counts->overlong, c.overlong) << c.name;
    if (!seen.complete.empty()) {
      EXPECT_EQ(seen.complete.back(), c.last_complete) << c.name;
    }
  }
}

// Lines that span the 64 KiB read chunks, and one far over the cap across many chunks: the
// long one is skipped (issue 27 B16: such a line cost ~4x its size before).
TEST(ForEachLine, LinesAcrossChunksAndAnOverlongOneSkipped) {
  TempDir dir;
  const std::string long_ok(200'000, 'a');
  const std::string too_long(3'000'000, 'b');
  WriteFile(dir.Sub("f"), "x\n" + long_ok + "\n" + too_long + "\n" + "y\n");
  Seen seen;
  auto counts = Lines(dir.Sub("f"), seen, 1'000'000);
  ASSERT_TRUE(counts.ok());
  ASSERT_EQ(seen.lines.size(), 3u);
  EXPECT_EQ(seen.lines[0], "x");
  EXPECT_EQ(seen.lines[1], long_ok);
  EXPECT_EQ(seen.lines[2], "y");
  EXPECT_EQ(counts->overlong, 1);
  EXPECT_EQ(OverlongLinesWarning("p.jsonl", counts->overlong),
            "p.jsonl: 1 line over the 16 MiB line limit skipped");
  EXPECT_EQ(OverlongLinesWarning("p.jsonl", 2, 1000),
            "p.jsonl: 2 lines over the 1000 byte line limit skipped");
}

TEST(ForEachLine, FifoIsRefusedNotRead) {
  TempDir dir;
  ASSERT_EQ(mkfifo(dir.Sub("fifo").c_str(), 0644), 0);
  Seen seen;
  auto counts = Lines(dir.Sub("fifo"), seen);
  ASSERT_FALSE(counts.ok());
  EXPECT_EQ(counts.error().code, ErrorCode::kUnsupported);
  EXPECT_EQ(Lines(dir.Sub("missing"), seen).error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace stallscope
