// End-to-end tests of `stallscope trace`: the real binary on tiny fixtures, on the HTA reference
// traces (../shared/traces/hta, skipped when absent), and on a trace Debian's torch 1.13 writes
// for an example workload (skipped where /usr/bin/python3 has no torch).
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "asan.h"
#include "hta_traces.h"
#include "subprocess.h"

namespace {

namespace fs = std::filesystem;
using stallscope::testing::Slurp;

using Output = stallscope::testing::ProcessOutput;

fs::path SharedTraces() { return stallscope::testing::HtaTracesDir(); }

fs::path Fixture(const std::string& name) {
  return fs::path(STALLSCOPE_SOURCE_DIR) / "tests" / "data" / "traces" / name;
}

class TraceE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stallscope_trace_e2e_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  Output Run(std::vector<std::string> args, double timeout_s = 120) {
    args.insert(args.begin(), STALLSCOPE_BIN);
    return stallscope::testing::RunProcess(args, stallscope::testing::EnvironmentWithout({}), dir_,
                                           timeout_s);
  }

  nlohmann::json Json(std::vector<std::string> args) {
    args.push_back("--json");
    Output o = Run(args);
    EXPECT_EQ(o.exit_code, 0) << o.err;
    return nlohmann::json::parse(o.out, nullptr, false);
  }

  fs::path dir_;
};

TEST_F(TraceE2e, HelpNamesTheFlags) {
  Output o = Run({"trace", "--help"});
  EXPECT_EQ(o.exit_code, 0);
  for (const char* flag :
       {"--json", "--rank", "--steps", "--hta-compat", "--export-perfetto", "--force"}) {
    EXPECT_NE(o.out.find(flag), std::string::npos) << flag;
  }
}

TEST_F(TraceE2e, NotATraceIsAOneLineError) {
  fs::path f = dir_ / "notes.json";
  std::ofstream(f) << "{\"hello\": [1, 2, 3]}";
  Output o = Run({"trace", f.string()});
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find(f.string()), std::string::npos) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_TRUE(o.out.empty());
}

TEST_F(TraceE2e, MissingFileIsAnError) {
  Output o = Run({"trace", (dir_ / "nope.json").string()});
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("nope.json"), std::string::npos) << o.err;
}

TEST_F(TraceE2e, BadStepsFlagIsAUsageError) {
  Output o = Run({"trace", Fixture("steps_torch113_cpu.json").string(), "--steps", "x:3"});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("--steps"), std::string::npos) << o.err;
}

// A real trace of Debian's torch 1.13 (legacy profiler, no GPU): a step breakdown and a
// data-loader verdict.
TEST_F(TraceE2e, LegacyCpuTraceGivesBreakdownAndVerdict) {
  nlohmann::json j = Json({"trace", Fixture("steps_torch113_cpu.json").string()});
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["ranks"].size(), 1u);
  const auto& r = j["ranks"][0];
  EXPECT_EQ(r["dialect"], "chrome-legacy");
  EXPECT_EQ(r["steps"]["count"], 3);
  const auto& total = r["step_breakdown"]["total"];
  int64_t sum = 0;
  for (const char* k : {"kernel_ns", "memcpy_ns", "memset_ns", "communication_ns", "runtime_ns",
                        "dataloader_ns", "cpu_exec_ns", "other_ns"}) {
    sum += total[k].get<int64_t>();
  }
  EXPECT_EQ(sum, total["wall_ns"].get<int64_t>());
  EXPECT_GT(total["dataloader_pct"].get<double>(), 50.0);
  EXPECT_EQ(j["verdict"]["principal"]["class"], "data_bound_cpu");
}

