#include "cli/record_args.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/cli.h"

namespace stallscope::cli {
namespace {

std::optional<RecordOptions> Front(std::vector<const char*> args) {
  args.insert(args.begin(), {"stallscope", "record"});
  return ParseRecordArgs(static_cast<int>(args.size()), args.data());
}

std::optional<RecordOptions> Cli11(std::vector<const char*> args) {
  args.insert(args.begin(), {"stallscope", "record"});
  return ParseRecordWithCli11(static_cast<int>(args.size()), args.data());
}

void ExpectSame(const RecordOptions& a, const RecordOptions& b, const std::string& what) {
  EXPECT_EQ(a.interval, b.interval) << what;
  EXPECT_EQ(a.output, b.output) << what;
  EXPECT_EQ(a.duration, b.duration) << what;
  EXPECT_EQ(a.csv, b.csv) << what;
  EXPECT_EQ(a.format, b.format) << what;
  EXPECT_EQ(a.force, b.force) << what;
  EXPECT_EQ(a.pid, b.pid) << what;
  EXPECT_EQ(a.command, b.command) << what;
  EXPECT_EQ(a.sampling.nvml_lib, b.sampling.nvml_lib) << what;
  EXPECT_EQ(a.sampling.proc_root, b.sampling.proc_root) << what;
  EXPECT_EQ(a.sampling.pcie, b.sampling.pcie) << what;
  EXPECT_EQ(a.sampling.no_gpm, b.sampling.no_gpm) << what;
  EXPECT_EQ(a.sampling.gpm_interval, b.sampling.gpm_interval) << what;
  EXPECT_EQ(a.sampling.demo, b.sampling.demo) << what;
}

std::string Join(const std::vector<const char*>& args) {
  std::string s;
  for (const char* a : args) s.append(" ").append(a);
  return s;
}

// Every line the front parses, it parses as CLI11 does.
TEST(RecordArgs, AgreesWithCli11OnWhatItParses) {
  const std::vector<std::vector<const char*>> lines = {
      {},
      {"-i", "100ms", "--duration", "45s", "--pid", "1234", "-o", "out.jsonl"},
      {"--interval=500ms", "--output=run.jsonl", "--csv", "--force"},
      {"-o", "-", "--duration", "2s"},
      {"--format", "seed", "-o", "gpu.jsonl"},
      {"--format=csv"},
      {"--nvml-lib", "/opt/lib/libnvidia-ml.so.1", "--proc-root", "/tmp/proc"},
      {"--nvml-lib=/x.so", "--proc-root=/p", "-i", "1s"},
      {"--pcie", "--gpm-interval", "500ms", "-i", "100ms"},
      {"--no-gpm", "--pcie"},
      {"--demo", "-i", "500ms"},
      {"--", "python3", "train.py", "--epochs", "1", "-i", "--"},
      {"-i", "250ms", "--", "sh", "-c", "exit 3"},
      {"--"},
  };
  for (const auto& line : lines) {
    auto front = Front(line);
    auto cli11 = Cli11(line);
    ASSERT_TRUE(front.has_value()) << Join(line);
    ASSERT_TRUE(cli11.has_value()) << Join(line);
    ExpectSame(*front, *cli11, Join(line));
  }
  auto parsed = Front({"-i", "100ms", "--csv", "--pid", "7", "--", "a", "b"});
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->interval, "100ms");
  EXPECT_TRUE(parsed->csv);
  EXPECT_EQ(parsed->pid, 7);
  EXPECT_EQ(parsed->command, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(parsed->sampling.proc_root, "/proc");  // the specs' default, as CLI11's default_val
}

// What the front does not parse goes to the full binary: help, errors, CLI11's rarer forms.
TEST(RecordArgs, LeavesTheRestToCli11) {
  const std::vector<std::vector<const char*>> lines = {
      {"--help"},
      {"-h"},
      {"--no-such-flag"},
      {"-i"},          // value missing
      {"--pid", "0"},  // follows nothing: CLI11 says --pid takes 1 or more
      {"--pid=-5"},
      {"--pid", "12x"},          // not a number
      {"--pid", "99999999999"},  // out of range
      {"-i", "1s", "-i", "2s"},  // repeated
      {"--csv=true"},
      {"-i100ms"},
      {"python3", "train.py"},  // a command without --
      {"--output", ""},
      {"--version"},
      {"--serve", "127.0.0.1:9400"},  // stallscope-full only: the front links no HTTP server
      {"-o", "x.jsonl", "--serve", "127.0.0.1:9400", "--", "sleep", "1"},
  };
  for (const auto& line : lines) EXPECT_FALSE(Front(line).has_value()) << Join(line);
  // Refused by CLI11 too (it prints why): a PID must be 1 or more.
  EXPECT_FALSE(Cli11({"--pid", "0"}).has_value());
  EXPECT_FALSE(Cli11({"--pid=-5"}).has_value());
  // Not `record` at all.
  const char* summary[] = {"stallscope", "summary", "x.jsonl"};
  EXPECT_FALSE(ParseRecordArgs(3, summary).has_value());
  const char* bare[] = {"stallscope"};
  EXPECT_FALSE(ParseRecordArgs(1, bare).has_value());
}

// Each spec is an option CLI11 knows under the same names (AddRecord builds them from it).
TEST(RecordArgs, EverySpecIsParsedBothWays) {
  for (auto specs : {RecordOptionSpecs(), SamplingOptionSpecs(), DemoOptionSpecs()}) {
    for (const OptionSpec& spec : specs) {
      std::string names = spec.names;
      const std::string name = names.substr(names.rfind(',') + 1);  // the long name
      std::vector<const char*> line = {name.c_str()};
      if (spec.flag == nullptr && spec.sampling_flag == nullptr) {
        line.push_back(spec.number != nullptr ? "42" : "value");
      }
      auto front = Front(line);
      auto cli11 = Cli11(line);
      ASSERT_TRUE(front.has_value()) << name;
      ASSERT_TRUE(cli11.has_value()) << name;
      ExpectSame(*front, *cli11, name);
    }
  }
}

}  // namespace
}  // namespace stallscope::cli
