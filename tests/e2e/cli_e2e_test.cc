// End-to-end: the real binary, real /proc, and the fake libnvidia-ml.so.1 loaded by dlopen.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "subprocess.h"
#include "terminal_safe.h"

#include "asan.h"

namespace {

namespace fs = std::filesystem;

using Output = stallscope::testing::ProcessOutput;

using stallscope::testing::Slurp;

class E2e : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stallscope_e2e_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  /// Writes a fake-NVML scenario with `n` GPUs and `extra` merged into each GPU object.
  std::string Scenario(int n, const nlohmann::json& extra = nlohmann::json::object(),
                       const std::string& name = "scenario.json") {
    nlohmann::json s;
    s["driver_version"] = "550.54.15";
    s["gpus"] = nlohmann::json::array();
    for (int i = 0; i < n; ++i) {
      nlohmann::json g = {{"name", "NVIDIA H100 80GB HBM3"},
                          {"uuid", "GPU-fake-" + std::to_string(i)},
                          {"memory_total_mib", 81559},
                          {"memory_used_mib", 20000 + 1000 * i},
                          {"power_limit_w", 700},
                          {"pattern", {{"kind", "steady"}, {"util_high", 90}}}};
      g.update(extra);
      s["gpus"].push_back(g);
    }
    std::string path = (dir_ / name).string();
    std::ofstream(path) << s.dump(2);
    return path;
  }

  /// Runs the binary with `args`; `scenario` empty = no NVML reachable at all.
  Output Run(const std::vector<std::string>& args, const std::string& scenario = "",
             double timeout_s = 60) {
    return RunBinary(STALLSCOPE_BIN, args, scenario, timeout_s);
  }

  Output RunBinary(const std::string& binary, const std::vector<std::string>& args,
                   const std::string& scenario = "", double timeout_s = 60) {
    auto env = stallscope::testing::EnvironmentWithout({"STALLSCOPE_", "LD_LIBRARY_PATH="});
    if (!scenario.empty()) {
      env.push_back(std::string("STALLSCOPE_NVML_LIB=") + FAKE_NVML_LIB);
      env.push_back("STALLSCOPE_FAKE_NVML_SCENARIO=" + scenario);
    }
    std::vector<std::string> argv = {binary};
    argv.insert(argv.end(), args.begin(), args.end());
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    last_pid_ = stallscope::testing::Spawn(argv, env, out.string(), err.string());
    return stallscope::testing::CollectOutput(last_pid_, out, err, timeout_s);
  }

  fs::path dir_;
  pid_t last_pid_ = -1;
};

TEST_F(E2e, HelpForEveryCommand) {
  auto top = Run({"--help"});
  EXPECT_EQ(top.exit_code, 0);
  for (const char* cmd : {"record", "top", "summary"}) {
    EXPECT_NE(top.out.find(cmd), std::string::npos) << cmd;
    auto sub = Run({cmd, "--help"});
    EXPECT_EQ(sub.exit_code, 0) << cmd;
    EXPECT_NE(sub.out.find("Usage"), std::string::npos) << cmd << sub.out;
  }
}

