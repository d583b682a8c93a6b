#include "stacks/stack_sampler.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "subprocess.h"
#include "temp_dir.h"

namespace stallscope::stacks {
namespace {

namespace fs = std::filesystem;

// Its main thread spins in `spin` (line 5) or `other` (line 8): pure Python, no sleep.
constexpr const char* kSpinScript =
    "import sys\n"
    "def spin(n):\n"
    "    x = 0\n"
    "    for i in range(n):\n"
    "        x += i * i\n"
    "    return x\n"
    "def other():\n"
    "    return sum(j for j in range(1000))\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    spin(20000)\n"
    "    other()\n";

/// A Python process running `script` (relative name, in `dir`), ready once it printed "ready".
class PythonTarget {
 public:
  PythonTarget(const std::string& python, const fs::path& dir, const std::string& script) {
    std::ofstream(dir / "target.py") << script;
    const fs::path out = dir / "target.out";
    pid_ = fork();
    if (pid_ == 0) {
      if (chdir(dir.c_str()) != 0) _exit(126);
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      execl(python.c_str(), python.c_str(), "target.py", nullptr);
      _exit(127);
    }
    for (int i = 0; i < 3000 && testing::Slurp(out).find("ready") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ready_ = testing::Slurp(out).find("ready") != std::string::npos;
  }
  ~PythonTarget() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  bool ready() const { return ready_; }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

StackTarget Target(int32_t pid, bool worker = false, int32_t forked_from = 0) {
  StackTarget t;
  t.pid = pid;
  t.worker = worker;
  t.forked_from = forked_from;
  return t;
}

StackSamplerOptions At100Hz() {
  StackSamplerOptions o;
  o.main_hz = 100;
  return o;
}

// Runs a sampler over `targets` until it has `want` samples (or 60 s), then stops it.
StackLog SampleFor(const fs::path& dir, std::vector<StackTarget> targets, int64_t want) {
  auto sampler =
      StackSampler::Start((dir / kStacksFile).string(), At100Hz(), [targets] { return targets; });
  EXPECT_TRUE(sampler.ok()) << sampler.error().message;
  if (!sampler.ok()) return {};
  for (int i = 0; i < 6000 && (*sampler)->totals().samples < want; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE((*sampler)->Stop().ok());
  return ReadStackLog(dir.string());
}

TEST(StackSampler, NamesTheFunctionsAndLinesOfAPurePythonLoop) {
  testing::TempDir dir;
  PythonTarget target("/usr/bin/python3", dir.path(), kSpinScript);
  ASSERT_TRUE(target.ready());
  const StackLog log = SampleFor(dir.path(), {Target(target.pid())}, 100);
  ASSERT_EQ(log.processes.size(), 1u);
  EXPECT_EQ(log.processes[0].error, "");
  EXPECT_EQ(log.processes[0].python, "3.11");
  EXPECT_EQ(fs::path(log.processes[0].cwd), fs::canonical(dir.path()));
  ASSERT_GE(log.samples.size(), 100u);
  ASSERT_TRUE(log.totals);
  EXPECT_EQ(log.totals->samples, static_cast<int64_t>(log.samples.size()));
  EXPECT_GT(log.totals->cpu_s, 0);
  std::map<std::string, int> seen;
  for (const StackSample& s : log.samples) {
    EXPECT_EQ(s.pid, target.pid());
    const std::vector<uint32_t>& frames = log.stacks.at(s.stack);
    ASSERT_FALSE(frames.empty());
    const StackFrame& outer = log.frames.at(frames.back());
    EXPECT_EQ(outer.function, "<module>") << "a stack of " << frames.size() << " frames, innermost "
                                          << log.frames.at(frames.front()).function;
    // 3.9+ name the main script by its absolute path; 3.8 as given (relative to the cwd).
    EXPECT_TRUE(outer.file == "target.py" || outer.file == (dir.path() / "target.py").string())
        << outer.file;
    const StackFrame& inner = log.frames.at(frames.front());
    ++seen[inner.function + ":" + std::to_string(inner.line)];
    if (inner.function == "spin" && inner.line == 5) {
      EXPECT_EQ(inner.text, "x += i * i");
    }
  }
  // Most of the loop's time is in spin's body; every line seen is one the loop runs.
  EXPECT_GT(seen["spin:5"] + seen["spin:4"], 0) << ::testing::PrintToString(seen);
  for (const auto& [where, n] : seen) {
    EXPECT_TRUE(where.starts_with("spin:") || where.starts_with("other:") ||
                where.find("<genexpr>:") != std::string::npos || where.starts_with("<module>:"))
        << where;
  }
}

TEST(StackSampler, SamplesWorkersLessOftenAndNotesProcessesItCannotRead) {
  testing::TempDir dir;
  PythonTarget main_target("/usr/bin/python3", dir.path(), kSpinScript);
  testing::TempDir dir2;
  PythonTarget worker("/usr/bin/python3", dir2.path(), kSpinScript);
  ASSERT_TRUE(main_target.ready() && worker.ready());
  const pid_t sleeper = fork();
  if (sleeper == 0) {
    execl("/bin/sleep", "sleep", "60", nullptr);
    _exit(127);
  }
  const StackLog log = SampleFor(
      dir.path(), {Target(main_target.pid()), Target(worker.pid(), true, 1), Target(sleeper)}, 200);
  kill(sleeper, SIGKILL);
  waitpid(sleeper, nullptr, 0);
  const StackProcess* not_python = log.Process(sleeper);
  ASSERT_NE(not_python, nullptr);
  EXPECT_NE(not_python->error.find(std::to_string(sleeper)), std::string::npos)
      << not_python->error;
  ASSERT_NE(log.Process(worker.pid()), nullptr);
  EXPECT_TRUE(log.Process(worker.pid())->worker);
  int64_t main_n = 0, worker_n = 0;
  for (const StackSample& s : log.samples) {
    if (s.pid == worker.pid()) {
      ++worker_n;
    } else {
      ++main_n;
    }
  }
  EXPECT_GT(worker_n, 0);
  EXPECT_GT(main_n, 2 * worker_n);  // 100 Hz against the default 10 Hz
}

TEST(StackSampler, AProcessThatExitsIsDroppedAndTheRestGoOn) {
  testing::TempDir dir;
  PythonTarget stays("/usr/bin/python3", dir.path(), kSpinScript);
  testing::TempDir dir2;
  auto leaves = std::make_unique<PythonTarget>("/usr/bin/python3", dir2.path(), kSpinScript);
  ASSERT_TRUE(stays.ready() && leaves->ready());
  auto sampler = StackSampler::Start(dir.Sub(std::string(kStacksFile)), At100Hz(),
                                     [&, a = stays.pid(), b = leaves->pid()] {
                                       return std::vector<StackTarget>{Target(a), Target(b)};
                                     });
  ASSERT_TRUE(sampler.ok());
  for (int i = 0; i < 6000 && (*sampler)->totals().samples < 20; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  leaves.reset();  // killed and reaped while sampled
  const int64_t before = (*sampler)->totals().samples;
  for (int i = 0; i < 6000 && (*sampler)->totals().samples < before + 50; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE((*sampler)->Stop().ok());
  EXPECT_GE((*sampler)->totals().samples, before + 50);
}

// --- Issue 40: the job is untrusted input ---

// Runs a sampler over `targets` until `done(log)` holds for what it wrote (the file is flushed
// once a second; at most 60 s), then stops it and returns the whole log.
template <typename Done>
StackLog SampleUntil(const fs::path& dir, std::vector<StackTarget> targets,
                     StackSamplerOptions options, Done done) {
  auto sampler = StackSampler::Start((dir / kStacksFile).string(), std::move(options),
                                     [targets] { return targets; });
  EXPECT_TRUE(sampler.ok()) << sampler.error().message;
  if (!sampler.ok()) return {};
  bool met = false;
  for (int i = 0; i < 1200 && !met; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    met = done(ReadStackLog(dir.string()));
  }
  EXPECT_TRUE(met) << "not seen in 60 s: " << testing::Slurp(dir / kStacksFile).substr(0, 4000);
  EXPECT_TRUE((*sampler)->Stop().ok());
  return ReadStackLog(dir.string());
}

bool Noted(const StackLog& log, int32_t pid, std::string_view what) {
  return std::any_of(log.processes.begin(), log.processes.end(), [&](const StackProcess& p) {
    return p.pid == pid && p.error.find(what) != std::string::npos;
  });
}

bool SampledIn(const StackLog& log, std::string_view function) {
  for (const StackSample& s : log.samples) {
    for (uint32_t id : log.stacks[s.stack]) {
      if (log.frames[id].function == function) return true;
    }
  }
  return false;
}

// P02: a job that hides its main thread's tid (ctypes: PyThreadState.native_thread_id, 3.11)
// made every 50 Hz sample search the whole thread list, for the whole run. After kBackOffAfter
// failures the sampler waits longer each time, and after 12 it drops the process with a note:
// 12 failed reads in all, whatever the run's length.
TEST(StackSampler, AProcessWhoseMainThreadIsNotFoundIsBackedOffThenDropped) {
  testing::TempDir dir;
  PythonTarget target("/usr/bin/python3", dir.path(),
                      "import ctypes, time\n"
                      "ctypes.pythonapi.PyThreadState_Get.restype = ctypes.c_void_p\n"
                      "ts = ctypes.pythonapi.PyThreadState_Get()\n"
                      "ctypes.c_int64.from_address(ts + 160).value = 0  # 3.11 native_thread_id\n"
                      "print('ready', flush=True)\n"
                      "while True:\n"
                      "    time.sleep(0.05)\n");
  ASSERT_TRUE(target.ready());
  const StackLog log = SampleUntil(
      dir.path(), {Target(target.pid())}, At100Hz(),
      [&](const StackLog& l) { return Noted(l, target.pid(), "reads in a row failed"); });
  EXPECT_TRUE(
      Noted(log, target.pid(), fmt::format("pid {}: 12 reads in a row failed over", target.pid())));
  EXPECT_TRUE(
      Noted(log, target.pid(), fmt::format("(last: no Python thread with tid {})", target.pid())));
  ASSERT_TRUE(log.totals);
  EXPECT_EQ(log.totals->failed, 12);
  EXPECT_EQ(log.totals->samples, 0);
}

// P05: a job that exec()s into another CPython was read with the old layout and addresses for
// the rest of the run (every sample torn). The exec is noticed and the new interpreter read.
TEST(StackSampler, AProcessThatExecsIntoAnotherPythonIsReadAgain) {
  std::string other;
  for (const char* v : {"3.12.1", "3.8.18", "3.10.13", "3.13.0"}) {
    const std::string python = fmt::format("{}/.pyenv/versions/{}/bin/python{}", getenv("HOME"), v,
                                           std::string(v).substr(0, std::string(v).rfind('.')));
    if (access(python.c_str(), X_OK) == 0) {
      other = python;
      break;
    }
  }
  if (other.empty()) GTEST_SKIP() << "no pyenv 3.12, 3.8, 3.10 or 3.13 to exec into";
  testing::TempDir dir;
  std::ofstream(dir.Sub("after.py")) << "def after_exec_hot_loop():\n"
                                        "    while True:\n"
                                        "        sum(i for i in range(1000))\n"
                                        "after_exec_hot_loop()\n";
  PythonTarget target("/usr/bin/python3", dir.path(),
                      fmt::format("import os, time\n"
                                  "print('ready', flush=True)\n"
                                  "def before_exec():\n"
                                  "    while not os.path.exists('go'):\n"
                                  "        time.sleep(0.01)\n"
                                  "before_exec()\n"
                                  "os.execv('{0}', ['{0}', 'after.py'])\n",
                                  other));
  ASSERT_TRUE(target.ready());
  const StackLog log =
      SampleUntil(dir.path(), {Target(target.pid())}, At100Hz(), [&](const StackLog& l) {
        if (SampledIn(l, "before_exec")) std::ofstream(dir.Sub("go")) << "";
        return SampledIn(l, "after_exec_hot_loop");
      });
  const auto again = std::find_if(log.processes.begin(), log.processes.end(),
                                  [](const StackProcess& p) { return p.exec; });
  ASSERT_NE(again, log.processes.end());
  EXPECT_EQ(again->pid, target.pid());
  EXPECT_EQ(again->binary.find("/usr/bin/"), std::string::npos) << again->binary;
}

// ... and one that exec()s into something that is no Python is noted and dropped.
TEST(StackSampler, AnExecIntoSomethingElseIsNotedAndDropped) {
  testing::TempDir dir;
  PythonTarget target("/usr/bin/python3", dir.path(),
                      "import os, time\n"
                      "print('ready', flush=True)\n"
                      "def before_exec():\n"
                      "    while not os.path.exists('go'):\n"
                      "        time.sleep(0.01)\n"
                      "before_exec()\n"
                      "os.execv('/bin/sleep', ['sleep', '60'])\n");
  ASSERT_TRUE(target.ready());
  const StackLog log =
      SampleUntil(dir.path(), {Target(target.pid())}, At100Hz(), [&](const StackLog& l) {
        if (SampledIn(l, "before_exec")) std::ofstream(dir.Sub("go")) << "";
        return Noted(l, target.pid(), "exec'd into");
      });
  EXPECT_TRUE(Noted(log, target.pid(), "sleep: not a Python process; not sampled after"));
}

// P06: stallscope's own hooks (its package's auto.py step wrapper, the shim on PYTHONPATH) were
// reported as the job's line. Their frames are in no stack written.
TEST(StackSampler, StallscopesOwnFramesAreInNoStack) {
  testing::TempDir dir;
  fs::create_directories(dir.path() / "stallscope");
  std::ofstream(dir.path() / "stallscope" / "__init__.py") << "";
  std::ofstream(dir.path() / "stallscope" / "auto.py") << "def wrap(f):\n"
                                                          "    return f()\n";
  std::ofstream(dir.Sub("shim.py")) << "def call(f):\n"
                                       "    return f()\n";
  PythonTarget target("/usr/bin/python3", dir.path(),
                      "import sys\n"
                      "sys.path.insert(0, '.')\n"
                      "import shim, stallscope.auto\n"
                      "def job_line():\n"
                      "    return sum(i for i in range(1000))\n"
                      "print('ready', flush=True)\n"
                      "while True:\n"
                      "    shim.call(lambda: stallscope.auto.wrap(job_line))\n");
  ASSERT_TRUE(target.ready());
  StackSamplerOptions options = At100Hz();
  options.own_files = {(fs::canonical(dir.path()) / "shim.py").string()};
  const StackLog log = SampleUntil(dir.path(), {Target(target.pid())}, options,
                                   [&](const StackLog& l) { return l.samples.size() >= 100; });
  EXPECT_TRUE(SampledIn(log, "job_line"));
  for (const StackFrame& f : log.frames) {
    EXPECT_EQ(f.file.find("stallscope/"), std::string::npos) << f.file;
    EXPECT_EQ(f.file.find("shim.py"), std::string::npos) << f.file;
  }
}

// "Also found": a job's process without hooks (no ring: no training loop) is sampled too, at
// the workers' rate; one that is no Python is named with the reason.
TEST(StackSampler, TheJobsOtherProcessesAreSampledOrNamed) {
  testing::TempDir dir;
  PythonTarget plain("/usr/bin/python3", dir.path(), kSpinScript);
  ASSERT_TRUE(plain.ready());
  const pid_t sleeper = fork();
  if (sleeper == 0) {
    execl("/bin/sleep", "sleep", "60", nullptr);
    _exit(127);
  }
  StackTarget a = Target(plain.pid()), b = Target(sleeper);
  a.other = b.other = true;
  const StackLog log = SampleUntil(dir.path(), {a, b}, At100Hz(), [&](const StackLog& l) {
    return l.samples.size() >= 20 && Noted(l, sleeper, "not a Python process");
  });
  kill(sleeper, SIGKILL);
  waitpid(sleeper, nullptr, 0);
  EXPECT_TRUE(Noted(log, sleeper, fmt::format("pid {} (sleep): not a Python process", sleeper)));
  ASSERT_NE(log.Process(plain.pid()), nullptr);
  EXPECT_TRUE(log.Process(plain.pid())->other);
  EXPECT_TRUE(SampledIn(log, "spin"));
}

}  // namespace
}  // namespace stallscope::stacks
