#include "pystack/stack_reader.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "pystack_fake_memory.h"

namespace stallscope::pystack {
namespace {

using testing::AllLayouts;
using testing::FakeFrame;
using testing::FakeImage;
using testing::FakeMemory;
using testing::FakePython;

std::string Name(const Layout& layout) { return fmt::format("3.{}", layout.minor); }

// model.py: Model.forward (line 10 + 3) called from <module> (line 1 + 2), as the main thread.
struct TwoFrames {
  explicit TwoFrames(const Layout& layout) : python(layout, getpid()) {
    forward = python.AddCode("model.py", "forward", "Model.forward", 10, 3);
    module = python.AddCode("model.py", "<module>", "<module>", 1, 2);
    python.AddThread(getpid(), {{forward, 5}, {module, 2}});
    image = python.Build();
  }
  StackReader Reader() const {
    FakeMemory memory = image.Memory();
    return StackReader(image.process, memory.Share());
  }
  FakePython python;
  size_t forward = 0, module = 0;
  FakeImage image;
};

TEST(StackReader, NamesFramesOfEveryLayout) {
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    TwoFrames fake(layout);
    StackReader reader = fake.Reader();
    auto stack = reader.Sample(getpid());
    ASSERT_TRUE(stack.ok()) << stack.error().message;
    ASSERT_EQ(stack->frames.size(), 2u);
    EXPECT_EQ(stack->native_thread_id, getpid());
    EXPECT_FALSE(stack->truncated);
    EXPECT_EQ(stack->frames[0].file, "model.py");
    EXPECT_EQ(stack->frames[0].function, layout.minor >= 11 ? "Model.forward" : "forward");
    EXPECT_EQ(stack->frames[0].line, 13);
    EXPECT_EQ(stack->frames[1].function, "<module>");
    EXPECT_EQ(stack->frames[1].line, 3);
    EXPECT_EQ(reader.stats().samples, 1);
    EXPECT_EQ(reader.stats().code_cache_misses, 2);
    EXPECT_EQ(reader.stats().torn, 0);
  }
}

// The second sample reads no string and no line table: every code object is a cache hit, checked
// in one batch. The frames come in one read: 3.11+ with the stack chunk, 3.8-3.10 as a batch of
// the addresses the first sample found.
TEST(StackReader, SecondSampleHitsTheCodeCache) {
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    TwoFrames fake(layout);
    StackReader reader = fake.Reader();
    ASSERT_TRUE(reader.Sample(getpid()).ok());
    int64_t reads_before = reader.stats().reads;
    auto again = reader.Sample(getpid());
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ(again->frames[0].line, 13);
    EXPECT_EQ(reader.stats().code_cache_hits, 2);
    EXPECT_EQ(reader.stats().code_cache_misses, 2);
    // The main thread's state (known from the first sample: no interpreter or thread list) +
    // (its pthread's tid) + (cframe) + frames + one code batch.
    int64_t frame_reads = 1;
    int64_t pthread_read = layout.minor <= 10 ? 1 : 0;
    int64_t cframe_read = layout.frame_model == FrameModel::kCFrame ? 1 : 0;
    EXPECT_EQ(reader.stats().reads - reads_before,
              1 + cframe_read + pthread_read + frame_reads + 1);
  }
}

