#include "sample/line_reader.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.h"

namespace stallscope::sample {
namespace {

/// One line as the reader saw it, for EXPECT_EQ on whole files.
struct Seen {
  std::string text;
  int64_t number;
  bool complete;
  bool overlong;
  bool operator==(const Seen&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Seen& s) {
  return os << s.number << ":'" << s.text << "'" << (s.complete ? "" : " torn")
            << (s.overlong ? " overlong" : "");
}

std::vector<Seen> ReadAll(const std::string& path, const LineReaderOptions& options) {
  auto reader = LineReader::Open(path, options);
  EXPECT_TRUE(reader.ok()) << reader.error().message;
  std::vector<Seen> out;
  if (!reader.ok()) return out;
  for (;;) {
    auto line = reader->Next();
    EXPECT_TRUE(line.ok()) << line.error().message;
    if (!line.ok() || !*line) break;
    const Line& l = **line;
    out.push_back({std::string(l.text), l.number, l.complete, l.overlong});
  }
  return out;
}

class LineReaderTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& bytes) {
    std::string path = (dir_.path() / "in.jsonl").string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  stallscope::testing::TempDir dir_;
};

// Every chunk size, from one byte to more than the file, gives the same lines.
TEST_F(LineReaderTest, LinesDoNotDependOnTheChunkSize) {
  struct Case {
    std::string bytes;
    std::vector<Seen> want;
  };
  const Case cases[] = {
      {"", {}},
      {"\n", {{"", 1, true, false}}},
      {"a\nbb\n", {{"a", 1, true, false}, {"bb", 2, true, false}}},
      {"a\n\nccc", {{"a", 1, true, false}, {"", 2, true, false}, {"ccc", 3, false, false}}},
      {"torn", {{"torn", 1, false, false}}},
      {"crlf\r\nx\n", {{"crlf\r", 1, true, false}, {"x", 2, true, false}}},
  };
  for (const auto& c : cases) {
    const std::string path = Write(c.bytes);
    for (size_t chunk : {1, 2, 3, 5, 64 << 10}) {
      LineReaderOptions options;
      options.chunk_bytes = chunk;
      options.padding = 64;
      EXPECT_EQ(ReadAll(path, options), c.want) << "chunk " << chunk << " input '" << c.bytes;
    }
  }
}

// A line over the cap is skipped unread and flagged; the lines around it are intact, and memory
// stays at the cap (the buffer never grows past it).
TEST_F(LineReaderTest, LinesOverTheCapAreSkippedAndFlagged) {
  const std::string path =
      Write("12345678\n123456789\nok\n" + std::string(100, 'x') + "\nend\n" + std::string(20, 'y'));
  const std::vector<Seen> want = {{"12345678", 1, true, false}, {"", 2, true, true},
                                  {"ok", 3, true, false},       {"", 4, true, true},
                                  {"end", 5, true, false},      {"", 6, false, true}};
  for (size_t chunk : {1, 2, 4, 8, 9, 10, 16, 1024}) {
    LineReaderOptions options;
    options.max_line_bytes = 8;
    options.chunk_bytes = chunk;
    EXPECT_EQ(ReadAll(path, options), want) << "chunk " << chunk;
  }
}

TEST_F(LineReaderTest, ReadsAPipe) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::thread writer([fd = fds[1]] {
    std::string text;
    for (int i = 0; i < 1000; ++i) text += "line " + std::to_string(i) + "\n";
    for (size_t off = 0; off < text.size();) {
      ssize_t n = write(fd, text.data() + off, std::min<size_t>(777, text.size() - off));
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    close(fd);
  });
  LineReaderOptions options;
  options.chunk_bytes = 100;
  auto lines = ReadAll("/dev/fd/" + std::to_string(fds[0]), options);
  writer.join();
  close(fds[0]);
  ASSERT_EQ(lines.size(), 1000u);
  EXPECT_EQ(lines[999], (Seen{"line 999", 1000, true, false}));
}

TEST_F(LineReaderTest, AMissingFileNamesTheFile) {
  auto r = LineReader::Open("/nonexistent/run.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(r.error().message,
            "/nonexistent/run.jsonl: cannot open recording: no such file or directory");
}

TEST_F(LineReaderTest, ADirectoryIsAReadError) {
  auto r = LineReader::Open(dir_.path().string());
  ASSERT_TRUE(r.ok());
  auto line = r->Next();
  ASSERT_FALSE(line.ok());
  EXPECT_EQ(line.error().code, ErrorCode::kIo);
  EXPECT_NE(line.error().message.find(dir_.path().string()), std::string::npos);
}

}  // namespace
}  // namespace stallscope::sample
