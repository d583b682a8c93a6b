#include "monitor/session.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "temp_dir.h"

#include "fakes/fake_clock.h"
#include "fakes/fake_gpu_backend.h"
#include "sample/recording.h"

namespace stallscope::monitor {
namespace {

namespace fs = std::filesystem;
using stallscope::testing::TempDir;

constexpr int64_t kIntervalNs = 100'000'000;

host::ProcFs Fixture() {
  host::ProcFs procfs;
  procfs.proc_root = STALLSCOPE_SOURCE_DIR "/tests/data/proc/node_a";
  procfs.cgroup_root = STALLSCOPE_SOURCE_DIR "/tests/data/cgroup/node_a";
  return procfs;
}

sample::RecordingHeader Header(const gpu::GpuBackend& gpus) {
  sample::RecordingHeader h;
  h.tool_version = "stallscope test";
  h.interval_ns = kIntervalNs;
  for (size_t i = 0; i < gpus.DeviceCount(); ++i) h.gpus.push_back(gpus.Static(i));
  return h;
}

/// Two fake GPUs; GPU 1 is lost from its `lost_from`-th sample on (never when < 0).
gpu::FakeGpuBackend TwoGpus(int lost_from = -1) {
  return gpu::FakeGpuBackend(
      {gpu::FakeGpuBackend::MakeStatic(0), gpu::FakeGpuBackend::MakeStatic(1)},
      [lost_from](size_t gpu, size_t call, gpu::GpuSample& out) {
        if (gpu == 1 && lost_from >= 0 && call >= static_cast<size_t>(lost_from)) {
          out.lost = true;
          return;
        }
        out.util_gpu_pct = 50;
      });
}

/// Waits until the sampling thread stopped by itself (max_samples reached or a write error).
void WaitForSamplingEnd(const Session& session) {
  for (int i = 0; i < 10'000 && !session.stop_requested(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(session.stop_requested());
}

/// Points the open descriptor of `path` at /dev/full: every later write fails with ENOSPC.
void MakeWritesFail(const std::string& path) {
  int full = open("/dev/full", O_WRONLY);
  ASSERT_GE(full, 0);
  bool found = false;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(entry.path(), ec) == fs::path(path)) {
      ASSERT_GE(dup2(full, std::stoi(entry.path().filename().string())), 0);
      found = true;
    }
  }
  close(full);
  ASSERT_TRUE(found) << path << " is not open";
}

TEST(ParseIntervalNs, AcceptsDurationsDownTo50ms) {
  ASSERT_TRUE(ParseIntervalNs("100ms").ok());
  EXPECT_EQ(*ParseIntervalNs("100ms"), 100'000'000);
  EXPECT_EQ(*ParseIntervalNs("50ms"), 50'000'000);
  auto low = ParseIntervalNs("10ms");
  ASSERT_FALSE(low.ok());
  EXPECT_EQ(low.error().message, "interval 10ms is below the 50ms minimum");
  EXPECT_FALSE(ParseIntervalNs("soon").ok());
}

TEST(Session, SamplesNTimesIntoARecording) {
  TempDir dir;
  auto gpus = TwoGpus();
  FakeClock clock;
  SessionOptions options;
  options.interval_ns = kIntervalNs;
  options.max_samples = 5;
  Session session(gpus, Fixture(), clock, Header(gpus), std::move(options));
  std::string path = dir.Sub("rec.jsonl");
  ASSERT_TRUE(session.OpenRecording(path, sample::RecordingFormat::kJsonl).ok());
  session.StartSampling();
  WaitForSamplingEnd(session);
  ASSERT_TRUE(session.Finish(3).ok());
  EXPECT_EQ(session.samples_written(), 5);
  EXPECT_FALSE(session.write_error().has_value());
  sample::Sample latest;
  ASSERT_TRUE(session.CopyLatest(latest));
  EXPECT_EQ(latest.gpus.size(), 2u);

  auto rec = sample::ReadRecording(path);
  ASSERT_TRUE(rec.ok()) << rec.error().message;
  EXPECT_EQ(rec->samples.size(), 5u);
  EXPECT_TRUE(rec->finished);
  EXPECT_EQ(rec->exit_code, 3);
  EXPECT_TRUE(rec->events.empty());
  for (size_t i = 1; i < rec->samples.size(); ++i) {
    EXPECT_EQ(rec->samples[i].mono_ns - rec->samples[i - 1].mono_ns, kIntervalNs);
  }
}

TEST(Session, LogsALostGpuOnceInTheRecording) {
  TempDir dir;
  auto gpus = TwoGpus(/*lost_from=*/2);
  FakeClock clock;
  SessionOptions options;
  options.interval_ns = kIntervalNs;
  options.max_samples = 6;
  Session session(gpus, Fixture(), clock, Header(gpus), std::move(options));
  std::string path = dir.Sub("rec.jsonl");
  ASSERT_TRUE(session.OpenRecording(path, sample::RecordingFormat::kJsonl).ok());
  session.StartSampling();
  WaitForSamplingEnd(session);
  ASSERT_TRUE(session.Finish(std::nullopt).ok());
  auto rec = sample::ReadRecording(path);
  ASSERT_TRUE(rec.ok()) << rec.error().message;
  EXPECT_EQ(rec->samples.size(), 6u);  // sampling goes on without the GPU
  ASSERT_EQ(rec->events.size(), 1u);
  EXPECT_NE(rec->events[0].find("\"kind\":\"gpu_lost\""), std::string::npos) << rec->events[0];
  EXPECT_NE(rec->events[0].find("GPU 1 stopped answering"), std::string::npos) << rec->events[0];
}

TEST(Session, WriteErrorStopsSamplingUnderStop) {
  TempDir dir;
  auto gpus = TwoGpus();
  FakeClock clock;
  SessionOptions options;
  options.interval_ns = kIntervalNs;
  options.max_samples = 50;
  int warnings = 0;
  options.on_first_write_error = [&](const Error&) { ++warnings; };
  Session session(gpus, Fixture(), clock, Header(gpus), std::move(options));
  std::string path = dir.Sub("rec.jsonl");
  ASSERT_TRUE(session.OpenRecording(path, sample::RecordingFormat::kJsonl).ok());
  MakeWritesFail(path);
  session.StartSampling();
  WaitForSamplingEnd(session);
  Status finished = session.Finish(0);
  ASSERT_FALSE(finished.ok());
  EXPECT_NE(finished.error().message.find(path), std::string::npos) << finished.error().message;
  EXPECT_EQ(warnings, 1);              // the trailer's failure is not said again
  EXPECT_EQ(gpus.SampleCalls(0), 1u);  // stopped at the first failed line
}

TEST(Session, WriteErrorStopsOnlyTheRecordingUnderContinue) {
  TempDir dir;
  auto gpus = TwoGpus();
  FakeClock clock;
  SessionOptions options;
  options.interval_ns = kIntervalNs;
  options.on_write_error = OnWriteError::kContinue;
  options.max_samples = 8;
  std::vector<std::string> warnings;
  options.on_first_write_error = [&](const Error& e) { warnings.push_back(e.message); };
  Session session(gpus, Fixture(), clock, Header(gpus), std::move(options));
  std::string path = dir.Sub("rec.jsonl");
  ASSERT_TRUE(session.OpenRecording(path, sample::RecordingFormat::kJsonl).ok());
  MakeWritesFail(path);
  session.StartSampling();
  WaitForSamplingEnd(session);
  Status finished = session.Finish(0);
  ASSERT_FALSE(finished.ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(path), std::string::npos) << warnings[0];
  EXPECT_EQ(gpus.SampleCalls(0), 8u);  // sampling went on: the job's status lines still work
  sample::Sample latest;
  EXPECT_TRUE(session.CopyLatest(latest));
}

TEST(Session, FollowsARunningProcessTree) {
  auto gpus = TwoGpus();
  FakeClock clock;
  SessionOptions options;
  options.interval_ns = kIntervalNs;
  Session session(gpus, host::ProcFs{}, clock, Header(gpus), std::move(options));
  ASSERT_TRUE(session.FollowPid(getpid()).ok());
  EXPECT_EQ(session.header().root_pid, getpid());
  session.SampleNow();
  const sample::Sample& s = session.SampleNow();
  EXPECT_TRUE(s.has_processes);
  bool found = false;
  for (const auto& p : s.processes) found = found || p.pid == getpid();
  EXPECT_TRUE(found);
}

TEST(Session, FollowPidOfAMissingProcessFails) {
  auto gpus = TwoGpus();
  FakeClock clock;
  Session session(gpus, Fixture(), clock, Header(gpus), SessionOptions{});
  auto st = session.FollowPid(2'147'483'000);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(st.error().message, "no process with pid 2147483000");
}

TEST(Session, StartsAndFollowsACommand) {
  auto gpus = TwoGpus();
  FakeClock clock;
  Session session(gpus, Fixture(), clock, Header(gpus), SessionOptions{});
  ASSERT_TRUE(session.StartCommand({"sh", "-c", "exit 7"}).ok());
  ASSERT_NE(session.child(), nullptr);
  EXPECT_EQ(session.header().root_pid, session.child()->pid());
  EXPECT_EQ(session.header().command.size(), 3u);
  EXPECT_EQ(session.child()->Wait(), 7);
  auto missing = Session(gpus, Fixture(), clock, Header(gpus), SessionOptions{})
                     .StartCommand({"/nonexistent/stallscope-test"});
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace stallscope::monitor