// The main thread's state is read alone from the second sample on, and only while it still
// names the main thread: another thread's tid there (a reused address) means a full search.
TEST(StackReader, TheMainThreadsStateIsCheckedBeforeItIsReused) {
  for (const Layout& layout : AllLayouts()) {
    if (!layout.tstate_native_thread_id) continue;  // 3.8-3.10: the pthread's tid, same check
    SCOPED_TRACE(Name(layout));
    TwoFrames fake(layout);
    FakeMemory memory = fake.image.Memory();
    StackReader reader(fake.image.process, memory.Share());
    ASSERT_TRUE(reader.Sample(getpid()).ok());
    const int64_t other_tid = getpid() + 1;
    ASSERT_TRUE(memory.Write(fake.image.tstates[0] + *layout.tstate_native_thread_id, &other_tid,
                             sizeof(pid_t)));
    auto gone = reader.Sample(getpid());
    ASSERT_FALSE(gone.ok());
    EXPECT_EQ(gone.error().code, ErrorCode::kNotFound) << gone.error().message;
    auto other = reader.Sample(static_cast<pid_t>(other_tid));
    ASSERT_TRUE(other.ok()) << other.error().message;  // found by the full search
    EXPECT_EQ(other->frames.size(), 2u);
  }
}

// A code object freed and another made at the same address: the names change, so the cache
// entry is read afresh instead of reporting the old function.
TEST(StackReader, CodeObjectReusedAtTheSameAddressIsReadAgain) {
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    FakePython python(layout, getpid());
    size_t old_code = python.AddCode("old.py", "old", "Old.old", 10, 1);
    size_t new_code = python.AddCode("new.py", "new", "New.new", 20, 2);
    python.AddThread(getpid(), {{old_code, 0}});
    FakeImage image = python.Build();
    FakeMemory memory = image.Memory();
    StackReader reader(image.process, memory.Share());
    auto first = reader.Sample(getpid());
    ASSERT_TRUE(first.ok()) << first.error().message;
    EXPECT_EQ(first->frames[0].file, "old.py");
    // Copy the new code object's fields over the old one's.
    std::vector<uint8_t> fields(256);
    uint64_t begin = layout.object_type;
    ASSERT_TRUE(
        image.Memory()
            .Read(image.codes[new_code] + begin, fields.data(), layout.code_linetable + 8 - begin)
            .ok());
    ASSERT_TRUE(memory.Write(image.codes[old_code] + begin, fields.data(),
                             layout.code_linetable + 8 - begin));
    int32_t first_line = 20;
    ASSERT_TRUE(memory.Write(image.codes[old_code] + layout.code_firstlineno, &first_line, 4));
    auto second = reader.Sample(getpid());
    ASSERT_TRUE(second.ok()) << second.error().message;
    EXPECT_EQ(second->frames[0].file, "new.py");
    EXPECT_EQ(second->frames[0].function, layout.minor >= 11 ? "New.new" : "new");
    EXPECT_EQ(second->frames[0].line, 22);
    EXPECT_EQ(reader.stats().code_cache_misses, 2);
    EXPECT_EQ(reader.stats().code_cache_hits, 0);
  }
}

TEST(StackReader, MaxFramesKeepsTheInnermostAndSaysTruncated) {
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    FakePython python(layout, getpid());
    std::vector<FakeFrame> frames;
    for (int i = 0; i < 10; ++i) {
      frames.push_back(
          {python.AddCode("deep.py", fmt::format("f{}", i), fmt::format("f{}", i), i * 10, 0), 0});
    }
    python.AddThread(getpid(), frames);
    FakeImage image = python.Build();
    StackReader reader(image.process, image.Memory().Share());
    auto cut = reader.Sample(getpid(), 3);
    ASSERT_TRUE(cut.ok()) << cut.error().message;
    ASSERT_EQ(cut->frames.size(), 3u);
    EXPECT_TRUE(cut->truncated);
    EXPECT_EQ(cut->frames[0].function, "f0");
    EXPECT_EQ(cut->frames[2].function, "f2");
    auto whole = reader.Sample(getpid(), 10);
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(whole->frames.size(), 10u);
    EXPECT_FALSE(whole->truncated);
  }
}

