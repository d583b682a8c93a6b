#include "pystack/pystack.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "pystack/elf_symbols.h"
#include "pystack/line_table.h"

namespace stallscope::pystack {
namespace {

namespace fs = std::filesystem;

// A target script whose main thread settles in `function` at `line` with `depth` frames.
struct Situation {
  const char* name;
  const char* script;
  const char* function;
  int line;
  size_t depth;
};

constexpr Situation kSleepInFunction = {"sleep_in_function",
                                        "import sys\n"
                                        "import time\n"
                                        "def where_am_i():\n"
                                        "    print('ready', flush=True)\n"
                                        "    while True:\n"
                                        "        time.sleep(0.05)\n"
                                        "where_am_i()\n",
                                        "where_am_i", 6, 2};

// Issue 31's list: a generator, a lambda, a 200-deep recursion (time.sleep is the C call that
// releases the GIL in each).
constexpr Situation kSituations[] = {
    kSleepInFunction,
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

// A running target; killed and reaped on destruction.
class Target {
 public:
  Target(const std::string& python, const fs::path& script) {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      execl(python.c_str(), python.c_str(), script.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    FILE* stream = fdopen(out[0], "r");
    char line[64] = {};
    ready_ = stream != nullptr && fgets(line, sizeof(line), stream) != nullptr &&
             std::string(line) == "ready\n";
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

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

fs::path WriteScript(const Situation& situation) {
  fs::path dir = fs::temp_directory_path() / fmt::format("pystack_test_{}", getpid());
  fs::create_directories(dir);
  fs::path script = dir / "target.py";
  std::ofstream(script) << situation.script;
  return script;
}

class Interpreter : public ::testing::TestWithParam<std::string> {};

// The main thread's stack once it sits at the situation's line (the target may be between two
// bytecodes of its loop: a few tries find it in time.sleep). Fails the test on a Dump error.
ThreadStack MainThreadAt(pid_t pid, const Situation& situation) {
  ThreadStack main_thread;
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto dumped = Dump(pid);
    EXPECT_TRUE(dumped.ok()) << dumped.error().message;
    if (!dumped.ok()) return main_thread;
    for (ThreadStack& thread : *dumped) {
      if (thread.native_thread_id == pid) main_thread = std::move(thread);
    }
    if (!main_thread.frames.empty() && main_thread.frames[0].line == situation.line) break;
    usleep(10'000);
  }
  return main_thread;
}

void ExpectSituation(const std::string& python, const Situation& situation) {
  SCOPED_TRACE(situation.name);
  fs::path script = WriteScript(situation);
  Target target(python, script);
  ASSERT_TRUE(target.ready()) << python << " did not print ready";
  ThreadStack main_thread = MainThreadAt(target.pid(), situation);
  ASSERT_EQ(main_thread.native_thread_id, target.pid()) << "no thread with the main's native id";
  ASSERT_FALSE(main_thread.error) << main_thread.error->message;
  ASSERT_EQ(main_thread.frames.size(), situation.depth);
  EXPECT_EQ(main_thread.frames[0].file, script.string());
  EXPECT_EQ(main_thread.frames[0].function, situation.function);
  EXPECT_EQ(main_thread.frames[0].line, situation.line);
  EXPECT_EQ(main_thread.frames.back().function, "<module>");
  fs::remove_all(script.parent_path());
}

TEST_P(Interpreter, MainThreadSitsInWhereAmI) {
  const std::string& python = GetParam();
  if (!fs::exists(python)) GTEST_SKIP() << python << " is not installed here";
  ExpectSituation(python, kSleepInFunction);
}

TEST_P(Interpreter, Situations) {
  const std::string& python = GetParam();
  if (!fs::exists(python)) GTEST_SKIP() << python << " is not installed here";
  for (const Situation& situation : kSituations) ExpectSituation(python, situation);
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

TEST(Dump, NonPythonProcessIsOneLineNotFound) {
  auto dumped = Dump(getpid());
  ASSERT_FALSE(dumped.ok());
  EXPECT_EQ(dumped.error().code, ErrorCode::kNotFound);
  EXPECT_NE(dumped.error().message.find(fmt::format("pid {}", getpid())), std::string::npos);
}

// A reader without the right to the target: kPermission, one line naming the pid. As root, a
// child drops to nobody (65534) and reads our own (root's) process.
TEST(Dump, PermissionDeniedIsOneLine) {
  if (geteuid() != 0) {
    auto dumped = Dump(1);
    ASSERT_FALSE(dumped.ok());
    EXPECT_EQ(dumped.error().code, ErrorCode::kPermission) << dumped.error().message;
    return;
  }
  pid_t target = getpid();
  int verdict[2];
  ASSERT_EQ(pipe(verdict), 0);
  pid_t child = fork();
  if (child == 0) {
    close(verdict[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    auto dumped = Dump(target);
    int value = 0;
    Status read = ProcessMemory(target).Read(reinterpret_cast<uint64_t>(&value), &value, 4);
    std::string message = fmt::format(
        "{}|{}|{}|{}", !dumped.ok() && dumped.error().code == ErrorCode::kPermission ? 1 : 0,
        !read.ok() && read.error().code == ErrorCode::kPermission ? 1 : 0,
        dumped.ok() ? "" : dumped.error().message, read.ok() ? "" : read.error().message);
    if (write(verdict[1], message.data(), message.size()) < 0) _exit(3);
    _exit(0);
  }
  close(verdict[1]);
  std::string message(1024, '\0');
  ssize_t n = read(verdict[0], message.data(), message.size());
  close(verdict[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 2) GTEST_SKIP() << "setuid(65534) refused here";
  message.resize(n > 0 ? static_cast<size_t>(n) : 0);
  EXPECT_TRUE(message.starts_with("1|1|")) << message;
  EXPECT_NE(message.find(fmt::format("pid {}: may not read", target)), std::string::npos)
      << message;
}

TEST(Dump, GoneProcessIsNotFound) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  auto dumped = Dump(child);
  ASSERT_FALSE(dumped.ok());
  EXPECT_EQ(dumped.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(dumped.error().message, fmt::format("pid {}: no such process", child));
}

TEST(ProcessMemory, GoneProcessIsNotFound) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  int value = 0;
  Status read = ProcessMemory(child).Read(0x1000, &value, sizeof(value));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, ErrorCode::kNotFound) << read.error().message;
}

// An address space of random bytes (the same bytes for the same address), with some words set.
class FakeMemory final : public MemoryReader {
 public:
  explicit FakeMemory(uint64_t seed) : seed_(seed) {}
  void Set(uint64_t address, uint64_t value) { words_[address] = value; }
  Status Read(uint64_t address, void* out, size_t size) const override {
    if (address < 0x1000) return MakeError(ErrorCode::kIo, "pid 1: unmapped {:#x}", address);
    auto* bytes = static_cast<unsigned char*>(out);
    for (size_t i = 0; i < size; ++i) {
      // splitmix64 of the address: cheap, and the same byte on every read.
      uint64_t z = seed_ + (address + i) * 0x9E3779B97F4A7C15ULL;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      z ^= z >> 31;
      // Small values often, so pointers land in "mapped" memory and lengths look plausible.
      bytes[i] = static_cast<unsigned char>(z % 4 == 0 ? z >> 8 : (z >> 8) % 8);
    }
    for (const auto& [at, value] : words_) {
      for (size_t i = 0; i < 8; ++i) {
        if (at + i >= address && at + i < address + size) {
          bytes[at + i - address] = static_cast<unsigned char>(value >> (8 * i));
        }
      }
    }
    return OkStatus();
  }

 private:
  uint64_t seed_;
  std::map<uint64_t, uint64_t> words_;
};

TEST(WalkThreads, RandomMemoryNeverCrashesOrHangs) {
  for (int minor : {8, 10, 11, 12}) {
    PythonProcess process{1, *BuiltinLayout(minor), 0x10000, "fake"};
    for (uint64_t seed = 0; seed < 50; ++seed) {
      FakeMemory memory(seed);
      auto threads = WalkThreads(memory, process);  // any outcome but a crash or a hang
      if (threads.ok()) {
        EXPECT_LE(threads->size(), 4096u);
      }
    }
  }
}

// Frames owned by the C stack (3.12+) are skipped without reading a code object, so these
// chains test the loop guards alone.
std::vector<ThreadStack> WalkChain(const std::vector<uint64_t>& frames, uint64_t last_back) {
  Layout layout = *BuiltinLayout(12);
  PythonProcess process{1, layout, 0x10000, "fake"};
  FakeMemory memory(7);
  constexpr uint64_t kInterp = 0x20000, kThread = 0x30000, kCFrame = 0x38000;
  memory.Set(0x10000 + layout.runtime_interp_head, kInterp);
  memory.Set(kInterp + layout.interp_next, 0);
  memory.Set(kInterp + layout.interp_tstate_head, kThread);
  memory.Set(kThread + layout.tstate_next, 0);
  memory.Set(kThread + layout.tstate_frame, kCFrame);
  memory.Set(kCFrame + layout.cframe_current, frames[0]);
  for (size_t i = 0; i < frames.size(); ++i) {
    memory.Set(frames[i] + *layout.frame_owner, 3);
    memory.Set(frames[i] + layout.frame_back, i + 1 < frames.size() ? frames[i + 1] : last_back);
  }
  auto threads = WalkThreads(memory, process);
  EXPECT_TRUE(threads.ok()) << threads.error().message;
  return threads.ok() ? *threads : std::vector<ThreadStack>{};
}

TEST(WalkThreads, FrameCyclesAreTornReads) {
  for (auto [frames, wanted] : {
           std::pair{std::vector<uint64_t>{0x40000}, "frame is its own parent"},
           std::pair{std::vector<uint64_t>{0x40000, 0x41000}, "longer than 4096"},
       }) {
    auto threads = WalkChain(frames, frames[0]);
    ASSERT_EQ(threads.size(), 1u);
    ASSERT_TRUE(threads[0].error);
    EXPECT_EQ(threads[0].error->code, ErrorCode::kParse);
    EXPECT_NE(threads[0].error->message.find("pid 1: torn or invalid read"), std::string::npos);
    EXPECT_NE(threads[0].error->message.find(wanted), std::string::npos)
        << threads[0].error->message;
  }
  auto ended = WalkChain({0x40000, 0x41000}, 0);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_FALSE(ended[0].error);
}

TEST(MinorFromFileName, Names) {
  EXPECT_EQ(MinorFromFileName("/usr/bin/python3.11"), 11);
  EXPECT_EQ(MinorFromFileName("/x/lib/libpython3.12.so.1.0"), 12);
  EXPECT_EQ(MinorFromFileName("/x/lib/libpython3.so"), std::nullopt);
  EXPECT_EQ(MinorFromFileName("/x/bin/python3.13t"), std::nullopt);
  EXPECT_EQ(MinorFromFileName("/usr/bin/bash"), std::nullopt);
}

TEST(ParseMaps, LinesAndJunk) {
  auto maps = ParseMaps(
      "00400000-00420000 r--p 00000000 08:01 123  /usr/bin/python3.11\n"
      "garbage\n"
      "7f00-7f10 rw-p 00001000 00:00 0\n");
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_EQ(maps[0].start, 0x400000u);
  EXPECT_EQ(maps[0].path, "/usr/bin/python3.11");
  EXPECT_EQ(maps[1].offset, 0x1000u);
  EXPECT_EQ(maps[1].path, "");
}

TEST(LineTable, HostileTablesEndSafely) {
  // A truncated long-form entry, a byte that is not an entry start, and an empty table.
  EXPECT_EQ(LineForInstruction(LineTable::kLocations311, std::string_view("\xf0\xff", 2), 1, 0),
            std::nullopt);
  EXPECT_EQ(LineForInstruction(LineTable::kLocations311, std::string_view("\x01", 1), 1, 0),
            std::nullopt);
  EXPECT_EQ(LineForInstruction(LineTable::kLinetable310, "", 1, 0), std::nullopt);
  EXPECT_EQ(LineForInstruction(LineTable::kLnotab, "", 5, 3), 5);
}

}  // namespace
}  // namespace stallscope::pystack