TEST_F(TraceE2e, TruncatedTraceKeepsWhatItHoldsAndWarns) {
  std::string text = Slurp(Fixture("steps_torch113_cpu.json"));
  fs::path f = dir_ / "cut.json";
  std::ofstream(f) << text.substr(0, text.size() * 2 / 3);
  Output o = Run({"trace", f.string(), "--json"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.err.find("truncated"), std::string::npos) << o.err;
  auto j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(j["ranks"][0]["read"]["truncated"].get<bool>());
  EXPECT_GT(j["ranks"][0]["read"]["complete"].get<int64_t>(), 100);
}

struct Expected {
  std::string file;
  int rank;
  double idle, compute, non_compute;
};

// EXPECTED.md's temporal breakdown, through the CLI in --hta-compat mode (issue 5: within 0.5
// percentage points).
TEST_F(TraceE2e, HtaCompatMatchesExpectedTemporalBreakdown) {
  if (!fs::exists(SharedTraces())) GTEST_SKIP() << "no " << SharedTraces();
  const std::vector<Expected> table = {
      {"trace_filter/sampled_rank-0.json.gz", 0, 53.56, 17.71, 28.74},
      {"trace_filter/sampled_rank-1.json.gz", 1, 54.72, 22.57, 22.72},
      {"trace_diff/control/control.json.gz", 3, 16.20, 61.23, 22.57},
      {"trace_diff/test/test.json.gz", 1, 7.47, 68.31, 24.23},
      {"negative_queue_length_values_check/rank0.json.gz", 0, 69.44, 14.15, 16.41},
      {"nccl_parser_config/nccl_data.json.gz", 0, 77.78, 17.26, 4.97},
  };
  std::vector<std::string> args = {"trace", "--hta-compat"};
  for (const auto& e : table) args.push_back((SharedTraces() / e.file).string());
  nlohmann::json j = Json(args);
  ASSERT_EQ(j["ranks"].size(), table.size());
  for (const auto& e : table) {
    bool found = false;
    for (const auto& r : j["ranks"]) {
      if (r["path"].get<std::string>().find(e.file) == std::string::npos) continue;
      found = true;
      EXPECT_EQ(r["rank"], e.rank) << e.file;
      const auto& t = r["temporal_breakdown"];
      EXPECT_NEAR(t["idle_pct"].get<double>(), e.idle, 0.5) << e.file;
      EXPECT_NEAR(t["compute_pct"].get<double>(), e.compute, 0.5) << e.file;
      EXPECT_NEAR(t["non_compute_pct"].get<double>(), e.non_compute, 0.5) << e.file;
    }
    EXPECT_TRUE(found) << e.file;
  }
}

// What a person reads in EXPECTED.md, as verdicts: negative_queue waits on communication /
// dependencies with a deep queue; nccl_parser_config is host-bound.
TEST_F(TraceE2e, VerdictsOnReferenceTraces) {
  if (!fs::exists(SharedTraces())) GTEST_SKIP() << "no " << SharedTraces();
  nlohmann::json neg = Json(
      {"trace", (SharedTraces() / "negative_queue_length_values_check/rank0.json.gz").string()});
  EXPECT_EQ(neg["verdict"]["principal"]["class"], "communication_bound");
  nlohmann::json host =
      Json({"trace", (SharedTraces() / "nccl_parser_config/nccl_data.json.gz").string()});
  EXPECT_EQ(host["verdict"]["principal"]["class"], "host_launch_bound");
}

// Issue 12 finding 5: `trace T --export-perfetto T` overwrote the input trace. Refused before
// anything is read, also through a symlink, a hard link or a folder of inputs, even with --force.
TEST_F(TraceE2e, ExportPerfettoOntoAnInputIsRefused) {
  fs::create_directories(dir_ / "ranks");
  const fs::path input = dir_ / "ranks" / "t.json";
  fs::copy_file(Fixture("steps_kineto_gpu.json"), input);
  const std::string original = Slurp(input);
  fs::create_symlink(input, dir_ / "link.json");
  fs::create_hard_link(input, dir_ / "hard.json");
  const std::vector<std::vector<std::string>> cases = {
      {input.string(), "--export-perfetto", input.string()},
      {input.string(), "--export-perfetto", input.string(), "--force"},
      {input.string(), "--export-perfetto", (dir_ / "link.json").string()},
      {input.string(), "--export-perfetto", (dir_ / "hard.json").string(), "--force"},
      {(dir_ / "link.json").string(), "--export-perfetto", input.string()},
      {(dir_ / "ranks").string(), "--export-perfetto", input.string(), "--force"},
  };
  for (const auto& args : cases) {
    std::vector<std::string> argv = {"trace"};
    argv.insert(argv.end(), args.begin(), args.end());
    SCOPED_TRACE(::testing::PrintToString(argv));
    Output o = Run(argv);
    EXPECT_EQ(o.exit_code, 2) << o.err;
    EXPECT_NE(o.err.find(": is the input "), std::string::npos) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_TRUE(o.out.empty()) << o.out;
    EXPECT_EQ(Slurp(input), original);
  }
}

// Nothing the user owns is overwritten without --force.
TEST_F(TraceE2e, ExportPerfettoOverwritesAnExistingFileOnlyWithForce) {
  const fs::path out = dir_ / "mine.json";
  std::ofstream(out) << "mine";
  const std::string input = Fixture("steps_kineto_gpu.json").string();
  Output o = Run({"trace", input, "--export-perfetto", out.string()});
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_EQ(o.err, "stallscope trace: --export-perfetto " + out.string() +
                       ": exists (4 B); give --force to replace it, or another "
                       "--export-perfetto\n");
  EXPECT_EQ(Slurp(out), "mine");
  o = Run({"trace", input, "--export-perfetto", out.string(), "--force"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(nlohmann::json::parse(Slurp(out), nullptr, false).is_object());
}

/// Every "*_pct" share (not cv_pct, a spread) anywhere in `j` lies in [0, 100].
void ExpectSharesInRange(const nlohmann::json& j, const std::string& at = "") {
  if (j.is_object()) {
    for (const auto& [key, v] : j.items()) {
      if (v.is_number() && key.ends_with("_pct") && key != "cv_pct") {
        EXPECT_GE(v.get<double>(), 0.0) << at << "." << key;
        EXPECT_LE(v.get<double>(), 100.0) << at << "." << key;
      }
      ExpectSharesInRange(v, at + "." + key);
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i)
      ExpectSharesInRange(j[i], at + "[" + std::to_string(i) + "]");
  }
}

// Issue 12 finding 3: `"ts": 9223372036854775` (µs) gave idle -195% and compute 295%, and a
// kernel with dur 2^53 µs vanished uncounted. Both are now malformed: counted and warned about.
TEST_F(TraceE2e, OutOfRangeTimesAreMalformedAndSharesStayInRange) {
  std::string text = Slurp(Fixture("steps_kineto_gpu.json"));
  const std::string extra =
      R"({"ph": "X", "cat": "kernel", "name": "huge_dur", "pid": 0, "tid": 7, "ts": 20, )"
      R"("dur": 9007199254740992, "args": {"device": 0, "stream": 7}},)"
      R"({"ph": "X", "cat": "kernel", "name": "huge_ts", "pid": 0, "tid": 7, )"
      R"("ts": 9223372036854775, "dur": 5, "args": {"device": 0, "stream": 7}},)";
  const std::string key = "\"traceEvents\": [";
  text.insert(text.find(key) + key.size(), extra);
  const fs::path trace = dir_ / "t.json";
  std::ofstream(trace) << text;
  Output o = Run({"trace", trace.string(), "--json"});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.err.find(trace.string() + ": 2 malformed events skipped"), std::string::npos)
      << o.err;
  auto j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << o.out;
  ExpectSharesInRange(j);
  EXPECT_EQ(o.out.find("huge_"), std::string::npos);
}

// Issue 12 finding 9: `--steps 100:200` on a trace of steps 551..552 analysed the whole trace.
TEST_F(TraceE2e, StepsOutsideTheTraceAreAnError) {
  std::string text = Slurp(Fixture("steps_kineto_gpu.json"));
  for (auto [from, to] : {std::pair{"ProfilerStep#1\"", "ProfilerStep#551\""},
                          std::pair{"ProfilerStep#2\"", "ProfilerStep#552\""}}) {
    text.replace(text.find(from), std::string(from).size(), to);
  }
  const fs::path trace = dir_ / "t.json";
  std::ofstream(trace) << text;
  Output o = Run({"trace", trace.string(), "--steps", "100:200"});
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(o.err, "stallscope trace: " + trace.string() +
                       ": no step in 100..200 (the trace has 551..552)\n");
  EXPECT_TRUE(o.out.empty()) << o.out;
  o = Run({"trace", trace.string(), "--steps", "552:552"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
}

// Two ranks of one job: both analysed, compared across ranks, one merged Perfetto timeline.
TEST_F(TraceE2e, FolderOfRanksAndPerfettoExport) {
  fs::path src = SharedTraces() / "trace_filter";
  if (!fs::exists(src)) GTEST_SKIP() << "no " << src;
  fs::path out = dir_ / "merged.json";
  Output o = Run({"trace", src.string(), "--json", "--export-perfetto", out.string()});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][0]["rank"], 0);
  EXPECT_EQ(j["ranks"][1]["rank"], 1);
  EXPECT_FALSE(j["cross_rank"].is_null());
  auto merged = nlohmann::json::parse(Slurp(out), nullptr, false);
  ASSERT_TRUE(merged.is_object());
  EXPECT_GT(merged["traceEvents"].size(), 9000u);
}

/// Real PyTorch jobs: label `job`, RUN_SERIAL (CMakeLists.txt stallscope_test JOBS).
class TraceJob : public TraceE2e {};

// A real torch.profiler trace of an example workload (examples/train.py --profile): CPU-only,
// data-bound by construction (4 ms transform per sample, num_workers=0).
TEST_F(TraceJob, RealTorchProfilerTraceOfDataBoundWorkload) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 has no torch (apt-get install python3-torch)";
  }
  fs::path prof = dir_ / "prof";
  std::string cmd =
      "/usr/bin/python3 " + (fs::path(STALLSCOPE_SOURCE_DIR) / "examples" / "train.py").string() +
      " --situation data_cpu --steps 8 --profile " + prof.string() +
      " --profile-steps 5 --print-every 0 > " + (dir_ / "train.log").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << Slurp(dir_ / "train.log");
  nlohmann::json j = Json({"trace", prof.string()});
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["ranks"][0]["steps"]["count"], 5);
  EXPECT_GT(j["ranks"][0]["step_breakdown"]["total"]["dataloader_pct"].get<double>(), 50.0);
  EXPECT_EQ(j["verdict"]["principal"]["class"], "data_bound_cpu");
}

