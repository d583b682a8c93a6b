// `stallscope compare`'s errors, on the real binary. Its conclusions on real runs of
// examples/train.py (the same job twice is "no significant change", the data-bound job with 2
// DataLoader workers instead of 0 is significantly faster: issue 13's acceptance) are held on
// recorded runs: RecordedRun.SlowReadsSameJobNoChangeAndWorkersSignificantEvenOnABusyHost
// (recorded_run_test.cc, tests/data/runs/compare_*).

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "subprocess.h"

namespace {

namespace fs = std::filesystem;
using stallscope::testing::ProcessOutput;

class CompareE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = stallscope::testing::FreshTestDir("stallscope_compare_e2e");
    fs::create_directories(dir_ / "log");
  }
  void TearDown() override {
    if (!HasFailure() && !dir_.empty()) fs::remove_all(dir_);
  }

  ProcessOutput Stallscope(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {STALLSCOPE_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    return stallscope::testing::RunProcess(
        argv, stallscope::testing::EnvironmentWithout({"STALLSCOPE_"}), dir_ / "log", 240);
  }

  fs::path dir_;
};

TEST_F(CompareE2e, NotARunDirectoryIsAOneLineErrorNamingIt) {
  fs::create_directories(dir_ / "empty");
  std::string empty = (dir_ / "empty").string();
  auto r = Stallscope({"compare", empty, empty});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("stallscope compare: A: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(empty), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CompareE2e, UsageErrorsExit2) {
  EXPECT_EQ(Stallscope({"compare", "only-one"}).exit_code, 2);
  EXPECT_EQ(Stallscope({"compare", "a", "b", "--bogus"}).exit_code, 2);
  auto help = Stallscope({"compare", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("stallscope compare runs/w0 runs/w4"), std::string::npos) << help.out;
}

}  // namespace
