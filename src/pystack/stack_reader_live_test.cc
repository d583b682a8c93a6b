// StackReader against live interpreters: every local one (Debian's /usr/bin/python3.11 and
// pyenv's 3.8-3.13; those not installed are skipped by name). Label e2e: each test starts
// Python processes. Synchronisation is a line the target prints, never a sleep; no timing is
// asserted, and waits are generous (a busy 2-core machine).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "pystack/pystack.h"

namespace stallscope::pystack {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A target script whose main thread settles in `function` at `line` with `depth` frames.
struct Situation {
  const char* name;
  const char* script;
  const char* function;
  int line;
  size_t depth;
};

// Issue 31's list: a C call releasing the GIL (time.sleep), a generator, a lambda, a 200-deep
// recursion. On 3.11+ the function is co_qualname ("<lambda>" at module level is the same).
constexpr Situation kSituations[] = {
    {"sleep_in_function",
     "import time\n"
     "def where_am_i():\n"
     "    print('ready', flush=True)\n"
     "    while True:\n"
     "        time.sleep(0.05)\n"
     "where_am_i()\n",
     "where_am_i", 5, 2},
    {"generator",
     "import time\n"
     "def gen():\n"
     "    print('ready', flush=True)\n"
     "    while True:\n"
     "        time.sleep(0.05)\n"
     "        yield 1\n"
     "for _ in gen():\n"
     "    pass\n",
     "gen", 5, 2},
    {"lambda",
     "import time\n"
     "f = lambda: time.sleep(0.05)\n"
     "print('ready', flush=True)\n"
     "while True:\n"
     "    f()\n",
     "<lambda>", 2, 2},
    {"deep_200",
     "import time\n"
     "def down(n):\n"
     "    if n == 0:\n"
     "        print('ready', flush=True)\n"
     "        while True:\n"
     "            time.sleep(0.05)\n"
     "    down(n - 1)\n"
     "down(199)\n",
     "down", 6, 201},
};

// A running target; killed and reaped on destruction. Reads its stdout up to the line "ready"
// (at most 60 s: pyenv's interpreters start slowly on a loaded machine); lines before it are kept.
class Target {
 public:
  Target(const std::string& python, const fs::path& script) {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      alarm(120);  // never outlive a crashed test run
      execl(python.c_str(), python.c_str(), script.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    FILE* stream = fdopen(out[0], "r");
    char line[256] = {};
    while (stream != nullptr && fgets(line, sizeof(line), stream) != nullptr) {
      std::string text(line);
      if (!text.empty() && text.back() == '\n') text.pop_back();
      if (text == "ready") {
        ready_ = true;
        break;
      }
      lines_.push_back(text);
    }
    if (stream != nullptr) fclose(stream);
  }
  ~Target() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;
  pid_t pid() const { return pid_; }
  bool ready() const { return ready_; }
  const std::vector<std::string>& lines() const { return lines_; }
  /// Reaps the target once it exits by itself (the exit test).
  void Reap() {
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
  std::vector<std::string> lines_;
};

fs::path WriteScript(const std::string& text) {
  fs::path dir = fs::temp_directory_path() / fmt::format("pystack_live_test_{}", getpid());
  fs::create_directories(dir);
  fs::path script = dir / "target.py";
  std::ofstream(script) << text;
  return script;
}

class Interpreter : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!fs::exists(GetParam())) GTEST_SKIP() << GetParam() << " is not installed here";
  }
  void TearDown() override {
    fs::remove_all(fs::temp_directory_path() / fmt::format("pystack_live_test_{}", getpid()));
  }
};

// Samples `tid` until its innermost frame is at `line` (the target may be between two bytecodes
// of its loop) or 20 s pass; returns the last stack read.
ThreadStack SampleUntilAt(StackReader& reader, pid_t tid, int line) {
  ThreadStack last;
  for (auto end = Clock::now() + std::chrono::seconds(20); Clock::now() < end;) {
    auto stack = reader.Sample(tid, StackReader::kMaxFrames);
    if (stack.ok()) {
      last = std::move(stack).value();
      if (!last.frames.empty() && last.frames[0].line == line) break;
    } else {
      EXPECT_EQ(stack.error().code, ErrorCode::kIo) << stack.error().message;
    }
    usleep(5000);  // spacing between tries, not synchronisation
  }
  return last;
}