// Issue 12, finding 6: a trace whose kernel name, thread name and file name hold terminal escapes
// (SGR colour, OSC window title, carriage return) is reported with them escaped: stdout and stderr
// hold no raw control byte but line ends.
TEST_F(TraceE2e, ControlCharactersInNamesAreEscaped) {
  std::string text = Slurp(Fixture("kernels_comm.json"));
  const std::string kernel = "void at::native::vectorized_elementwise_kernel<4>(int)";
  const size_t at = text.find(kernel);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, kernel.size(), "\\u001b]0;pwned\\u0007\\u001b[31mkernel\\r");
  const size_t events = text.find("\"traceEvents\": [");
  ASSERT_NE(events, std::string::npos);
  text.insert(events + 16,
              "\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 100, \"tid\": 1, "
              "\"args\": {\"name\": \"\\u001b[31mthread\\r\"}},");
  const fs::path f = dir_ / "rank\x1b[31m\r.json";
  std::ofstream(f) << text;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"trace", f.string()}, {"trace", f.string(), "--per-step"}}) {
    Output o = Run(args);
    ASSERT_EQ(o.exit_code, 0) << o.err;
    for (const std::string* s : {&o.out, &o.err}) {
      for (char c : *s) {
        const auto u = static_cast<unsigned char>(c);
        ASSERT_TRUE(u >= 0x20 || c == '\n') << "raw byte " << int{u} << " in\n" << *s;
        ASSERT_NE(u, 0x7f);
      }
    }
    EXPECT_NE(o.out.find("\\x1b]0;pwned\\x07\\x1b[31mkernel\\r"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("rank\\x1b[31m\\r.json"), std::string::npos) << o.out;
  }
}