// `stallscope` alone and `stallscope --help` greet a user (issue 30): where to start, then every
// command on one line with what it does; alone it is still a usage error (exit 2).
TEST_F(E2e, NoCommandGreetsWithStartHereAndEveryCommandOnALine) {
  auto alone = Run({});
  auto help = Run({"--help"});
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(alone.out, help.out);
  EXPECT_NE(help.out.find("Start here"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("\n  stallscope run -- python train.py\n"), std::string::npos)
      << help.out;
  for (const char* cmd : {"record", "serve", "top", "summary", "run", "diagnose", "compare",
                          "report", "trace", "passes", "sweep", "doctor"}) {
    // "  run       Run a training job, ...": the name, padding, and a description on its line.
    const std::regex line(fmt::format("\n  {} +[A-Z][^\n]{{10,}}\n", cmd));
    EXPECT_TRUE(std::regex_search(help.out, line)) << cmd << "\n" << help.out;
  }
  for (size_t start = 0; start < help.out.size();) {
    size_t end = help.out.find('\n', start);
    if (end == std::string::npos) end = help.out.size();
    EXPECT_LE(end - start, 100u) << help.out.substr(start, end - start);
    start = end + 1;
  }
}

// `stallscope` runs `record` itself and execs stallscope-full, beside it, for everything else
// (README.md "Two binaries"): same help, same options, same exit codes.
TEST_F(E2e, FrontExecsTheFullBinaryForAllButRecord) {
  const fs::path full = fs::path(STALLSCOPE_BIN).parent_path() / "stallscope-full";
  auto front_help = Run({"record", "--help"});
  auto full_help = RunBinary(full.string(), {"record", "--help"});
  EXPECT_EQ(front_help.exit_code, 0);
  EXPECT_EQ(full_help.exit_code, 0);
  std::string expected = full_help.out;
  expected.replace(expected.find(full.string()), full.string().size(), STALLSCOPE_BIN);
  EXPECT_EQ(front_help.out, expected);
  auto bad = Run({"record", "--no-such-flag"});
  EXPECT_EQ(bad.exit_code, RunBinary(full.string(), {"record", "--no-such-flag"}).exit_code);
  EXPECT_NE(bad.exit_code, 0);
  auto version = Run({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("stallscope ", 0), 0u) << version.out;

  // Without stallscope-full beside it: one line naming the missing file, exit 127.
  const fs::path alone = dir_ / "stallscope";
  fs::copy_file(STALLSCOPE_BIN, alone);
  auto missing = RunBinary(alone.string(), {"summary", "x.jsonl"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_EQ(missing.err, "stallscope: cannot run " + (dir_ / "stallscope-full").string() +
                             ": No such file or directory (an incomplete installation: "
                             "reinstall stallscope)\n");
  // `record` itself still works there.
  auto rec = RunBinary(alone.string(), {"record", "-i", "100ms", "--duration", "300ms", "-o",
                                        (dir_ / "alone.jsonl").string()});
  EXPECT_EQ(rec.exit_code, 0) << rec.err;
}

// `record`'s process maps no C++ runtime, JSON reader or {fmt} library: its footprint is the
// sampler's (issue 11: <= 4 MB; bench/overhead.sh). Sanitizer builds link libstdc++.so.
TEST_F(E2e, RecordLoadsNoReaderLibraries) {
#if defined(STALLSCOPE_ASAN)
  GTEST_SKIP() << "sanitizer build: the front binary uses the shared libstdc++";
#else
  std::vector<std::string> env = stallscope::testing::EnvironmentWithout({"STALLSCOPE_"});
  env.push_back(std::string("STALLSCOPE_NVML_LIB=") + FAKE_NVML_LIB);
  env.push_back("STALLSCOPE_FAKE_NVML_SCENARIO=" + Scenario(2));
  const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
  const pid_t pid =
      stallscope::testing::Spawn({STALLSCOPE_BIN, "record", "-i", "100ms", "--duration", "10s",
                                  "-o", (dir_ / "rec.jsonl").string()},
                                 env, out.string(), err.string());
  // Once the first sample is written, every library `record` uses is loaded.
  for (int i = 0; i < 100 && Slurp(dir_ / "rec.jsonl").find("\"sample\"") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string maps = Slurp("/proc/" + std::to_string(pid) + "/maps");
  kill(pid, SIGINT);
  auto done = stallscope::testing::CollectOutput(pid, out, err, 30);
  EXPECT_EQ(done.exit_code, 0) << done.err;
  EXPECT_NE(maps.find("libnvidia-ml.so.1"), std::string::npos) << maps;
  for (const char* lib : {"libstdc++", "libsimdjson", "libfmt", "libz."}) {
    EXPECT_EQ(maps.find(lib), std::string::npos) << lib << " is mapped:\n" << maps;
  }
#endif
}

// Issue 12: CLI11's usage errors quote the arguments; they reach the terminal escaped.
TEST_F(E2e, UsageErrorsEscapeTheArgumentsTheyQuote) {
  const std::string hostile = stallscope::testing::kHostileName.c_str();  // argv has no NUL
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"top", "-n", hostile},
        {"record", "--bogus" + hostile},
        {"trace", "x.json", hostile, "--no-such-flag" + hostile}}) {
    SCOPED_TRACE(::testing::PrintToString(args));
    auto o = Run(args);
    EXPECT_EQ(o.exit_code, 2);
    EXPECT_EQ(stallscope::testing::RawControlBytes(o.err), "") << o.err;
    EXPECT_NE(o.err.find("\\x1b]0;pwned\\x07 \\x1b[31mred\\rcr"), std::string::npos) << o.err;
  }
}

// Nothing the user owns is overwritten without --force (issue 12, finding 2).
TEST_F(E2e, RefusesToReplaceWhatTheUserOwnsWithoutForce) {
  const std::string rec = (dir_ / "mine.jsonl").string();
  std::ofstream(rec) << "my notes\n";
  auto refused = Run({"record", "-o", rec, "--duration", "300ms"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find(rec + ": exists (9 B); give --force to replace it"), std::string::npos)
      << refused.err;
  EXPECT_EQ(Slurp(rec), "my notes\n");
  auto forced = Run({"record", "-o", rec, "--duration", "300ms", "--force", "-i", "100ms"});
  EXPECT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_EQ(Slurp(rec).rfind("{\"type\":\"header\"", 0), 0u);

  // run --out: a previous run is kept unless --force, which replaces its files and only those.
  const std::string out = (dir_ / "run").string();
  auto first = Run({"run", "--quiet", "--out", out, "--", "sh", "-c", "exit 3"});
  EXPECT_EQ(first.exit_code, 3) << first.err;
  const std::string first_json = Slurp(dir_ / "run" / "run.json");
  auto again = Run({"run", "--quiet", "--out", out, "--", "true"});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_EQ(again.err,
            "stallscope run: --out " + out +
                ": holds a previous run; give --force to replace it, or another --out\n");
  EXPECT_EQ(Slurp(dir_ / "run" / "run.json"), first_json);
  auto replaced = Run({"run", "--quiet", "--force", "--out", out, "--", "true"});
  EXPECT_EQ(replaced.exit_code, 0) << replaced.err;
  auto meta = nlohmann::json::parse(Slurp(dir_ / "run" / "run.json"));
  EXPECT_EQ(meta["command"], nlohmann::json::array({"true"}));
  EXPECT_EQ(meta["exit_code"], 0);
  // A folder with files stallscope did not write is never cleared, --force or not.
  std::ofstream(dir_ / "run" / "notes.txt") << "mine";
  auto foreign = Run({"run", "--quiet", "--force", "--out", out, "--", "true"});
  EXPECT_EQ(foreign.exit_code, 2);
  EXPECT_NE(foreign.err.find("not empty and not a run directory (notes.txt)"), std::string::npos)
      << foreign.err;
  EXPECT_EQ(Slurp(dir_ / "run" / "notes.txt"), "mine");

  // A job that removes its own run directory: one line saying so, the job's exit code. The job
  // starts before stallscope has made all of its files there (run.json, stacks.jsonl, then
  // recording.jsonl, the last one until the job ends): a removal in the middle of those raced them
  // ("rm: cannot remove ...: Directory not empty", the directory left and reported on; 1 run in 4
  // beside stress-ng). So the job removes the directory once recording.jsonl is there (or after
  // 10 s); run_job.cc keeps recording.jsonl the last file made (stacks.jsonl after it raced again:
  // 5 runs in 87 beside the e2e tier).
  const std::string gone = (dir_ / "gone").string();
  auto removed = Run({"run", "--quiet", "--out", gone, "--", "sh", "-c",
                      "i=0; while [ ! -e \"$0/recording.jsonl\" ] && [ $i -lt 1000 ]; do "
                      "sleep 0.01; i=$((i+1)); done; rm -rf \"$0\"; exit 4",
                      gone});
  EXPECT_EQ(removed.exit_code, 4);
  EXPECT_NE(removed.err.find("stallscope run: " + gone +
                             " was removed while the job ran: no report (the job's exit code, 4, "
                             "is returned)\n"),
            std::string::npos)
      << removed.err;
  EXPECT_EQ(removed.err.find("warning"), std::string::npos) << removed.err;
}

// Issue 27 B01: `report --html` (and `trace --html`) write a temporary file renamed over the
// path: a FIFO, a device (as root, `--html /dev/null` replaced the machine's /dev/null) or a
// symbolic link there was replaced by a regular file. Refused, --force or not; the node stays.
TEST_F(E2e, HtmlNeverReplacesAFifoADeviceOrALink) {
  const std::string rec = (dir_ / "rec.jsonl").string();
  ASSERT_EQ(Run({"record", "-i", "100ms", "--duration", "300ms", "-o", rec}).exit_code, 0);
  const std::string trace = (dir_ / "t.json").string();
  std::ofstream(trace) << R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,)"
                       << R"("tid":7,"ts":1,"dur":1}]})";
  const std::string fifo = (dir_ / "out.fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string target = (dir_ / "target.html").string();
  std::ofstream(target) << "mine";
  const std::string link = (dir_ / "link.html").string();
  fs::create_symlink(target, link);
  // A character device like /dev/null (1,3), made here: only where mknod is allowed (root).
  const std::string null_like = (dir_ / "null_like").string();
  const bool have_device = mknod(null_like.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
  struct Node {
    std::string path, kind;
  };
  std::vector<Node> nodes = {{fifo, "a FIFO"}, {link, "a symbolic link"}};
  if (have_device) nodes.push_back({null_like, "a character device"});
  for (const Node& n : nodes) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"report", rec, "--html", n.path},
          {"report", rec, "--html", n.path, "--force"},
          {"trace", trace, "--html", n.path, "--force"}}) {
      SCOPED_TRACE(::testing::PrintToString(args));
      auto o = Run(args);
      EXPECT_EQ(o.exit_code, 2) << o.err;
      EXPECT_EQ(o.err, "stallscope " + args[0] + ": --html " + n.path + ": is " + n.kind +
                           ", not a regular file; it is never replaced (give a file path)\n");
    }
  }
  struct stat st {};
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(Slurp(target), "mine");
  if (have_device) {
    ASSERT_EQ(lstat(null_like.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
  // A regular file is still written (with --force when it holds something).
  auto written = Run({"report", rec, "--html", target, "--force"});
  EXPECT_EQ(written.exit_code, 0) << written.err;
  EXPECT_NE(Slurp(target).find("<html"), std::string::npos);
}

// Issue 27 B21: causes named wrong. A run.json that cannot be read (a symbolic link loop: it
// fails for root too) was "not a stallscope run directory (no run.json)"; a path that is a loop
// was "cannot open recording" (report) or "no such file or directory" (trace).
TEST_F(E2e, UnreadableInputsNameTheRealCause) {
  const fs::path run = dir_ / "run";
  fs::create_directories(run);
  fs::create_symlink(run / "run.json", run / "run.json");
  auto looped = Run({"diagnose", run.string()});
  EXPECT_EQ(looped.exit_code, 1);
  EXPECT_EQ(looped.err, "stallscope diagnose: " + (run / "run.json").string() +
                            ": cannot read: too many levels of symbolic links\n");
  const fs::path loop = dir_ / "loop";
  fs::create_symlink(loop, loop);
  auto report = Run({"report", loop.string(), "--html", (dir_ / "y.html").string()});
  EXPECT_EQ(report.exit_code, 1);
  EXPECT_EQ(report.err, "stallscope report: " + loop.string() +
                            ": cannot open: too many levels of symbolic links\n");
  auto trace = Run({"trace", loop.string()});
  EXPECT_EQ(trace.exit_code, 1);
  EXPECT_EQ(trace.err, "stallscope trace: " + loop.string() +
                           ": cannot open: too many levels of symbolic links\n");
  // Missing stays missing.
  fs::remove(run / "run.json");
  auto missing = Run({"diagnose", run.string()});
  EXPECT_EQ(missing.err, "stallscope diagnose: " + run.string() +
                             ": not a stallscope run directory (no run.json)\n");
}

// Issue 27 B21, permissions: root reads a chmod 000 file and binds any port, so this part
// runs only as another user (CI runs as root: UnreadableInputsNameTheRealCause covers the
// same code path with a symbolic link loop there).
TEST_F(E2e, PermissionDeniedIsSaidSo) {
  if (geteuid() == 0) GTEST_SKIP() << "root: chmod 000 and ports below 1024 do not stop root";
  const fs::path run = dir_ / "run";
  fs::create_directories(run);
  std::ofstream(run / "run.json") << "{}";
  fs::permissions(run / "run.json", fs::perms::none);
  auto denied = Run({"diagnose", run.string()});
  fs::permissions(run / "run.json", fs::perms::owner_all);
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_EQ(denied.err, "stallscope diagnose: " + (run / "run.json").string() +
                            ": cannot read: permission denied\n");
  std::ifstream unprivileged("/proc/sys/net/ipv4/ip_unprivileged_port_start");
  if (int start = 1024; !(unprivileged >> start) || start > 1) {
    auto port = Run({"serve", "--listen", "127.0.0.1:1", "--duration", "1s"});
    EXPECT_EQ(port.exit_code, 1);
    EXPECT_NE(port.err.find("stallscope serve: cannot listen on 127.0.0.1:1: permission denied "
                            "(port 1 needs root or CAP_NET_BIND_SERVICE)\n"),
              std::string::npos)
        << port.err;
  }
}

// Values that would silently do nothing, or forever, are usage errors (exit 2, one line).
TEST_F(E2e, NumbersThatMeanNothingAreRefused) {
  const std::string rec = (dir_ / "r.jsonl").string();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"record", "--pid", "0", "-o", rec}, "--pid: 0: must be a whole number, 1 or more"},
      {{"record", "--pid=-1", "-o", rec}, "--pid: -1: must be a whole number, 1 or more"},
      {{"record", "--duration", "0s", "-o", rec}, "--duration 0s: must be more than 0"},
      {{"top", "-n", "0"}, "--count: 0: must be a whole number, 1 or more"},
      {{"run", "--report-every", "-5", "--", "true"},
       "--report-every: -5: must be a whole number, 0 or more"},
      {{"run", "--name", "a/b", "--", "true"}, "--name a/b: a run name cannot contain '/'"},
  };
  for (const auto& [args, message] : cases) {
    auto o = Run(args, "", 20);
    EXPECT_EQ(o.exit_code, 2) << args[1] << " " << args[2] << "\n" << o.err;
    EXPECT_NE(o.err.find(message), std::string::npos) << o.err;
    EXPECT_FALSE(fs::exists(rec));
  }
}