// 3.12+ shim frames (owned by the C stack) are skipped and do not count as frames.
TEST(StackReader, ShimFramesAreSkipped) {
  for (const Layout& layout : AllLayouts()) {
    if (!layout.frame_owner) continue;
    SCOPED_TRACE(Name(layout));
    FakePython python(layout, getpid());
    size_t f = python.AddCode("a.py", "f", "f", 1, 0);
    python.AddThread(getpid(), {{f, 0}, {0, 0, true}, {f, 0}, {0, 0, true}});
    FakeImage image = python.Build();
    StackReader reader(image.process, image.Memory().Share());
    auto stack = reader.Sample(getpid(), 2);
    ASSERT_TRUE(stack.ok()) << stack.error().message;
    EXPECT_EQ(stack->frames.size(), 2u);
    EXPECT_TRUE(stack->truncated);  // a shim frame is left
  }
}

// A generator's frame links to its caller only while it runs: a chain that ends in one is a
// stale current frame read while the thread left the generator (seen live: 1 sample in ~100 of
// a generator expression on 3.11), so the sample is torn; inside a chain it is an ordinary frame.
TEST(StackReader, AChainEndingInAGeneratorsFrameIsTorn) {
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    FakePython python(layout, getpid());
    size_t f = python.AddCode("a.py", "f", "f", 1, 0);
    size_t g = python.AddCode("a.py", "<genexpr>", "f.<locals>.<genexpr>", 5, 0);
    FakeFrame gen{g, 0, false, true};
    python.AddThread(getpid(), {gen, {f, 0}});
    FakeImage running = python.Build();
    StackReader reader(running.process, running.Memory().Share());
    auto stack = reader.Sample(getpid());
    ASSERT_TRUE(stack.ok()) << stack.error().message;
    EXPECT_EQ(stack->frames.size(), 2u);

    FakePython stale(layout, getpid());
    stale.AddCode("a.py", "f", "f", 1, 0);
    g = stale.AddCode("a.py", "<genexpr>", "f.<locals>.<genexpr>", 5, 0);
    stale.AddThread(getpid(), {{g, 0, false, true}});
    FakeImage torn = stale.Build();
    StackReader torn_reader(torn.process, torn.Memory().Share());
    auto none = torn_reader.Sample(getpid());
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.error().code, ErrorCode::kIo);
    EXPECT_NE(none.error().message.find("the outermost frame is a generator's"), std::string::npos)
        << none.error().message;
    EXPECT_EQ(torn_reader.stats().torn, 1);
  }
}

// Sample(tid) of a second thread; 3.8-3.10 match it through glibc's pthread (a real thread here,
// since its tid is checked against /proc/PID/task).
TEST(StackReader, SecondThreadByItsTid) {
  std::atomic<pid_t> second_tid{0};
  std::atomic<bool> done{false};
  std::thread second([&] {
    second_tid = gettid();
    while (!done) usleep(1000);
  });
  while (second_tid == 0) usleep(1000);
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    FakePython python(layout, getpid());
    size_t main_code = python.AddCode("main.py", "main", "main", 1, 0);
    size_t work = python.AddCode("work.py", "work", "Worker.work", 5, 1);
    python.AddThread(getpid(), {{main_code, 0}});
    python.AddThread(second_tid, {{work, 0}, {main_code, 0}});
    FakeImage image = python.Build();
    StackReader reader(image.process, image.Memory().Share());
    for (int round = 0; round < 2; ++round) {  // the second through the pthread cache
      auto stack = reader.Sample(second_tid);
      ASSERT_TRUE(stack.ok()) << stack.error().message;
      EXPECT_EQ(stack->native_thread_id, second_tid);
      ASSERT_EQ(stack->frames.size(), 2u);
      EXPECT_EQ(stack->frames[0].line, 6);
    }
    auto all = reader.SampleAll();
    ASSERT_TRUE(all.ok()) << all.error().message;
    ASSERT_EQ(all->threads.size(), 2u);
    EXPECT_EQ(all->threads[0].native_thread_id, getpid());
    EXPECT_EQ(all->threads[1].native_thread_id, second_tid);
    auto none = reader.Sample(12345678);
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
    EXPECT_EQ(none.error().message,
              fmt::format("pid {}: no Python thread with tid 12345678", getpid()));
  }
  done = true;
  second.join();
}

