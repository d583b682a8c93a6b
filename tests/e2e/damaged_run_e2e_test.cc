// End-to-end tests of run directories damaged after the run (issue 27, B09 B10 B14 B16): one real
// `stallscope run` of a small Python job with explicit phases, then a copy of its directory per
// case, damaged, read back by `diagnose`, `compare`, `report` and `top --run`.

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "subprocess.h"

namespace {

namespace fs = std::filesystem;
using stallscope::testing::ProcessOutput;

/// Generous: a loaded 2-core machine runs these in seconds; a hang is the bug they catch.
constexpr double kTimeoutS = 120;

std::vector<std::string> Env() {
  auto env = stallscope::testing::EnvironmentWithout({"STALLSCOPE_", "PYTHONPATH="});
  env.push_back(std::string("STALLSCOPE_NVML_LIB=") + FAKE_NVML_LIB);
  env.push_back(std::string("STALLSCOPE_FAKE_NVML_SCENARIO=") + STALLSCOPE_SOURCE_DIR +
                "/tests/data/nvml/steady_1gpu.json");
  return env;
}

class DamagedRunE2e : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!STALLSCOPE_E2E_HOOKS) return;
    root_ = fs::temp_directory_path() / ("stallscope_damaged_e2e_" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "job.py") << "import time, stallscope\n"
                                       "for i in range(20):\n"
                                       "    with stallscope.phase('data_loading'): "
                                       "time.sleep(0.03)\n"
                                       "    with stallscope.phase('forward_pass'): "
                                       "time.sleep(0.003)\n"
                                       "    stallscope.step()\n";
    auto o = stallscope::testing::RunProcess(
        {STALLSCOPE_BIN, "run", "--quiet", "--out", (root_ / "run").string(), "--",
         "/usr/bin/python3", (root_ / "job.py").string()},
        Env(), root_, kTimeoutS);
    ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  }
  static void TearDownTestSuite() {
    if (!root_.empty()) fs::remove_all(root_);
  }
  void SetUp() override {
    if (!STALLSCOPE_E2E_HOOKS) GTEST_SKIP() << "this build has no Python package";
    ASSERT_TRUE(fs::exists(root_ / "run" / "events.bin")) << "the run recorded no phases";
    dir_ = root_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(root_ / "run", Run(), fs::copy_options::recursive);
  }

  std::string Run() const { return (dir_ / "run").string(); }
  std::string File(const std::string& name) const { return Run() + "/" + name; }
  /// phases/<pid>.meta.jsonl of the job's one ring (created when absent).
  std::string MetaFile() const {
    for (const auto& e : fs::directory_iterator(Run() + "/phases")) {
      if (e.path().extension() == ".ring")
        return e.path().parent_path() / (e.path().stem().string() + ".meta.jsonl");
    }
    ADD_FAILURE() << "no ring in " << Run() << "/phases";
    return File("phases/none.meta.jsonl");
  }
  void MakeFifo(const std::string& path) const {
    fs::remove(path);
    ASSERT_EQ(mkfifo(path.c_str(), 0644), 0) << path;
  }

  ProcessOutput Stallscope(std::vector<std::string> args) const {
    args.insert(args.begin(), STALLSCOPE_BIN);
    return stallscope::testing::RunProcess(args, Env(), dir_, kTimeoutS);
  }

  static inline fs::path root_;
  fs::path dir_;
};

// B09: without events.names.jsonl (or with it empty, or garbage) the phases became unnamed_N
// and the verdict changed, silently. The ring names them; a warning names the file.
TEST_F(DamagedRunE2e, LostNamesFileNamesComeFromTheRing) {
  const std::string names = File("events.names.jsonl");
  for (const char* damage : {"missing", "empty", "garbage"}) {
    SCOPED_TRACE(damage);
    fs::remove(names);
    if (std::string(damage) == "empty") std::ofstream{names};
    if (std::string(damage) == "garbage") std::ofstream(names) << "\x93\xff\x01 not json\n";
    auto o = Stallscope({"diagnose", Run()});
    ASSERT_EQ(o.exit_code, 0) << o.err;
    const std::string all = o.out + o.err;
    EXPECT_NE(all.find("data_loading"), std::string::npos) << all;
    EXPECT_EQ(all.find("unnamed_"), std::string::npos) << all;
    EXPECT_NE(all.find("events.names.jsonl"), std::string::npos) << all;
  }
}

// B10: an events.bin of random bytes hid the rings: no phases, gpu_bound at 0.90, no caveat.
TEST_F(DamagedRunE2e, CorruptEventsBinIsReadFromTheRingWithACaveat) {
  const auto size = fs::file_size(File("events.bin"));
  std::string junk(size, '\0');
  uint32_t x = 2463534242u;  // xorshift32: the same bytes every run
  for (char& c : junk) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x);
  }
  std::ofstream(File("events.bin"), std::ios::binary | std::ios::trunc) << junk;
  auto o = Stallscope({"diagnose", Run()});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("data_loading"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("CAVEAT   events.bin is corrupt or unreadable (not a stallscope event "
                       "log): the phases were read from the rings"),
            std::string::npos)
      << o.out;
}