TEST_P(Interpreter, Situations) {
  for (const Situation& situation : kSituations) {
    SCOPED_TRACE(situation.name);
    fs::path script = WriteScript(situation.script);
    Target target(GetParam(), script);
    ASSERT_TRUE(target.ready()) << GetParam() << " did not print ready";
    auto reader = StackReader::Open(target.pid());
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    ThreadStack main_thread = SampleUntilAt(*reader, target.pid(), situation.line);
    ASSERT_EQ(main_thread.frames.size(), situation.depth);
    EXPECT_EQ(main_thread.native_thread_id, target.pid());
    EXPECT_FALSE(main_thread.truncated);
    EXPECT_EQ(main_thread.frames[0].file, script.string());
    EXPECT_EQ(main_thread.frames[0].function, situation.function);
    EXPECT_EQ(main_thread.frames[0].line, situation.line);
    EXPECT_EQ(main_thread.frames.back().function, "<module>");
    // Again, cut to one frame: its code object comes from the cache.
    int64_t misses = reader->stats().code_cache_misses;
    EXPECT_LE(misses, 8);
    auto cut = reader->Sample(target.pid(), 1);
    if (cut.ok()) {
      EXPECT_EQ(cut->frames.size(), 1u);
      EXPECT_TRUE(cut->truncated);
      EXPECT_EQ(reader->stats().code_cache_misses, misses);
      EXPECT_GT(reader->stats().code_cache_hits, 0);
    }
  }
}

// Pure Python, no call: the line alternates between the loop's lines; every sample names one of
// them and, over at least 200 samples, both body lines appear.
TEST_P(Interpreter, BusyLoopLinesAlternate) {
  fs::path script = WriteScript(
      "def spin():\n"
      "    print('ready', flush=True)\n"
      "    x = 0\n"
      "    while True:\n"
      "        x += 1\n"
      "        x -= 1\n"
      "spin()\n");
  Target target(GetParam(), script);
  ASSERT_TRUE(target.ready());
  auto reader = StackReader::Open(target.pid());
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  std::set<int> seen;
  int samples = 0;
  bool in_loop = false;  // "ready" comes before the loop: the first samples may be at lines 2-3
  for (auto end = Clock::now() + std::chrono::seconds(30);
       Clock::now() < end && (samples < 200 || seen.size() < 2);) {
    auto stack = reader->Sample(target.pid());
    if (!stack.ok()) {
      EXPECT_EQ(stack.error().code, ErrorCode::kIo) << stack.error().message;
      continue;
    }
    ASSERT_EQ(stack->frames.size(), 2u);
    EXPECT_EQ(stack->frames[0].function, "spin");
    ASSERT_TRUE(stack->frames[0].line);
    int line = *stack->frames[0].line;
    if (!in_loop && (line == 2 || line == 3)) continue;
    in_loop = true;
    ++samples;
    EXPECT_TRUE(line >= 4 && line <= 6) << line;  // `while True:` may own the jump back
    if (line == 5 || line == 6) seen.insert(line);
    usleep(200);  // spread the samples over the target's loop, not synchronisation
  }
  EXPECT_GE(samples, 200);
  EXPECT_EQ(seen, (std::set<int>{5, 6}));
}

// Sample(tid) of a second thread, its tid printed by the script (threading.get_native_id).
TEST_P(Interpreter, SecondThreadByNativeId) {
  fs::path script = WriteScript(
      "import threading\n"
      "import time\n"
      "started = threading.Event()\n"
      "def second_thread_work():\n"
      "    print(threading.get_native_id(), flush=True)\n"
      "    started.set()\n"
      "    while True:\n"
      "        time.sleep(0.05)\n"
      "threading.Thread(target=second_thread_work, daemon=True).start()\n"
      "started.wait()\n"
      "print('ready', flush=True)\n"
      "while True:\n"
      "    time.sleep(0.05)\n");
  Target target(GetParam(), script);
  ASSERT_TRUE(target.ready());
  ASSERT_EQ(target.lines().size(), 1u);
  pid_t tid = std::stoi(target.lines()[0]);
  auto reader = StackReader::Open(target.pid());
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  ThreadStack second = SampleUntilAt(*reader, tid, 8);
  ASSERT_FALSE(second.frames.empty());
  EXPECT_EQ(second.native_thread_id, tid);
  EXPECT_EQ(second.frames[0].function, "second_thread_work");
  EXPECT_EQ(second.frames[0].line, 8);
  EXPECT_TRUE(second.frames.back().function.ends_with("_bootstrap"))
      << second.frames.back().function;
  ThreadStack main_thread = SampleUntilAt(*reader, target.pid(), 13);
  ASSERT_EQ(main_thread.frames.size(), 1u);
  EXPECT_EQ(main_thread.frames[0].function, "<module>");
  auto all = reader->SampleAll();
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(all->threads.size(), 2u);
  EXPECT_EQ(all->cut, "");
}