// The target changes under the walk: before read k (for every k a clean sample makes), frame 1's
// back pointer goes to unmapped memory, its code pointer to a thread state (not a code object),
// or the frame to itself. Each sample is either right (the change came after the bytes were
// read) or a counted torn read (kIo); never a garbage frame. Cold (first sample) and warm (code
// cache and last chain known).
void ExpectTornOrRight(const Layout& layout, int change, bool warm) {
  SCOPED_TRACE(fmt::format("{} change {} warm {}", Name(layout), change, warm));
  FakePython python(layout, getpid());
  size_t a = python.AddCode("t.py", "a", "a", 1, 0);
  size_t b = python.AddCode("t.py", "b", "b", 2, 0);
  size_t c = python.AddCode("t.py", "c", "c", 3, 0);
  python.AddThread(getpid(), {{a, 0}, {b, 0}, {c, 0}});
  FakeImage image = python.Build();
  int64_t clean_reads = 0;
  {
    StackReader reader(image.process, image.Memory().Share());
    ASSERT_TRUE(reader.Sample(getpid()).ok());
    clean_reads = reader.stats().reads;
  }
  int torn = 0;
  for (int64_t k = 1; k <= clean_reads; ++k) {
    FakeMemory memory = image.Memory();
    StackReader reader(image.process, memory.Share());
    if (warm) {
      ASSERT_TRUE(reader.Sample(getpid()).ok());
    }
    const uint64_t frame = image.frames[0][1];
    const int64_t at = memory.reads() + k;
    memory.OnRead([&, at](int64_t n) {
      if (n != at) return;
      if (change == 0) memory.Write64(frame + layout.frame_back, 0xdead0000);
      if (change == 1) memory.Write64(frame + layout.frame_code, image.tstates[0]);
      if (change == 2) memory.Write64(frame + layout.frame_back, frame);
    });
    auto stack = reader.Sample(getpid());
    if (!stack.ok()) {
      EXPECT_EQ(stack.error().code, ErrorCode::kIo) << stack.error().message;
      EXPECT_NE(stack.error().message.find("torn or invalid read"), std::string::npos);
      EXPECT_EQ(reader.stats().torn, 1);
      ++torn;
      continue;
    }
    ASSERT_EQ(stack->frames.size(), 3u);
    EXPECT_EQ(stack->frames[1].function, "b");
    EXPECT_EQ(reader.stats().torn, 0);
  }
  EXPECT_GT(torn, 0);
}

TEST(StackReader, TornReadsAreCountedNeverGarbage) {
  for (const Layout& layout : AllLayouts()) {
    for (int change = 0; change < 3; ++change) {
      ExpectTornOrRight(layout, change, false);
      ExpectTornOrRight(layout, change, true);
    }
  }
}

// The stack changed between two samples (frame b returned): the batch fetched from the last
// chain holds b's stale bytes, but the walk follows the back pointers it reads.
TEST(StackReader, ChangedChainIsFollowedNotTheLastOne) {
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    FakePython python(layout, getpid());
    size_t a = python.AddCode("t.py", "a", "a", 1, 0);
    size_t b = python.AddCode("t.py", "b", "b", 2, 0);
    size_t c = python.AddCode("t.py", "c", "c", 3, 0);
    python.AddThread(getpid(), {{a, 0}, {b, 0}, {c, 0}});
    FakeImage image = python.Build();
    FakeMemory memory = image.Memory();
    StackReader reader(image.process, memory.Share());
    ASSERT_TRUE(reader.Sample(getpid()).ok());
    memory.Write64(image.frames[0][0] + layout.frame_back, image.frames[0][2]);
    auto stack = reader.Sample(getpid());
    ASSERT_TRUE(stack.ok()) << stack.error().message;
    ASSERT_EQ(stack->frames.size(), 2u);
    EXPECT_EQ(stack->frames[0].function, "a");
    EXPECT_EQ(stack->frames[1].function, "c");
  }
}