TEST_F(E2e, NoNvmlStillWorksAndSaysSoOnce) {
  auto o = Run({"top", "--once"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.err, "no NVIDIA GPU: libnvidia-ml.so.1 not found — GPU metrics unavailable\n");
  EXPECT_NE(o.out.find("CPU"), std::string::npos);
  EXPECT_NE(o.out.find("RAM"), std::string::npos);

  auto j = Run({"top", "--once", "--json"});
  ASSERT_EQ(j.exit_code, 0);
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["sample"]["multi_gpu_data"].size(), 0u);
  EXPECT_GT(doc["sample"]["host"]["mem_total_bytes"].get<uint64_t>(), 0u);
  EXPECT_TRUE(doc["sample"]["host"]["cpu_busy_pct"].is_number());
}

// Issue 41: a user without a GPU sees the GPU views on the demo GPUs (the fake NVML and its
// scenario, beside the binary in build/demo-gpu), only with --demo: NoNvmlStillWorksAndSaysSoOnce
// above runs beside them and loads none.
TEST_F(E2e, DemoGpusOnlyWhenAsked) {
  auto top = Run({"top", "--once", "--json", "--demo"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  const fs::path demo_dir = fs::path(STALLSCOPE_BIN).parent_path() / "demo-gpu";
  EXPECT_EQ(top.err,
            "demo GPUs: stallscope's fake NVML, not real hardware (" + demo_dir.string() + ")\n");
  auto doc = nlohmann::json::parse(top.out);
  ASSERT_EQ(doc["header"]["gpus"].size(), 2u) << top.out;
  EXPECT_EQ(doc["sample"]["multi_gpu_data"][0]["gpu_name"], "DEMO GPU 0 (fake NVML)");
  EXPECT_EQ(doc["sample"]["multi_gpu_data"][1]["gpu_name"], "DEMO GPU 1 (fake NVML)");
  // `record` (the front binary parses --demo itself) and the text screen.
  const std::string rec = (dir_ / "demo.jsonl").string();
  auto r = Run({"record", "--demo", "-i", "100ms", "--duration", "300ms", "-o", rec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(Slurp(rec).find("\"DEMO GPU 1 (fake NVML)\""), std::string::npos);
  auto text = Run({"top", "--once", "--demo"});
  EXPECT_NE(text.out.find("DEMO GPU 0"), std::string::npos) << text.out;
  // With a library of one's own, or without its files: one line, exit 2.
  auto both = Run({"top", "--once", "--demo", "--nvml-lib", FAKE_NVML_LIB});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_EQ(both.err, "stallscope top: give either --demo or --nvml-lib\n");
  const fs::path alone = dir_ / "bin";
  fs::create_directories(alone);
  for (const char* b : {"stallscope", "stallscope-full"}) {
    fs::copy_file(fs::path(STALLSCOPE_BIN).parent_path() / b, alone / b);
  }
  auto missing = RunBinary((alone / "stallscope").string(), {"top", "--once", "--demo"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(missing.err.rfind("stallscope top: --demo: the demo GPUs are not in this "
                              "installation (no libnvidia-ml.so.1 and scenario.json in " +
                                  (alone / "demo-gpu").string() + " or ",
                              0),
            0u)
      << missing.err;
}

TEST_F(E2e, TopOnceJsonWithEightFakeGpus) {
  auto o = Run({"top", "--once", "--json"}, Scenario(8));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  auto doc = nlohmann::json::parse(o.out);
  ASSERT_EQ(doc["header"]["gpus"].size(), 8u);
  auto& gpus = doc["sample"]["multi_gpu_data"];
  ASSERT_EQ(gpus.size(), 8u);
  EXPECT_EQ(gpus[3]["gpu_name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpus[3]["utilization"], 90);
  EXPECT_NEAR(gpus[3]["memory_used"].get<double>(), 23000.0, 1.0);
  EXPECT_EQ(doc["sample"]["aggregate_stats"]["gpu_count"], 8);
}

TEST_F(E2e, RecordThenSummary) {
  std::string rec = (dir_ / "run.jsonl").string();
  auto r = Run({"record", "-i", "100ms", "--duration", "1s", "-o", rec}, Scenario(4));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto s = Run({"summary", rec});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("Per-GPU Breakdown:"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("GPU 3: 23000.0 MB (±0.0)"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("Total:  86000.0 MB"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("CV = 5.2% (Good)  (memory)"), std::string::npos) << s.out;
  auto j = Run({"summary", "--json", rec});
  ASSERT_EQ(j.exit_code, 0);
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_GE(doc["samples"].get<int>(), 8);
  EXPECT_EQ(doc["gpus"].size(), 4u);
}

// `record --format seed` writes seed 002's objects (legacy form for one GPU, multi-GPU form with
// aggregate_stats otherwise), one per line, no header, events or trailer; summary reads them
// back; a wrong --format is a usage error.
TEST_F(E2e, RecordFormatSeedWritesTheSeedsObjects) {
  for (int gpus : {1, 4}) {
    const std::string rec = (dir_ / ("seed" + std::to_string(gpus) + ".jsonl")).string();
    auto r = Run({"record", "-i", "100ms", "--duration", "600ms", "--format", "seed", "-o", rec},
                 Scenario(gpus));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::istringstream lines(Slurp(rec));
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
      auto o = nlohmann::json::parse(line);
      ++n;
      ASSERT_TRUE(o["timestamp"].is_string());
      EXPECT_EQ(o["timestamp"].get<std::string>().size(), 26u) << line;  // ...T10:30:00.123456
      if (gpus == 1) {
        EXPECT_EQ(o["gpu_index"], 0) << line;
        EXPECT_EQ(o["gpu_name"], "NVIDIA H100 80GB HBM3");
        EXPECT_EQ(o["memory_total"], 81559);
        EXPECT_EQ(o["memory_used"], 20000);
        EXPECT_FALSE(o.contains("multi_gpu_data"));
      } else {
        ASSERT_EQ(o["multi_gpu_data"].size(), 4u) << line;
        EXPECT_EQ(o["multi_gpu_data"][3]["memory_used"], 23000);
        EXPECT_EQ(o["aggregate_stats"]["gpu_count"], 4);
        EXPECT_EQ(o["aggregate_stats"]["total_memory_used"], 86000.0);
      }
    }
    EXPECT_GE(n, 3);
    auto back = Run({"summary", rec});
    ASSERT_EQ(back.exit_code, 0) << back.err;
    EXPECT_NE(back.out.find(gpus == 1 ? "legacy single-GPU" : "multi-GPU objects"),
              std::string::npos)
        << back.out;
  }
  auto bad =
      Run({"record", "--format", "xml", "--duration", "1s", "-o", (dir_ / "x.jsonl").string()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "stallscope record: --format xml: give jsonl, csv or seed\n");
}

// Seed 002's monitor files (issue 17): both forms, one object per line or one JSON array, are
// read by summary and report with the per-GPU breakdown and the load-balance classes, and say
// which form was read.
TEST_F(E2e, SummaryAndReportReadTheSeedMonitorsFiles) {
  const std::string seed = STALLSCOPE_SOURCE_DIR "/tests/data/seed/";
  auto legacy = Run({"summary", seed + "legacy.jsonl"});
  ASSERT_EQ(legacy.exit_code, 0) << legacy.err;
  EXPECT_NE(legacy.out.find("read as seed 002 legacy single-GPU objects (one object per line)"),
            std::string::npos)
      << legacy.out;
  EXPECT_NE(legacy.out.find("GPU 0: 12860.0 MB"), std::string::npos) << legacy.out;
  for (const char* file : {"multi_gpu.jsonl", "multi_gpu_array.json"}) {
    auto s = Run({"summary", seed + file});
    ASSERT_EQ(s.exit_code, 0) << file << s.err;
    EXPECT_NE(s.out.find("read as seed 002 multi-GPU objects"), std::string::npos) << s.out;
    EXPECT_NE(s.out.find("CV = 25.5% (Poor)  (utilization)"), std::string::npos) << s.out;
    EXPECT_NE(s.out.find("GPU 3: 200"), std::string::npos) << s.out;
  }
  auto j = Run({"summary", "--json", seed + "multi_gpu.jsonl"});
  ASSERT_EQ(j.exit_code, 0);
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["samples"], 6);
  EXPECT_EQ(doc["gpus"].size(), 4u);
  const std::string html = (dir_ / "seed.html").string();
  auto r = Run({"report", seed + "multi_gpu_array.json", "--html", html});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(html));
}

TEST_F(E2e, RecordReturnsTheCommandsExitCode) {
  std::string rec = (dir_ / "cmd.jsonl").string();
  auto r = Run({"record", "-i", "50ms", "-o", rec, "--", "sh", "-c", "sleep 0.3; exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  auto s = Run({"summary", "--json", rec});
  auto doc = nlohmann::json::parse(s.out);
  EXPECT_EQ(doc["exit_code"], 7);

  auto missing = Run({"record", "-o", (dir_ / "missing.jsonl").string(), "--", "/nonexistent/cmd"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.err.find("cannot start '/nonexistent/cmd'"), std::string::npos) << missing.err;
}

TEST_F(E2e, RecordFollowsTheProcessTree) {
  std::string rec = (dir_ / "tree.jsonl").string();
  auto r =
      Run({"record", "-i", "50ms", "-o", rec, "--", "sh", "-c", "sleep 0.6 & sleep 0.6; wait"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(rec);
  std::string line;
  size_t max_procs = 0;
  bool saw_sleep = false;
  while (std::getline(in, line)) {
    auto doc = nlohmann::json::parse(line);
    if (doc["type"] != "sample") continue;
    auto& procs = doc["processes"];
    ASSERT_TRUE(procs.is_array());
    max_procs = std::max(max_procs, procs.size());
    for (auto& p : procs) saw_sleep |= p["comm"] == "sleep";
  }
  EXPECT_GE(max_procs, 3u);  // sh + two sleeps
  EXPECT_TRUE(saw_sleep);
}

TEST_F(E2e, SigkillMidRecordLeavesAReadableFile) {
  std::string rec = (dir_ / "killed.jsonl").string();
  std::string scenario = Scenario(2);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    kill(last_pid_, SIGKILL);
  });
  auto r = Run({"record", "-i", "50ms", "-o", rec}, scenario);
  killer.join();
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  auto s = Run({"summary", "--json", rec});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  auto doc = nlohmann::json::parse(s.out);
  EXPECT_GE(doc["samples"].get<int>(), 5);
  EXPECT_EQ(doc["gpus"].size(), 2u);
}

TEST_F(E2e, GpuLostMidRunKeepsRecordingTheOthers) {
  std::string scenario = Scenario(2, {{"lost_at_s", 0.5}});
  // Only GPU 1 is lost: rewrite its entry.
  auto doc = nlohmann::json::parse(Slurp(scenario));
  doc["gpus"][0].erase("lost_at_s");
  std::ofstream(scenario) << doc.dump();
  std::string rec = (dir_ / "lost.jsonl").string();
  auto r = Run({"record", "-i", "100ms", "--duration", "1500ms", "-o", rec}, scenario);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto text = Slurp(rec);
  EXPECT_NE(text.find("\"kind\":\"gpu_lost\""), std::string::npos);
  auto s = Run({"summary", rec});
  EXPECT_NE(s.out.find("LOST in"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("GPU 0: 20000.0 MB"), std::string::npos) << s.out;
}

TEST_F(E2e, StatusLinesAndLowUtilWarning) {
  auto o = Run({"top", "--status", "-i", "50ms", "-n", "12"},
               Scenario(1, {{"pattern", {{"kind", "steady"}, {"util_high", 11}}}}));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("GPU: 11% | VRAM:19.5/79.6GB(24.5%) | CPU: "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("LOW GPU UTILIZATION (11.0% over the last 10 samples)"), std::string::npos);
  auto two = Run({"top", "--status", "-i", "50ms", "-n", "2"}, Scenario(2));
  EXPECT_NE(two.out.find("GPU0: 90% | VRAM0:"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("| GPU1: 90% | VRAM1:"), std::string::npos) << two.out;
  EXPECT_EQ(two.out.find("LOW GPU"), std::string::npos);
}

TEST_F(E2e, CsvRecording) {
  std::string rec = (dir_ / "run.csv").string();
  auto r = Run({"record", "--csv", "-i", "100ms", "--duration", "500ms", "-o", rec}, Scenario(2));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(rec);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  EXPECT_EQ(header.rfind("timestamp,ts_ns,", 0), 0u);
  EXPECT_NE(header.find("gpu1_utilization_pct"), std::string::npos);
  EXPECT_EQ(std::count(header.begin(), header.end(), ','), std::count(row.begin(), row.end(), ','));
}

TEST_F(E2e, BadInputGetsAOneLineError) {
  std::string junk = (dir_ / "junk.jsonl").string();
  std::ofstream(junk) << "\x89PNG\r\n\x1a\n binary";
  auto s = Run({"summary", junk});
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_NE(s.err.find(junk), std::string::npos);
  EXPECT_EQ(std::count(s.err.begin(), s.err.end(), '\n'), 1) << s.err;
  auto bad_interval = Run({"record", "-i", "10ms", "--duration", "1s"});
  EXPECT_EQ(bad_interval.exit_code, 2);
  EXPECT_NE(bad_interval.err.find("50ms minimum"), std::string::npos);
  auto bad_lib = Run({"top", "--once", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"});
  EXPECT_EQ(bad_lib.exit_code, 0);
  EXPECT_NE(bad_lib.err.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << bad_lib.err;
}

}  // namespace
