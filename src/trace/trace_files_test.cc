// trace_files.cc: which files a path list names, and reading them in order on threads.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.h"
#include "trace/trace_reader.h"

namespace stallscope::trace {
namespace {

namespace fs = std::filesystem;

std::string FilesFixture(const std::string& name) {
  return std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/traces/" + name;
}

TEST(ExpandTracePaths, DirectoriesAndFiles) {
  testing::TempDir dir("trace_files");
  for (const char* name : {"b.json", "a.json.gz", "c.pt.trace.json", "d.pt.trace.json.gz",
                           "notes.txt", "x.json.bak"}) {
    std::ofstream(dir.path() / name) << "[]";
  }
  fs::create_directory(dir.path() / "sub.json");
  Result<std::vector<std::string>> r =
      ExpandTracePaths({dir.path().string(), FilesFixture("reader_legacy.json")});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string d = dir.path().string() + "/";
  EXPECT_EQ(
      *r, (std::vector<std::string>{d + "a.json.gz", d + "b.json", d + "c.pt.trace.json",
                                    d + "d.pt.trace.json.gz", FilesFixture("reader_legacy.json")}));
  Result<std::vector<std::string>> missing = ExpandTracePaths({d + "nope"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message, d + "nope: no such file or directory");
}

// Issue 27 B15: `trace DIR` hung forever on a FIFO named like a trace in DIR. Only regular
// files (and links to them) are traces; a FIFO, a dangling link or a socket is skipped.
TEST(ExpandTracePaths, SkipsFifosAndDanglingLinks) {
  testing::TempDir dir("trace_files");
  std::ofstream(dir.path() / "rank0.json") << "[]";
  ASSERT_EQ(::mkfifo((dir.path() / "rank1.json").c_str(), 0600), 0);
  fs::create_symlink(dir.path() / "rank0.json", dir.path() / "rank2.json");
  fs::create_symlink(dir.path() / "gone.json", dir.path() / "rank3.json");
  Result<std::vector<std::string>> r = ExpandTracePaths({dir.path().string()});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string d = dir.path().string() + "/";
  EXPECT_EQ(*r, (std::vector<std::string>{d + "rank0.json", d + "rank2.json"}));
  // ListTracePaths says what was skipped, for the warning.
  Result<TracePathList> list = ListTracePaths({dir.path().string()});
  ASSERT_TRUE(list.ok()) << list.error().message;
  EXPECT_EQ(list->files, *r);
  EXPECT_EQ(list->skipped,
            (std::vector<std::string>{d + "rank1.json: a FIFO, not a regular file; skipped",
                                      d + "rank3.json: a symbolic link to nothing, not a regular "
                                          "file; skipped"}))
      << ::testing::PrintToString(list->skipped);
  // A folder whose only trace-named entry is a FIFO: the error says why nothing is there.
  testing::TempDir only("trace_files");
  const std::string fifo = (only.path() / "rank0.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<std::vector<std::string>> none = ExpandTracePaths({only.path().string()});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message, only.path().string() +
                                      ": no trace files (*.json, *.json.gz) in directory; " + fifo +
                                      ": a FIFO, not a regular file; skipped");
}

// Issue 27 B21: a path that cannot be reached was "no such file or directory" whatever the cause.
TEST(ExpandTracePaths, ASymbolicLinkLoopNamesTheCause) {
  testing::TempDir dir("trace_files");
  const fs::path loop = dir.path() / "loop.json";
  fs::create_symlink(loop, loop);
  Result<std::vector<std::string>> r = ExpandTracePaths({loop.string()});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, loop.string() + ": cannot open: too many levels of symbolic links");
}

// A FIFO named on the command line with no writer: an error at once, not a hang (the open
// used to block until a writer came).
TEST(ReadTrace, AFifoWithoutAWriterDoesNotBlock) {
  testing::TempDir dir("trace_files");
  const std::string fifo = (dir.path() / "t.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  Result<RankTrace> r = ReadTrace(fifo);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, fifo + ": not a Chrome/Kineto trace (empty file)");
}

TEST(ReadTraces, PathOrderAndFirstError) {
  std::vector<std::string> paths = {
      FilesFixture("reader_kineto.json"), FilesFixture("reader_legacy.json"),
      FilesFixture("reader_2021.json"), FilesFixture("reader_meta_after.json")};
  for (unsigned threads : {0u, 1u, 3u}) {
    Result<std::vector<RankTrace>> r = ReadTraces(paths, {}, threads);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), paths.size());
    for (size_t i = 0; i < paths.size(); ++i) EXPECT_EQ((*r)[i].path, paths[i]);
  }
  paths.push_back(FilesFixture("reader_not_trace.json"));
  paths.push_back("/nonexistent/x.json");
  Result<std::vector<RankTrace>> r = ReadTraces(paths, {}, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kParse);  // the first failing path in order
}

}  // namespace
}  // namespace stallscope::trace