TEST(StackReader, RandomMemoryNeverCrashesOrHangs) {
  for (const Layout& layout : AllLayouts()) {
    PythonProcess process = testing::MakeProcess(1, layout, 0x10000);
    for (uint64_t seed = 0; seed < 20; ++seed) {
      // Any outcome but a crash or a hang. SampleAll walks threads until the process budget is
      // spent: a smaller one than the tool's (~70,000 random reads a call) keeps this quick.
      const ReaderBudget budget{.thread_states = 512, .frames_per_process = 2048};
      StackReader reader(process, std::make_unique<testing::RandomMemory>(seed), budget);
      auto threads = reader.SampleAll();
      if (threads.ok()) {
        EXPECT_LE(threads->threads.size(), budget.thread_states);
      }
      auto stack = reader.Sample(1);
      if (!stack.ok()) {
        EXPECT_NE(stack.error().code, ErrorCode::kInternal);
      }
    }
  }
}

// Shim frames (3.12) are skipped without reading a code object, so these chains test the loop
// guards alone.
std::vector<ThreadStack> WalkChain(const std::vector<uint64_t>& frames, uint64_t last_back) {
  Layout layout = *BuiltinLayout(12);
  PythonProcess process = testing::MakeProcess(1, layout, 0x10000);
  auto memory = std::make_unique<testing::RandomMemory>(7);
  constexpr uint64_t kInterp = 0x20000, kThread = 0x30000, kCFrame = 0x38000;
  memory->Set(0x10000 + layout.runtime_interp_head, kInterp);
  memory->Set(kInterp + layout.interp_next, 0);
  memory->Set(kInterp + layout.interp_tstate_head, kThread);
  memory->Set(kThread + layout.tstate_next, 0);
  memory->Set(kThread + layout.tstate_frame, kCFrame);
  memory->Set(kThread + *layout.tstate_datastack_chunk, 0);
  memory->Set(kCFrame + layout.cframe_current, frames[0]);
  for (size_t i = 0; i < frames.size(); ++i) {
    memory->Set(frames[i] + *layout.frame_owner, 3);
    memory->Set(frames[i] + layout.frame_back, i + 1 < frames.size() ? frames[i + 1] : last_back);
  }
  StackReader reader(process, std::move(memory));
  auto threads = reader.SampleAll();
  EXPECT_TRUE(threads.ok()) << threads.error().message;
  return threads.ok() ? threads->threads : std::vector<ThreadStack>{};
}

TEST(StackReader, FrameCyclesAreTornReads) {
  for (const auto& frames :
       {std::vector<uint64_t>{0x40000}, std::vector<uint64_t>{0x40000, 0x41000},
        std::vector<uint64_t>{0x40000, 0x41000, 0x42000, 0x43000, 0x44000}}) {
    auto threads = WalkChain(frames, frames[frames.size() / 2]);
    ASSERT_EQ(threads.size(), 1u);
    ASSERT_TRUE(threads[0].error);
    EXPECT_EQ(threads[0].error->code, ErrorCode::kIo);
    EXPECT_EQ(threads[0].error->message, "pid 1: torn or invalid read: frame chain has a cycle");
  }
  auto ended = WalkChain({0x40000, 0x41000}, 0);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_FALSE(ended[0].error);
}

