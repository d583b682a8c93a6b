#include "stacks/stack_log.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace stallscope::stacks {
namespace {

std::string Content(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const std::vector<StackFrame> kInner = {
    {"train.py", "heavy_metrics", 141, "probs = logits.softmax(1).cpu().numpy()"},
    {"train.py", "train", 90, "m = heavy_metrics(out)"},
    {"train.py", "<module>", 200, ""}};

TEST(StackLog, SamplesReadBackWithFramesAndStacksInterned) {
  testing::TempDir dir;
  const std::string path = dir.Sub(kStacksFile);
  {
    auto w = StackLogWriter::Open(path, 50, 10);
    ASSERT_TRUE(w.ok()) << w.error().message;
    StackProcess main_process;
    main_process.pid = 42;
    main_process.python = "3.11";
    main_process.binary = "/usr/bin/python3.11";
    w->AddProcess(main_process);
    StackProcess worker;
    worker.pid = 43;
    worker.worker = true;
    worker.forked_from = 42;
    worker.error = "pid 43: may not read";
    w->AddProcess(worker);
    w->AddSample(1000, 42, 42, kInner);
    w->AddSample(2000, 42, 42, kInner);
    w->AddSample(3000, 42, 42, {kInner[1], kInner[2]});
    w->AddTotals(StackTotals{3, 1, 0, 0.25, 90});
    ASSERT_TRUE(w->Flush().ok());
    EXPECT_EQ(w->frames_interned(), 3u);
  }
  const std::string text = Content(path);
  // Each frame and each stack is written once, before the first sample that uses it.
  EXPECT_EQ(text.find("\"frame\":0"), text.rfind("\"frame\":0"));
  EXPECT_NE(text.find("[2000,42,42,0]"), std::string::npos) << text;

  const StackLog log = ReadStackLog(dir.path().string());
  EXPECT_EQ(log.main_hz, 50);
  EXPECT_EQ(log.worker_hz, 10);
  ASSERT_EQ(log.processes.size(), 2u);
  EXPECT_EQ(log.processes[0].python, "3.11");
  EXPECT_TRUE(log.processes[1].worker);
  EXPECT_EQ(log.processes[1].forked_from, 42);
  EXPECT_EQ(log.processes[1].error, "pid 43: may not read");
  ASSERT_EQ(log.frames.size(), 3u);
  EXPECT_EQ(log.frames[0], kInner[0]);
  ASSERT_EQ(log.stacks.size(), 2u);
  EXPECT_EQ(log.stacks[1], (std::vector<uint32_t>{1, 2}));
  ASSERT_EQ(log.samples.size(), 3u);
  EXPECT_EQ(log.samples[2].t_ns, 3000);
  EXPECT_EQ(log.samples[2].stack, 1u);
  ASSERT_TRUE(log.totals);
  EXPECT_EQ(log.totals->torn, 1);
  EXPECT_DOUBLE_EQ(log.totals->cpu_s, 0.25);
  EXPECT_EQ(log.malformed, 0);
  EXPECT_TRUE(log.warnings.empty());
  EXPECT_EQ(log.Process(43)->forked_from, 42);
  EXPECT_EQ(log.Process(7), nullptr);
}

TEST(StackLog, MissingFileIsAnEmptyLogWithoutWarning) {
  testing::TempDir dir;
  const StackLog log = ReadStackLog(dir.path().string());
  EXPECT_TRUE(log.empty());
  EXPECT_TRUE(log.warnings.empty());
}

TEST(StackLog, AFileCutAnywhereKeepsEveryWholeSampleBeforeTheCut) {
  testing::TempDir dir;
  const std::string path = dir.Sub(kStacksFile);
  {
    auto w = StackLogWriter::Open(path, 50, 10);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 20; ++i) {
      w->AddSample(i, 42, 42, i % 2 ? kInner : std::vector{kInner[2]});
    }
    ASSERT_TRUE(w->Flush().ok());
  }
  const std::string whole = Content(path);
  for (size_t cut = 0; cut <= whole.size(); ++cut) {
    std::ofstream(path, std::ios::trunc) << whole.substr(0, cut);
    const StackLog log = ReadStackLog(dir.path().string());
    size_t whole_samples = 0;
    for (size_t pos = 0; (pos = whole.find("\n[", pos)) != std::string::npos; ++pos) {
      const size_t end = whole.find('\n', pos + 1);
      if (end != std::string::npos && end < cut) ++whole_samples;
    }
    ASSERT_EQ(log.samples.size(), whole_samples) << "cut at " << cut;
    EXPECT_EQ(log.malformed, 0) << "cut at " << cut;
  }
}

TEST(StackLog, MalformedLinesAreCountedAndSkipped) {
  testing::TempDir dir;
  std::ofstream(dir.Sub(kStacksFile)) << R"({"stallscope_stacks":1,"hz":50,"worker_hz":10})"
                                         "\n"
                                      << R"({"frame":0,"file":"a.py","function":"f","line":3})"
                                         "\n"
                                      << R"({"frame":5,"file":"b.py"})"
                                         "\n"  // ids need not be consecutive
                                      << R"({"frame":5,"file":"c.py"})"
                                         "\n"  // defined twice: the first stands
                                      << R"({"stack":0,"frames":[0,5]})"
                                         "\n"
                                      << R"({"stack":1,"frames":[9]})"
                                         "\n"  // unknown frame
                                      << "[1,2,3,0]\n"
                                      << "[1,2,3,7]\n"  // unknown stack
                                      << "[1,2,3,1]\n"  // a stack that was dropped
                                      << "[1,\"x\",3,0]\n"
                                      << "not json\n";
  const StackLog log = ReadStackLog(dir.path().string());
  ASSERT_EQ(log.samples.size(), 1u);
  ASSERT_EQ(log.stacks.size(), 1u);
  ASSERT_EQ(log.frames.size(), 2u);
  EXPECT_EQ(log.frames[log.stacks[0][1]].file, "b.py");
  EXPECT_EQ(log.malformed, 3);
  EXPECT_EQ(log.unresolved, 3);
  ASSERT_EQ(log.warnings.size(), 2u);
  EXPECT_NE(log.warnings[0].find("stacks.jsonl: 3 malformed lines skipped"), std::string::npos);
  EXPECT_NE(log.warnings[1].find("stacks.jsonl: 3 stack and sample lines skipped: they name a "
                                 "frame or stack no whole line defines"),
            std::string::npos);
}

// Issue 40 P04: one damaged frame line (frame 0) dropped every later frame, stack and sample
// (ids had to be consecutive): 0 samples. Now only the stacks naming frame 0 and their samples
// go.
TEST(StackLog, ADamagedFrameLineCostsOnlyTheSamplesThatNameIt) {
  testing::TempDir dir;
  const std::string path = dir.Sub(kStacksFile);
  {
    auto w = StackLogWriter::Open(path, 50, 10);
    ASSERT_TRUE(w.ok());
    w->AddSample(1, 42, 42, kInner);                  // frames 0 1 2: stack 0
    w->AddSample(2, 42, 42, {kInner[1], kInner[2]});  // stack 1
    w->AddSample(3, 42, 42, {kInner[2]});             // stack 2
    w->AddSample(4, 42, 42, kInner);                  // stack 0 again
    ASSERT_TRUE(w->Flush().ok());
  }
  std::string text = Content(path);
  const size_t at = text.find(R"({"frame":0,)");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, text.find('\n', at) - at, R"({"frame":0,"file":garbage})");
  std::ofstream(path, std::ios::trunc) << text;
  const StackLog log = ReadStackLog(dir.path().string());
  ASSERT_EQ(log.samples.size(), 2u);
  EXPECT_EQ(log.samples[0].t_ns, 2);
  EXPECT_EQ(log.samples[1].t_ns, 3);
  ASSERT_EQ(log.stacks.size(), 2u);
  const std::vector<uint32_t>& two = log.stacks[log.samples[0].stack];
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(log.frames[two[0]], kInner[1]);
  EXPECT_EQ(log.frames[two[1]], kInner[2]);
  EXPECT_EQ(log.malformed, 1);
  EXPECT_EQ(log.unresolved, 3);  // stack 0 and its two samples
}