// Issue 27 B17: C1 controls (U+0080..U+009F: CSI U+009B, OSC U+009D, ST U+009C) in a name
// reached the terminal raw; C0 ones were escaped already. Escaped as \u009b.
TEST_F(TraceE2e, C1ControlsInNamesAreEscaped) {
  std::string text = Slurp(Fixture("kernels_comm.json"));
  const std::string kernel = "void at::native::vectorized_elementwise_kernel<4>(int)";
  const size_t at = text.find(kernel);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, kernel.size(), "k\\u009b2J\\u009d0;title\\u009c");
  std::ofstream(dir_ / "c1.json") << text;
  Output o = Run({"trace", (dir_ / "c1.json").string()});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  for (const std::string* s : {&o.out, &o.err}) {
    EXPECT_EQ(s->find("\xc2\x9b"), std::string::npos) << *s;
    EXPECT_EQ(s->find("\xc2\x9d"), std::string::npos) << *s;
    EXPECT_EQ(s->find("\xc2\x9c"), std::string::npos) << *s;
  }
  EXPECT_NE(o.out.find("k\\u009b2J\\u009d0;title\\u009c"), std::string::npos) << o.out;
}

// Issue 27 B15: `trace DIR` hung forever on a FIFO named like a trace in DIR (the open waited
// for a writer). It is skipped with a warning; the other ranks are read.
TEST_F(TraceE2e, AFifoInAFolderIsSkippedWithAWarning) {
  const fs::path traces = dir_ / "traces";
  fs::create_directories(traces);
  fs::copy_file(Fixture("kernels_comm.json"), traces / "rank0.json");
  const fs::path fifo = traces / "rank1.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Output o = Run({"trace", traces.string()}, 60);  // a hang is killed and fails the test
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.err.find("stallscope trace: warning: " + fifo.string() +
                       ": a FIFO, not a regular file; skipped\n"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.out.find("rank0.json"), std::string::npos) << o.out;
  // Only the FIFO: an error that says why, at once.
  fs::remove(traces / "rank0.json");
  Output none = Run({"trace", traces.string()}, 60);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no trace files (*.json, *.json.gz) in directory; " + fifo.string() +
                          ": a FIFO, not a regular file; skipped"),
            std::string::npos)
      << none.err;
}