// A process gone or unreadable is not a torn read: the error passes through, uncounted.
TEST(StackReader, GoneProcessIsNotFoundNotTorn) {
  class Gone final : public MemoryReader {
   public:
    [[nodiscard]] Status Read(uint64_t, void*, size_t) const override {
      return MakeError(ErrorCode::kNotFound, "pid 1: no such process");
    }
  };
  StackReader reader(testing::MakeProcess(1, *BuiltinLayout(11), 0x10000),
                     std::make_unique<Gone>());
  auto stack = reader.Sample(1);
  ASSERT_FALSE(stack.ok());
  EXPECT_EQ(stack.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(stack.error().message, "pid 1: no such process");
  EXPECT_EQ(reader.stats().torn, 0);
  EXPECT_EQ(reader.stats().samples, 0);
}

// --- Issue 40: the job is untrusted input (forged interpreters, shared line tables) ---

uint64_t Word(const FakeMemory& memory, uint64_t address) {
  uint64_t value = 0;
  EXPECT_TRUE(memory.Read(address, &value, 8).ok());
  return value;
}

// A real main thread `depth` frames deep, and a reader whose runtime names `lists` (forged by
// ForgedMemory) instead of the real interpreter: every forged thread state points at the real
// thread's frames, as probe P01 forges them with ctypes.
struct Forged {
  Forged(const Layout& layout, testing::ForgedLists lists, size_t depth)
      : python(layout, getpid()) {
    size_t code = python.AddCode("/app/forge.py", "rec", "rec", 10, 1);
    python.AddThread(getpid(), std::vector<FakeFrame>(depth, FakeFrame{code, 0}));
    image = python.Build();
    FakeMemory real = image.Memory();
    lists.frame = Word(real, image.tstates[0] + layout.tstate_frame);
    if (layout.tstate_datastack_chunk)
      lists.chunk = Word(real, image.tstates[0] + *layout.tstate_datastack_chunk);
    auto memory = std::make_unique<testing::ForgedMemory>(real.Share(), layout, lists);
    memory->Set(image.process.runtime_address + layout.runtime_interp_head, memory->Interp(0));
    forged = memory.get();
    reader = std::make_unique<StackReader>(image.process, std::move(memory));
  }
  FakePython python;
  FakeImage image;
  testing::ForgedMemory* forged = nullptr;
  std::unique_ptr<StackReader> reader;
};

// P01: 64 forged interpreters all name one list of 100 thread states. Each thread state is read
// once (before: 64 x 100 threads, each walked), and the cut says why.
TEST(StackReader, ForgedInterpretersSharingOneThreadListAreReadOnce) {
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    Forged fake(layout, {.interpreters = 64, .states = 100, .shared = true}, 3);
    auto all = fake.reader->SampleAll(StackReader::kMaxFrames);
    ASSERT_TRUE(all.ok()) << all.error().message;
    EXPECT_EQ(all->threads.size(), 100u);
    EXPECT_NE(all->cut.find("63 thread lists met a thread state already read"), std::string::npos)
        << all->cut;
    if (layout.tstate_native_thread_id) {
      ASSERT_FALSE(all->threads.empty());
      EXPECT_EQ(all->threads[0].frames.size(), 3u);
      EXPECT_EQ(all->threads[0].frames[0].function, "rec");
    }
  }
}

// A thread list whose last state links back into it: read once (before: 4096 thread states,
// then "thread list does not end" and no stack at all).
TEST(StackReader, ThreadListThatLoopsIsReadOnce) {
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    Forged fake(layout, {.states = 10, .loop_to = 3}, 2);
    auto all = fake.reader->SampleAll();
    ASSERT_TRUE(all.ok()) << all.error().message;
    EXPECT_EQ(all->threads.size(), 10u);
    EXPECT_EQ(all->cut,
              "1 thread list met a thread state already read (a list that loops, or one shared "
              "by interpreters): read once");
  }
}

