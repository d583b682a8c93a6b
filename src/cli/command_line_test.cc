#include "cli/command_line.h"

#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

namespace stallscope::cli {
namespace {

// `run`'s options that take a value in these cases; every other name is a flag.
bool TakesValue(std::string_view name) {
  return name == "--out" || name == "-i" || name == "--interval" || name == "--set" ||
         name == "--arg";
}

TEST(FindJobStart, EverythingFromTheJobsFirstWordIsTheJobs) {
  struct Case {
    std::vector<std::string> words;
    size_t index;
    bool dashes;
    bool help;
  } cases[] = {
      {{"python", "train.py", "--out", "x"}, 0, false, false},
      {{"--out", "d", "python", "train.py", "--lr", "0.1"}, 2, false, false},
      {{"--quiet", "-i", "500ms", "python"}, 3, false, false},
      {{"-i500ms", "--out=d", "python"}, 2, false, false},
      {{"--out", "d", "--", "python", "--", "x"}, 3, true, false},
      {{"--", "--weird-name"}, 1, true, false},
      {{"--set", "w=1,2", "--arg", "--workers={w}", "python", "t.py"}, 4, false, false},
      {{"--no-such-flag", "python"}, 1, false, false},  // CLI11 reports the flag
      {{"-", "x"}, 0, false, false},                    // "-" is a word
      {{"--quiet"}, 1, false, false},                   // no job
      {{"--out", "d", "--"}, 3, true, false},           // no job after --
      {{}, 0, false, false},
      {{"--help"}, 1, false, true},
      {{"-h", "python"}, 1, false, true},
      {{"python", "--help"}, 0, false, false},  // the job's --help
      {{"--out"}, 1, false, false},             // a value missing: CLI11 says so
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.words));
    const JobStart start = FindJobStart(c.words, TakesValue);
    EXPECT_EQ(start.index, c.index);
    EXPECT_EQ(start.dashes, c.dashes);
    EXPECT_EQ(start.help, c.help);
  }
}

TEST(EditDistance, CountsEditsAndSwapsOfNeighbours) {
  EXPECT_EQ(EditDistance("run", "run"), 0u);
  EXPECT_EQ(EditDistance("rnu", "run"), 1u);  // a swap
  EXPECT_EQ(EditDistance("RUN", "run"), 0u);
  EXPECT_EQ(EditDistance("rn", "run"), 1u);
  EXPECT_EQ(EditDistance("runn", "run"), 1u);
  EXPECT_EQ(EditDistance("ran", "run"), 1u);
  EXPECT_EQ(EditDistance("", "run"), 3u);
  EXPECT_EQ(EditDistance("dignoes", "diagnose"), 2u);  // an insertion and a swap
  EXPECT_EQ(EditDistance("xyz", "top"), 3u);
}

TEST(NearestNames, SuggestsSlipsNotOtherWords) {
  const std::vector<std::string> names = {"record",   "serve",   "top",    "summary", "run",
                                          "diagnose", "compare", "report", "trace",   "passes",
                                          "sweep",    "doctor",  "dump"};
  using V = std::vector<std::string>;
  EXPECT_EQ(NearestNames("rnu", names), V{"run"});
  EXPECT_EQ(NearestNames("recrod", names), V{"record"});
  EXPECT_EQ(NearestNames("diagnos", names), V{"diagnose"});
  EXPECT_EQ(NearestNames("tpo", names), V{"top"});
  EXPECT_EQ(NearestNames("Sweep", names), V{"sweep"});
  EXPECT_EQ(NearestNames("repor", names), V{"report"});
  EXPECT_EQ(NearestNames("xyz", names), V{});
  EXPECT_EQ(NearestNames("train.py", names), V{});
  EXPECT_EQ(NearestNames("x", names), V{});
}

}  // namespace
}  // namespace stallscope::cli