// The writer holds at most kMaxFrames frames and kMaxStacks stacks for the run (here a bound of
// 1000): a sample that needs more is not written (the caller counts it), and the file stays
// readable.
TEST(StackLog, TheWriterHoldsAtMostItsBoundOfFrames) {
  constexpr size_t kBound = 1000;
  testing::TempDir dir;
  const std::string path = dir.Sub(kStacksFile);
  auto w = StackLogWriter::Open(path, 50, 10, kBound);
  ASSERT_TRUE(w.ok());
  int64_t written = 0, dropped = 0;
  for (size_t i = 0; i < kBound + 10; ++i) {
    const FrameView frame{"gen.py", "f", static_cast<int>(i + 1)};
    (w->AddSample(static_cast<int64_t>(i), 42, 42, std::span(&frame, 1)) ? written : dropped)++;
  }
  EXPECT_EQ(written, static_cast<int64_t>(kBound));
  EXPECT_EQ(dropped, 10);
  EXPECT_EQ(w->frames_interned(), kBound);
  w->AddTotals(StackTotals{written, 0, 0, 0, 0, dropped});
  ASSERT_TRUE(w->Flush().ok());
  const StackLog log = ReadStackLog(dir.path().string());
  EXPECT_EQ(log.samples.size(), kBound);
  EXPECT_EQ(log.malformed, 0);
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_NE(log.warnings[0].find("10 samples not recorded"), std::string::npos);
}

