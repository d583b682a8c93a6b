// trace_files.cc: which files a path list names, and reading them in order on threads.
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

std::string Fixture(const std::string& name) {
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
      ExpandTracePaths({dir.path().string(), Fixture("reader_legacy.json")});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string d = dir.path().string() + "/";
  EXPECT_EQ(*r,
            (std::vector<std::string>{d + "a.json.gz", d + "b.json", d + "c.pt.trace.json",
                                      d + "d.pt.trace.json.gz", Fixture("reader_legacy.json")}));
  Result<std::vector<std::string>> missing = ExpandTracePaths({d + "nope"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message, d + "nope: no such file or directory");
}

TEST(ReadTraces, PathOrderAndFirstError) {
  std::vector<std::string> paths = {Fixture("reader_kineto.json"), Fixture("reader_legacy.json"),
                                    Fixture("reader_2021.json"), Fixture("reader_meta_after.json")};
  for (unsigned threads : {0u, 1u, 3u}) {
    Result<std::vector<RankTrace>> r = ReadTraces(paths, {}, threads);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), paths.size());
    for (size_t i = 0; i < paths.size(); ++i) EXPECT_EQ((*r)[i].path, paths[i]);
  }
  paths.push_back(Fixture("reader_not_trace.json"));
  paths.push_back("/nonexistent/x.json");
  Result<std::vector<RankTrace>> r = ReadTraces(paths, {}, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kParse);  // the first failing path in order
}

}  // namespace
}  // namespace stallscope::trace