// A forked child's stack, read by the child's pid.
TEST_P(Interpreter, ForkedChild) {
  fs::path script = WriteScript(
      "import os\n"
      "import time\n"
      "def child_sleeps():\n"
      "    print(f'{os.getpid()}\\nready', flush=True)\n"
      "    while True:\n"
      "        time.sleep(0.05)\n"
      "if os.fork() == 0:\n"
      "    child_sleeps()\n"
      "while True:\n"
      "    time.sleep(0.05)\n");
  Target target(GetParam(), script);
  ASSERT_TRUE(target.ready());
  ASSERT_EQ(target.lines().size(), 1u);
  pid_t child = std::stoi(target.lines()[0]);
  struct KillOnExit {  // our grandchild, not killed with the target: init reaps it
    pid_t pid;
    ~KillOnExit() { kill(pid, SIGKILL); }
  } kill_child{child};
  auto reader = StackReader::Open(child);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  ThreadStack stack = SampleUntilAt(*reader, child, 6);
  ASSERT_EQ(stack.frames.size(), 2u);
  EXPECT_EQ(stack.frames[0].function, "child_sleeps");
  EXPECT_EQ(stack.frames[0].line, 6);
  EXPECT_EQ(stack.frames[1].function, "<module>");
}

// The target exits while we sample it as fast as we can: every error is kNotFound (gone, no
// interpreter, no such thread) or a counted torn read (kIo), and every stack read names only
// frames that exist (ours: deep/<module> at lines of the script; others: a file and a name).
TEST_P(Interpreter, TargetExitingMidRead) {
  fs::path script = WriteScript(
      "import time\n"
      "def deep(n):\n"
      "    if n == 0:\n"
      "        print('ready', flush=True)\n"
      "        end = time.time() + 0.2\n"
      "        while time.time() < end:\n"
      "            pass\n"
      "        raise SystemExit(0)\n"
      "    deep(n - 1)\n"
      "deep(50)\n");
  Target target(GetParam(), script);
  ASSERT_TRUE(target.ready());
  auto reader = StackReader::Open(target.pid());
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  bool gone = false;
  for (auto end = Clock::now() + std::chrono::seconds(30); Clock::now() < end && !gone;) {
    auto stack = reader->Sample(target.pid());
    if (!stack.ok()) {
      ErrorCode code = stack.error().code;
      EXPECT_TRUE(code == ErrorCode::kNotFound || code == ErrorCode::kIo) << stack.error().message;
      gone = stack.error().message == fmt::format("pid {}: no such process", target.pid());
      continue;
    }
    for (const Frame& frame : stack->frames) {
      ASSERT_FALSE(frame.file.empty());
      ASSERT_FALSE(frame.function.empty());
      if (frame.file != script.string()) continue;
      EXPECT_TRUE(frame.function == "deep" || frame.function == "<module>") << frame.function;
      if (frame.line) {
        EXPECT_TRUE(*frame.line >= 1 && *frame.line <= 10) << *frame.line;
      }
    }
  }
  EXPECT_TRUE(gone) << "the target did not exit in 30 s";
  target.Reap();
}

// FindPython on 3.13 reads _Py_DebugOffsets: it agrees with the values measured from the headers.
TEST_P(Interpreter, DebugOffsetsAgreeWithTheMeasuredOnes) {
  fs::path script = WriteScript("print('ready', flush=True)\nimport time\ntime.sleep(60)\n");
  Target target(GetParam(), script);
  ASSERT_TRUE(target.ready());
  auto process = FindPython(target.pid());
  ASSERT_TRUE(process.ok()) << process.error().message;
  EXPECT_TRUE(process->code_type && process->str_type && process->bytes_type);
  if (process->layout.minor != 13) return;
  auto measured = LayoutFromDebugOffsets(DebugOffsets3130());
  ASSERT_TRUE(measured.ok());
  EXPECT_EQ(process->layout.interp_tstate_head, measured->interp_tstate_head);
  EXPECT_EQ(process->layout.tstate_datastack_chunk, measured->tstate_datastack_chunk);
  EXPECT_EQ(process->layout.code_qualname, measured->code_qualname);
  EXPECT_EQ(process->layout.code_adaptive, measured->code_adaptive);
}

INSTANTIATE_TEST_SUITE_P(
    Local, Interpreter,
    ::testing::Values("/usr/bin/python3.11", "/root/.pyenv/versions/3.8.18/bin/python3.8",
                      "/root/.pyenv/versions/3.9.18/bin/python3.9",
                      "/root/.pyenv/versions/3.10.13/bin/python3.10",
                      "/root/.pyenv/versions/3.11.7/bin/python3.11",
                      "/root/.pyenv/versions/3.12.1/bin/python3.12",
                      "/root/.pyenv/versions/3.13.0/bin/python3.13"),
    [](const ::testing::TestParamInfo<std::string>& param) {
      std::string name = fs::path(param.param).parent_path().parent_path().filename().string();
      if (name == "usr") name = "debian_3_11";
      for (char& c : name) {
        if (c == '.') c = '_';
      }
      return "py" + name;
    });

TEST(StackReaderLive, NonPythonProcessIsNotFound) {
  auto reader = StackReader::Open(getpid());
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.error().code, ErrorCode::kNotFound);
  EXPECT_NE(reader.error().message.find(fmt::format("pid {}:", getpid())), std::string::npos);
}

}  // namespace
}  // namespace stallscope::pystack