// B14: a FIFO in the run directory hung diagnose, report and compare (open(2) of a FIFO waits for
// a writer). Each is refused unopened, with a warning naming it.
TEST_F(DamagedRunE2e, FifosAreNeverOpened) {
  for (const std::string& name :
       {std::string("python.jsonl"), std::string("recording.jsonl"), std::string("events.bin"),
        std::string("events.names.jsonl"), MetaFile().substr(Run().size() + 1)}) {
    SCOPED_TRACE(name);
    fs::remove_all(Run());
    fs::copy(root_ / "run", Run(), fs::copy_options::recursive);
    MakeFifo(File(name));
    const std::string said = File(name) + ": not a regular file (a FIFO)";
    auto diagnose = Stallscope({"diagnose", Run()});
    EXPECT_EQ(diagnose.exit_code, 0) << diagnose.err;
    EXPECT_NE((diagnose.out + diagnose.err).find(said), std::string::npos)
        << diagnose.out << diagnose.err;
    auto report = Stallscope({"report", Run(), "--html", (dir_ / "r.html").string(), "--force"});
    EXPECT_EQ(report.exit_code, 0) << report.err;
    auto compare = Stallscope({"compare", Run(), (root_ / "run").string()});
    EXPECT_EQ(compare.exit_code, 0) << compare.err;
  }
  // run.json is what makes a run directory: a FIFO there is an error naming it, not a hang.
  MakeFifo(File("run.json"));
  auto o = Stallscope({"diagnose", Run()});
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find(File("run.json") + ": not a regular file (a FIFO)"), std::string::npos)
      << o.err;
}

// B14: `top --run` blocked SIGTERM (to take it between samples) while a read of the run directory
// never returned: it could not be stopped. It ends on SIGTERM now, whatever it is doing.
TEST_F(DamagedRunE2e, TopRunEndsOnSigtermWithAFifoInTheRunDir) {
  MakeFifo(File("events.bin"));
  MakeFifo(File("events.names.jsonl"));
  const pid_t pid =
      stallscope::testing::Spawn({STALLSCOPE_BIN, "top", "--run", Run(), "--plain", "-i", "200ms"},
                                 Env(), (dir_ / "stdout").string(), (dir_ / "stderr").string());
  ASSERT_GT(pid, 0);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // any moment will do: not a timing test
  kill(pid, SIGTERM);
  const int code = stallscope::testing::WaitExit(pid, kTimeoutS);  // a failure when it hangs
  EXPECT_TRUE(code == 0 || code == 128 + SIGTERM) << code;
}

/// Runs `stallscope diagnose DIR` to the end; its peak RSS in KiB.
long DiagnosePeakRssKib(const std::string& dir, const fs::path& out_dir) {
  const pid_t pid =
      stallscope::testing::Spawn({STALLSCOPE_BIN, "diagnose", dir}, Env(),
                                 (out_dir / "stdout").string(), (out_dir / "stderr").string());
  int status = 0;
  rusage usage{};
  EXPECT_EQ(wait4(pid, &status, 0, &usage), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return usage.ru_maxrss;
}

// B16: a 50 MB line in python.jsonl cost ~4x its size in RSS. Lines over 16 MiB are skipped and
// counted, with memory bounded by the cap: a 64 MiB line costs at most ~16 MiB more.
TEST_F(DamagedRunE2e, OverlongPythonNotesLineIsSkippedInBoundedMemory) {
  const long before_kib = DiagnosePeakRssKib(Run(), dir_);
  {
    std::ofstream out(File("python.jsonl"), std::ios::app);
    // Written in pieces: with posix_spawn's shared address space the child's ru_maxrss starts
    // from this process's peak, which a 64 MiB string would raise.
    const std::string mib(size_t{1} << 20, 'A');
    out << R"({"event":"start","pid":1,"pad":")";
    for (int i = 0; i < 64; ++i) out << mib;
    out << "\"}\n";
  }
  const long after_kib = DiagnosePeakRssKib(Run(), dir_);
  EXPECT_LT(after_kib - before_kib, 40 * 1024) << before_kib << " KiB, then " << after_kib;
  const std::string err =
      stallscope::testing::Slurp(dir_ / "stderr") + stallscope::testing::Slurp(dir_ / "stdout");
  EXPECT_NE(err.find(File("python.jsonl") + ": 1 line over the 16 MiB line limit skipped"),
            std::string::npos)
      << err;
}

}  // namespace