// Issue 27 B02: a 3 MB .json.gz of whitespace took 3.19 GB of RSS. Built here with gzip: 256
// MiB of blanks between two events, and a 64 MiB blank string inside a third (an element over
// the reader's 4 MiB limit: skipped with a warning). The reader holds about two 1 MiB chunks
// whatever the input (trace_reader.h kMaxElementBytes; reader_limits_test.cc has the bounds).
TEST_F(TraceE2e, GzipBombOfWhitespaceIsReadInBoundedMemory) {
  const fs::path bomb = dir_ / "bomb.json.gz";
  const std::string kernel =
      R"({"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":TS,"dur":1,)"
      R"("args":{"stream":7,"correlation":TS}})";
  auto event = [&](const std::string& ts) {
    std::string e = kernel;
    for (size_t at; (at = e.find("TS")) != std::string::npos;) e.replace(at, 2, ts);
    return e;
  };
  std::ofstream(dir_ / "head.txt") << "{\"traceEvents\":[" << event("1") << ",";
  std::ofstream(dir_ / "mid.txt") << event("2") << R"(,{"ph":"X","name":")";
  std::ofstream(dir_ / "tail.txt") << R"(","pid":0,"tid":7,"ts":3,"dur":1},)" << event("4") << "]}";
  const std::string d = dir_.string();
  const std::string cmd = "{ cat " + d +
                          "/head.txt; head -c 268435456 /dev/zero | tr '\\0' ' '; "
                          "cat " +
                          d +
                          "/mid.txt; head -c 67108864 /dev/zero | tr '\\0' ' '; "
                          "cat " +
                          d + "/tail.txt; } | gzip -1 > " + bomb.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ASSERT_LT(fs::file_size(bomb), 2u << 20);  // a bomb: over 150x smaller than inflated
  Output o = Run({"trace", "-j", "1", bomb.string()});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.err.find("stallscope trace: warning: " + bomb.string() +
                       ": 1 trace events longer than 4 MiB skipped\n"),
            std::string::npos)
      << o.err;
  rusage children{};
  ASSERT_EQ(getrusage(RUSAGE_CHILDREN, &children), 0);  // the largest child: stallscope
#if defined(STALLSCOPE_ASAN)
  (void)children;  // the sanitizer's quarantine and shadow memory are not the reader's
#else
  EXPECT_LT(children.ru_maxrss, 128 << 10) << "peak RSS in KiB for 320 MiB of blanks";
#endif
}

}  // namespace
