// The command line a new user types (issue 41): the job's words after its command are the job's,
// with or without `--`; a typo names the command it meant; a job command without a job prints
// its usage line. The real binary; the jobs are plain Python scripts (no torch).

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "subprocess.h"

namespace stallscope {
namespace {

namespace fs = std::filesystem;
using stallscope::testing::ProcessOutput;
using stallscope::testing::Slurp;

class CommandLineE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = stallscope::testing::FreshTestDir("command_line");
    // The job: appends its arguments (after the log's path) to the log, one JSON list a run.
    std::ofstream(dir_ / "argv.py") << "import json, sys\n"
                                       "with open(sys.argv[1], 'a') as f:\n"
                                       "    f.write(json.dumps(sys.argv[2:]) + '\\n')\n";
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  ProcessOutput Stallscope(std::vector<std::string> args, double timeout_s = 120) {
    args.insert(args.begin(), STALLSCOPE_BIN);
    return stallscope::testing::RunProcess(
        args, stallscope::testing::EnvironmentWithout({"STALLSCOPE_"}), dir_, timeout_s);
  }
  /// python3 argv.py LOG: the job's command, its own arguments to follow.
  std::vector<std::string> Job(const fs::path& log) {
    return {"/usr/bin/python3", (dir_ / "argv.py").string(), log.string()};
  }
  /// The log's lines (one a run of the job).
  static std::vector<std::string> Lines(const fs::path& log) {
    std::vector<std::string> lines;
    std::istringstream in(Slurp(log));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  fs::path dir_;
};

// `stallscope run python argv.py --out x` gave `--out x` to stallscope, and `--lr 0.1` was
// "not expected": now every word from the job's command on is the job's, `--` or not, as
// `time`, `nohup` and `torchrun` read theirs.
TEST_F(CommandLineE2e, RunGivesTheJobEveryWordAfterItsCommandWithOrWithoutDashes) {
  for (const bool dashes : {false, true}) {
    SCOPED_TRACE(dashes ? "with --" : "without --");
    const fs::path log = dir_ / (dashes ? "dashes.jsonl" : "plain.jsonl");
    const fs::path run = dir_ / (dashes ? "run-dashes" : "run-plain");
    std::vector<std::string> args = {"run", "--quiet", "--no-stacks", "--out", run.string()};
    if (dashes) args.push_back("--");
    for (const std::string& word : Job(log)) args.push_back(word);
    for (const char* word : {"--out", "x", "--lr", "0.1", "-i", "--", "--help"}) {
      args.push_back(word);
    }
    ProcessOutput r = Stallscope(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(Slurp(log), R"(["--out", "x", "--lr", "0.1", "-i", "--", "--help"])"
                          "\n");
    EXPECT_TRUE(fs::exists(run / "run.json")) << "run's own --out went elsewhere\n" << r.err;
  }
}

// The same for the commands that run the job several times.
TEST_F(CommandLineE2e, PassesAndSweepGiveTheJobEveryWordAfterItsCommand) {
  const fs::path passes_log = dir_ / "passes.jsonl";
  std::vector<std::string> args = {"passes", "--steps", "2", "--out", (dir_ / "passes").string()};
  for (const std::string& word : Job(passes_log)) args.push_back(word);
  for (const char* word : {"--out", "x", "--steps", "7"}) args.push_back(word);
  ProcessOutput r = Stallscope(args, 300);
  EXPECT_NE(r.exit_code, 2) << "a usage error\n" << r.err;
  EXPECT_TRUE(fs::is_directory(dir_ / "passes")) << r.err;
  ASSERT_FALSE(Lines(passes_log).empty()) << r.err;
  for (const std::string& line : Lines(passes_log)) {
    EXPECT_EQ(line, R"(["--out", "x", "--steps", "7"])");
  }

  const fs::path sweep_log = dir_ / "sweep.jsonl";
  args = {"sweep", "--set", "w=1,2", "--steps", "2", "--out", (dir_ / "sweep").string()};
  for (const std::string& word : Job(sweep_log)) args.push_back(word);
  for (const char* word : {"--w", "{w}", "--out", "x"}) args.push_back(word);
  r = Stallscope(args, 300);
  EXPECT_NE(r.exit_code, 2) << "a usage error\n" << r.err;
  EXPECT_TRUE(fs::is_directory(dir_ / "sweep")) << r.err;
  EXPECT_EQ(Lines(sweep_log), (std::vector<std::string>{R"(["--w", "1", "--out", "x"])",
                                                        R"(["--w", "2", "--out", "x"])"}))
      << r.err;
}

TEST_F(CommandLineE2e, ATypoNamesTheCommandItMeant) {
  ProcessOutput r = Stallscope({"rnu", "python", "train.py"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "stallscope: unknown command 'rnu' — did you mean run?\n");
  EXPECT_EQ(r.out, "");
  r = Stallscope({"diagnos", "runs/x"});
  EXPECT_EQ(r.err, "stallscope: unknown command 'diagnos' — did you mean diagnose?\n");
  // Nothing near: every command, on one line.
  r = Stallscope({"python", "train.py"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("stallscope: unknown command 'python'; the commands are record, ", 0), 0u)
      << r.err;
  EXPECT_NE(r.err.find(", run, "), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(CommandLineE2e, AJobCommandWithoutAJobPrintsItsUsageLine) {
  struct Case {
    std::vector<std::string> args;
    std::string err;
  } cases[] = {
      {{"run"},
       "stallscope run: no job to run: give its command, e.g. stallscope run python train.py\n"
       "usage: stallscope run [OPTIONS] [--] COMMAND [ARGS...]   (stallscope run --help: the "
       "options)\n"},
      {{"run", "--out", "x", "--quiet", "--"},
       "stallscope run: no job to run: give its command, e.g. stallscope run python train.py\n"
       "usage: stallscope run [OPTIONS] [--] COMMAND [ARGS...]   (stallscope run --help: the "
       "options)\n"},
      {{"passes", "--steps", "5"},
       "stallscope passes: no job to run: give its command, e.g. stallscope passes python "
       "train.py\nusage: stallscope passes [OPTIONS] [--] COMMAND [ARGS...]   (stallscope passes "
       "--help: the options)\n"},
      {{"sweep"},
       "stallscope sweep: no job to run: give its command, e.g. stallscope sweep --set "
       "num_workers=0,2,4 python train.py\nusage: stallscope sweep --set KEY=V1,V2,... [OPTIONS] "
       "[--] COMMAND [ARGS...]   (stallscope sweep --help: the options)\n"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.args));
    ProcessOutput r = Stallscope(c.args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.err, c.err);
    EXPECT_FALSE(fs::exists(dir_ / "x"));
  }
  // --help still gives the help, job or not.
  for (const char* cmd : {"run", "passes", "sweep"}) {
    ProcessOutput r = Stallscope({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd << r.err;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << cmd << r.out;
  }
  // An unknown option before the job is still CLI11's usage error, naming it.
  ProcessOutput r = Stallscope({"run", "--no-such-flag", "/usr/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--no-such-flag"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace stallscope