// P01/P02: 256 interpreters of 4096 thread states each (1,048,576), each state pointing at a
// real 200-deep stack. SampleAll reads at most ReaderBudget{}.thread_states states and returns
// at most frames_per_process frames (before: every state read, 4096 x 200 frames per
// interpreter); a search for a thread that is not there reads no more than the budget.
TEST(StackReader, AMillionThreadStatesCostTheBudgetNotMore) {
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    Forged fake(layout, {.interpreters = 256, .states = 4096}, 200);
    StackReader& reader = *fake.reader;
    auto all = reader.SampleAll(StackReader::kMaxFrames);
    ASSERT_TRUE(all.ok()) << all.error().message;
    size_t frames = 0;
    for (const ThreadStack& t : all->threads) frames += t.frames.size();
    EXPECT_LE(frames, ReaderBudget{}.frames_per_process);
    EXPECT_LE(all->threads.size(), ReaderBudget{}.thread_states);
    EXPECT_TRUE(all->cut.starts_with("the thread lists hold more than 4096 thread states"))
        << all->cut;
    // 4096 thread states of 16 interpreters, the frames budget (3.8-3.10: a read per frame
    // object; 3.11+: one per chunk) and a code batch per walk.
    EXPECT_LT(reader.stats().reads, 4096 + 2 * 16 + 65536 + 2 * 4096);
    const int64_t before = reader.stats().reads;
    auto none = reader.Sample(getpid());  // the main thread's tid is in no forged state
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
    EXPECT_EQ(none.error().message,
              fmt::format("pid {}: no Python thread with tid {} in the first 4096 thread states",
                          getpid(), getpid()));
    EXPECT_LE(reader.stats().reads - before, 4096 + 2 * 16 + 1);
  }
}

// The main thread is walked first, wherever it is in the list (CPython puts new threads at the
// head, so the main thread is last): a budget spent by other threads never cuts it.
TEST(StackReader, SampleAllWalksTheMainThreadFirst) {
  for (const Layout& layout : AllLayouts()) {
    if (!layout.tstate_native_thread_id) continue;  // 3.8-3.10: tids through real pthreads
    SCOPED_TRACE(Name(layout));
    FakePython python(layout, getpid());
    size_t code = python.AddCode("t.py", "f", "f", 1, 0);
    python.AddThread(getpid() + 1, {{code, 0}});
    python.AddThread(getpid() + 2, {{code, 0}});
    python.AddThread(getpid(), {{code, 0}, {code, 0}});
    FakeImage image = python.Build();
    StackReader reader(image.process, image.Memory().Share());
    auto all = reader.SampleAll();
    ASSERT_TRUE(all.ok()) << all.error().message;
    ASSERT_EQ(all->threads.size(), 3u);
    EXPECT_EQ(all->threads[0].native_thread_id, getpid());
    EXPECT_EQ(all->threads[0].frames.size(), 2u);
    EXPECT_EQ(all->threads[1].native_thread_id, getpid() + 1);
    EXPECT_EQ(all->threads[2].native_thread_id, getpid() + 2);
  }
}

// glibc's count of bytes the heap has handed out (0 under ASan, which keeps its own heap).
size_t HeapInUse() { return mallinfo2().uordblks; }

// P03: 64 code objects naming one 1 MiB line table (`code.replace(co_linetable=big)`): the cache
// holds it once (before: a copy per code object, 64 MiB).
TEST(StackReader, CodeObjectsSharingOneLineTableHoldItOnce) {
  constexpr size_t kTable = size_t{1} << 20;
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    FakePython python(layout, getpid());
    python.ShareLineTables();
    std::vector<FakeFrame> frames;
    for (int i = 0; i < 64; ++i) {
      frames.push_back({python.AddCode("lt.py", fmt::format("g{}", i), fmt::format("g{}", i),
                                       100 + i, 2, kTable)});
    }
    python.AddThread(getpid(), frames);
    FakeImage image = python.Build();
    StackReader reader(image.process, image.Memory().Share());
    const size_t heap = HeapInUse();
    for (int round = 0; round < 2; ++round) {
      auto stack = reader.Sample(getpid(), StackReader::kMaxFrames);
      ASSERT_TRUE(stack.ok()) << stack.error().message;
      ASSERT_EQ(stack->frames.size(), 64u);
      EXPECT_EQ(stack->frames[5].line, 105 + 2);  // the shared table: +2 from each first line
    }
    EXPECT_LT(reader.code_cache_bytes(), kTable + 64 * 16);
    EXPECT_LT(HeapInUse() - std::min(heap, HeapInUse()), 4 * kTable);
  }
}