// Issue 40 "decide": the reader keeps at most its bound of frames and stacks (here 100); the
// lines past it are skipped with a warning, and so are the samples naming them, as they are
// read (a file of 10 M frames then costs diagnose what one at the bound does).
TEST(StackLog, TheReaderKeepsAtMostItsBoundOfFramesAndStacks) {
  testing::TempDir dir;
  {
    std::ofstream out(dir.Sub(kStacksFile));
    out << R"({"stallscope_stacks":1,"hz":50,"worker_hz":10})"
        << "\n";
    for (int i = 0; i < 150; ++i) {
      out << fmt::format(R"({{"frame":{},"file":"g.py","function":"f","line":{}}})", i, i + 1)
          << "\n"
          << fmt::format(R"({{"stack":{},"frames":[{}]}})", i, i) << "\n"
          << fmt::format("[{},42,42,{}]", i, i) << "\n";
    }
  }
  const StackLog log = ReadStackLog(dir.path().string(), 100);
  EXPECT_EQ(log.frames.size(), 100u);
  EXPECT_EQ(log.stacks.size(), 100u);
  ASSERT_EQ(log.samples.size(), 100u);
  EXPECT_EQ(log.samples.back().t_ns, 99);
  EXPECT_EQ(log.malformed, 0);
  EXPECT_EQ(log.unresolved, 50);  // the samples of the 50 stacks past the bound
  ASSERT_EQ(log.warnings.size(), 2u);
  EXPECT_NE(log.warnings[0].find("more than 100 frames or 100 stacks: 100 lines skipped"),
            std::string::npos)
      << log.warnings[0];
}

TEST(IsStallscopeFile, ThePackageWhereverItIsInstalled) {
  for (const char* own :
       {"/work/build/python/stallscope/auto.py",
        "/venv/lib/python3.11/site-packages/stallscope/__init__.py", "stallscope/_hooks.py",
        "/opt/lib/stallscope/python/stallscope/__main__.py"})
    EXPECT_TRUE(IsStallscopeFile(own)) << own;
  for (const char* job : {"/home/u/stallscope/train.py", "/home/u/proj/auto.py", "auto.py",
                          "/home/u/mystallscope/auto.py", "/x/stallscope/sub/auto.py", ""})
    EXPECT_FALSE(IsStallscopeFile(job)) << job;
}

// P06, for files written before the sampler left them out: stallscope's frames are taken out of
// every stack when it is read back (the job's own line is then the innermost).
TEST(StackLog, StallscopesOwnFramesAreLeftOutWhenRead) {
  testing::TempDir dir;
  const std::string path = dir.Sub(kStacksFile);
  {
    auto w = StackLogWriter::Open(path, 50, 10);
    ASSERT_TRUE(w.ok());
    w->AddSample(1, 42, 42,
                 {{"/b/python/stallscope/auto.py", "step", 158, ""},
                  {"/b/python/stallscope/__init__.py", "phase", 9, ""},
                  kInner[1],
                  kInner[2]});
    ASSERT_TRUE(w->Flush().ok());
  }
  const StackLog log = ReadStackLog(dir.path().string());
  ASSERT_EQ(log.samples.size(), 1u);
  const std::vector<uint32_t>& stack = log.stacks[log.samples[0].stack];
  ASSERT_EQ(stack.size(), 2u);
  EXPECT_EQ(log.frames[stack[0]], kInner[1]);
}

TEST(StackLog, AnUnwritableFileIsAnErrorNamingIt) {
  auto w = StackLogWriter::Open("/nonexistent-dir/stacks.jsonl", 50, 10);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("/nonexistent-dir/stacks.jsonl: cannot create"),
            std::string::npos);
}

}  // namespace
}  // namespace stallscope::stacks
