#include "stacks/stack_sampler.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

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

}  // namespace
}  // namespace stallscope::stacks