// 18 code objects with a 64 KiB line table each and a cache of 512 KiB: the cache keeps what its
// byte budget holds and reads the others again when a line is wanted; every line is still right.
TEST(StackReader, LineTablesPastTheCacheBudgetAreReadWhenNeeded) {
  constexpr size_t kTable = size_t{64} << 10;
  const ReaderBudget budget{.code_cache_bytes = size_t{512} << 10};
  for (const Layout& layout : AllLayouts()) {
    SCOPED_TRACE(Name(layout));
    FakePython python(layout, getpid());
    std::vector<FakeFrame> frames;
    for (int i = 0; i < 18; ++i) {
      frames.push_back({python.AddCode("lt.py", "g", "g", 100 * i, i % 7, kTable)});
    }
    python.AddThread(getpid(), frames);
    FakeImage image = python.Build();
    FakeMemory memory = image.Memory();
    StackReader reader(image.process, memory.Share(), budget);
    for (int32_t unit : {0, 1, 1}) {  // a new instruction, then the same one again
      for (size_t i = 0; i < frames.size(); ++i) {
        const uint64_t frame = image.frames[0][i];
        if (layout.frame_model == FrameModel::kFrameObject) {
          const int32_t lasti = layout.minor >= 10 ? unit : 2 * unit;
          memory.Write(frame + layout.frame_instr, &lasti, 4);
        } else {
          memory.Write64(frame + layout.frame_instr,
                         image.codes[i] + layout.code_adaptive + 2 * static_cast<uint64_t>(unit));
        }
      }
      auto stack = reader.Sample(getpid(), StackReader::kMaxFrames);
      ASSERT_TRUE(stack.ok()) << stack.error().message;
      ASSERT_EQ(stack->frames.size(), 18u);
      for (size_t i = 0; i < 18; ++i) {
        EXPECT_EQ(stack->frames[i].line, static_cast<int>(100 * i + i % 7)) << i;
      }
    }
    EXPECT_LE(reader.code_cache_bytes(), budget.code_cache_bytes + kTable);
  }
}

// Names of 4,000 bytes 4,096 frames deep (16 MB of names): one walk returns at most
// kNameBytesPerWalk of them, the innermost frames, and says it was cut.
TEST(StackReader, LongNamesAreCutAtTheWalksByteBudget) {
  const Layout layout = *BuiltinLayout(11);
  FakePython python(layout, getpid());
  size_t code = python.AddCode(std::string(4000, 'f'), "g", "g", 1, 0);
  python.AddThread(getpid(), std::vector<FakeFrame>(4096, FakeFrame{code, 0}));
  FakeImage image = python.Build();
  StackReader reader(image.process, image.Memory().Share());
  auto stack = reader.Sample(getpid(), StackReader::kMaxFrames);
  ASSERT_TRUE(stack.ok()) << stack.error().message;
  EXPECT_TRUE(stack->truncated);
  EXPECT_EQ(stack->frames.size(), ReaderBudget{}.name_bytes_per_walk / 4001);
}

TEST(StackReader, ImplausibleLayoutIsUnsupported) {
  Layout layout = *BuiltinLayout(11);
  layout.frame_instr = 60000;
  StackReader reader(testing::MakeProcess(1, layout, 0x10000),
                     std::make_unique<testing::RandomMemory>(1));
  auto stack = reader.Sample(1);
  ASSERT_FALSE(stack.ok());
  EXPECT_EQ(stack.error().code, ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace stallscope::pystack
