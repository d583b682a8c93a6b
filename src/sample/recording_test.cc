#include "sample/recording.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>

#include "base/units.h"
#include "host_test_util.h"

namespace stallscope::sample {
namespace {

std::string TempPath(const std::string& name) {
  auto dir =
      std::filesystem::temp_directory_path() / ("stallscope_rec_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

RecordingHeader TwoGpuHeader() {
  RecordingHeader h;
  h.tool_version = "stallscope test";
  h.hostname = "node-1";
  h.cpu_count = 8;
  h.interval_ns = 500'000'000;
  h.start_wall_ns = 1'700'000'000'000'000'000;
  h.start_mono_ns = 5'000'000'000;
  h.gpu_backend = "nvml";
  h.driver_version = "550.54.15";
  h.command = {"python", "train.py", "--name=\"quoted\""};
  h.root_pid = 4242;
  for (uint32_t i = 0; i < 2; ++i) {
    gpu::GpuStatic g;
    g.index = i;
    g.name = "NVIDIA A10G";
    g.uuid = "GPU-" + std::to_string(i);
    g.pci_bus_id = "00000000:1" + std::to_string(i) + ":00.0";
    g.mem_total_bytes = 24ull << 30;
    g.power_limit_mw = 300'000;
    g.sm_clock_max_mhz = 1710;
    g.mig_mode = i == 0 ? gpu::MigMode::kDisabled : gpu::MigMode::kEnabled;
    g.persistence_mode = true;
    h.gpus.push_back(g);
  }
  return h;
}

Sample MakeSample(int64_t t) {
  Sample s;
  s.mono_ns = 5'000'000'000 + t * 500'000'000;
  s.wall_ns = 1'700'000'000'000'000'000 + t * 500'000'000;
  s.gpus.resize(2);
  auto& g = s.gpus[0];
  g.util_gpu_pct = 85;
  g.util_mem_pct = 40;
  g.mem_used_bytes = 12'800ull << 20;
  g.mem_total_bytes = 24ull << 30;
  g.power_mw = 150'250;
  g.temperature_c = 71;
  g.sm_clock_mhz = 1650;
  g.clock_event_reasons = gpu::kClockEventSwPowerCap | gpu::kClockEventHwThermal;
  g.util_samples[0] = {1'700'000'000'000'000, 100};
  g.util_samples[1] = {1'700'000'000'166'000, 0};
  g.util_sample_count = 2;
  g.processes.push_back({4242, false, 12'000ull << 20, 80, std::nullopt});
  s.gpus[1].lost = true;  // every other field absent
  s.host.cpu_count = 8;
  s.host.cpu = host::CpuShares{45.2, 40.0, 5.2, 3.1, 0.0};
  s.host.per_cpu.assign(2, host::CpuShares{50, 45, 5, 0, 0});
  s.host.mem_total_bytes = 64'000'000'000;
  s.host.mem_available_bytes = 45'600'000'000;
  s.host.mem_used_bytes = 18'400'000'000;
  s.host.load1 = 1.5;
  s.host.psi_io = host::Pressure{12.5, 3.25, 1000};
  s.has_processes = true;
  host::ProcessSample p;
  p.pid = 4242;
  p.ppid = 1;
  p.comm = "py) (thon";
  p.cmdline = "python train.py \"x\"\ttab";
  p.state = 'D';
  p.cpu_pct = 98.5;
  p.rss_bytes = 1 << 30;
  p.threads = 12;
  p.threads_blocked = 1;
  p.read_bytes = 4096;
  s.processes.push_back(p);
  return s;
}

TEST(Recording, RoundTripKeepsEveryField) {
  std::string path = TempPath("roundtrip.jsonl");
  auto header = TwoGpuHeader();
  {
    auto w = RecordingWriter::Open(path, header, RecordingFormat::kJsonl);
    ASSERT_TRUE(w.ok()) << w.error().message;
    for (int t = 0; t < 3; ++t) ASSERT_TRUE(w->Append(MakeSample(t)).ok());
    ASSERT_TRUE(w->AppendEvent("gpu_lost", 6'000'000'000, "GPU 1").ok());
    ASSERT_TRUE(w->Finish(7'000'000'000, 3).ok());
  }
  auto rec = ReadRecording(path);
  ASSERT_TRUE(rec.ok()) << rec.error().message;
  EXPECT_TRUE(rec->finished);
  EXPECT_EQ(rec->exit_code, 3);
  EXPECT_EQ(rec->malformed_lines, 0);
  EXPECT_EQ(rec->events.size(), 1u);
  const auto& h = rec->header;
  EXPECT_EQ(h.hostname, "node-1");
  EXPECT_EQ(h.command, header.command);
  EXPECT_EQ(h.root_pid, 4242);
  ASSERT_EQ(h.gpus.size(), 2u);
  EXPECT_EQ(h.gpus[1].mig_mode, gpu::MigMode::kEnabled);
  EXPECT_EQ(h.gpus[0].mem_total_bytes, 24ull << 30);
  EXPECT_FALSE(h.gpus[0].pcie_gen_max.has_value());
  ASSERT_EQ(rec->samples.size(), 3u);
  const Sample& s = rec->samples[2];
  EXPECT_EQ(s.mono_ns, 6'000'000'000);
  const auto& g = s.gpus[0];
  EXPECT_EQ(g.util_gpu_pct, 85u);
  EXPECT_EQ(g.mem_used_bytes, 12'800ull << 20);
  EXPECT_EQ(g.power_mw, 150'250u);
  EXPECT_EQ(g.clock_event_reasons, gpu::kClockEventSwPowerCap | gpu::kClockEventHwThermal);
  EXPECT_FALSE(g.energy_mj.has_value());
  ASSERT_EQ(g.util_sample_count, 2u);
  EXPECT_EQ(g.util_samples[1].util_pct, 0u);
  ASSERT_EQ(g.processes.size(), 1u);
  EXPECT_EQ(g.processes[0].sm_util_pct, 80u);
  EXPECT_FALSE(g.processes[0].mem_util_pct.has_value());
  EXPECT_TRUE(s.gpus[1].lost);
  EXPECT_FALSE(s.gpus[1].util_gpu_pct.has_value());
  ASSERT_TRUE(s.host.cpu.has_value());
  EXPECT_DOUBLE_EQ(s.host.cpu->busy_pct, 45.2);
  ASSERT_EQ(s.host.per_cpu.size(), 2u);
  EXPECT_DOUBLE_EQ(s.host.per_cpu[1].user_pct, 45.0);
  ASSERT_TRUE(s.host.psi_io.has_value());
  EXPECT_DOUBLE_EQ(*s.host.psi_io->full_avg10_pct, 3.25);
  EXPECT_FALSE(s.host.psi_cpu.has_value());
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].comm, "py) (thon");
  EXPECT_EQ(s.processes[0].cmdline, "python train.py \"x\"\ttab");
  EXPECT_EQ(s.processes[0].state, 'D');
  EXPECT_FALSE(s.processes[0].write_bytes.has_value());
}

// Issue 28: the header says which field comes at which rate; GPM windows read back exactly.
TEST(Recording, PollingPlanAndGpmRoundTrip) {
  std::string path = TempPath("gpm.jsonl");
  auto header = TwoGpuHeader();
  header.gpus[0].gpm = true;
  header.gpus[1].gpm_note = "not supported by this GPU";
  gpu::TierCosts costs{};
  costs[gpu::TierIndex(gpu::PollTier::kUtilBuffer)] = 2391;
  header.poll = gpu::PlanPolling(
      {.tick_ns = 100'000'000, .gpus = 2, .cost_us = costs, .pcie = true}, kThresholds);
  header.host_slow_ns = 1'000'000'000;
  Sample with = MakeSample(0);
  gpu::GpmMetrics& m = with.gpus[0].gpm.emplace();
  m.window_ns = 2'000'000'000;
  m.sm_active_pct = 95.9;
  m.tensor_active_pct = 93.4;
  m.pcie_rx_mibps = 16.0;
  {
    auto w = RecordingWriter::Open(path, header, RecordingFormat::kJsonl);
    ASSERT_TRUE(w.ok()) << w.error().message;
    ASSERT_TRUE(w->Append(with).ok());
    ASSERT_TRUE(w->Append(MakeSample(1)).ok());
  }
  auto rec = ReadRecording(path);
  ASSERT_TRUE(rec.ok()) << rec.error().message;
  const auto& h = rec->header;
  EXPECT_TRUE(h.gpus[0].gpm);
  EXPECT_EQ(h.gpus[1].gpm_note, "not supported by this GPU");
  EXPECT_EQ(h.poll.tick_ns, 100'000'000);
  EXPECT_EQ(h.poll.period_ns, header.poll.period_ns);
  EXPECT_EQ(h.poll.cost_us[gpu::TierIndex(gpu::PollTier::kUtilBuffer)], 2391.0);
  EXPECT_FALSE(h.poll.cost_us[gpu::TierIndex(gpu::PollTier::kEnergy)]);
  EXPECT_EQ(h.poll.pcie_ns, 5'000'000'000);
  EXPECT_EQ(h.host_slow_ns, 1'000'000'000);
  ASSERT_EQ(rec->samples.size(), 2u);
  ASSERT_TRUE(rec->samples[0].gpus[0].gpm);
  const gpu::GpmMetrics& back = *rec->samples[0].gpus[0].gpm;
  EXPECT_EQ(back.window_ns, 2'000'000'000);
  EXPECT_DOUBLE_EQ(back.sm_active_pct.value_or(-1), 95.9);
  EXPECT_DOUBLE_EQ(back.tensor_active_pct.value_or(-1), 93.4);
  EXPECT_DOUBLE_EQ(back.pcie_rx_mibps.value_or(-1), 16.0);
  EXPECT_FALSE(back.dram_active_pct);
  EXPECT_FALSE(rec->samples[1].gpus[0].gpm);
}

TEST(Recording, SampleLineHasSeedKeys) {
  std::string line;
  AppendSampleJson(TwoGpuHeader(), MakeSample(0), line);
  for (const char* key :
       {"\"timestamp\":\"2023-11-14T22:13:20.000Z\"", "\"multi_gpu_data\":[", "\"gpu_index\":0",
        "\"gpu_name\":\"NVIDIA A10G\"", "\"utilization\":85", "\"memory_used\":12800.0",
        "\"memory_total\":24576.0", "\"power\":150.250",
        "\"aggregate_stats\":{\"total_memory_used\":12800.0", "\"total_memory_total\":24576.0",
        "\"total_memory_percent\":52.1", "\"average_utilization\":85.0", "\"total_power\":150.250",
        "\"max_temperature\":71", "\"gpu_count\":1",
        "\"clock_event_reasons\":[\"sw_power_cap\",\"hw_thermal\"]"}) {
    EXPECT_NE(line.find(key), std::string::npos) << key << "\n" << line;
  }
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

// The sample line formats its timestamp without allocating; it must match FormatIsoUtc.
TEST(Recording, SampleTimestampMatchesFormatIsoUtc) {
  const int64_t instants[] = {0,
                              -1,
                              -1'000'000,
                              -86'400'000'000'000 - 1,
                              951'782'400'000'000'000,  // 2000-02-29
                              1'700'000'000'123'456'789,
                              4'102'444'799'999'999'999,             // 2099-12-31T23:59:59.999
                              std::numeric_limits<int64_t>::max(),   // 2262
                              std::numeric_limits<int64_t>::min()};  // 1677
  for (int64_t wall_ns : instants) {
    Sample s = MakeSample(0);
    s.wall_ns = wall_ns;
    std::string line;
    AppendSampleJson(TwoGpuHeader(), s, line);
    const std::string want = "\"timestamp\":\"" + FormatIsoUtc(wall_ns) + "\"";
    EXPECT_NE(line.find(want), std::string::npos) << wall_ns << ": " << want;
  }
}

// Clock-event bits without a name are written as ClockEventReasonNames does ("0x...").
TEST(Recording, UnknownClockEventBitsAreWrittenInHex) {
  const uint64_t idle = gpu::kClockEventGpuIdle;
  const uint64_t thermal = gpu::kClockEventHwThermal;
  for (uint64_t mask :
       {uint64_t{0}, idle, uint64_t{1} << 40, thermal | (uint64_t{0xab} << 48), ~uint64_t{0}}) {
    Sample s = MakeSample(0);
    s.gpus[0].clock_event_reasons = mask;
    std::string line;
    AppendSampleJson(TwoGpuHeader(), s, line);
    std::string want = "\"clock_event_reasons\":[";
    bool first = true;
    for (const std::string& name : gpu::ClockEventReasonNames(mask)) {
      want += (first ? "\"" : ",\"") + name + "\"";
      first = false;
    }
    want += "]";
    EXPECT_NE(line.find(want), std::string::npos) << mask << ": " << want;
  }
}

TEST(Recording, TornLastLineIsAWarningNotAnError) {
  std::string path = TempPath("torn.jsonl");
  {
    auto w = RecordingWriter::Open(path, TwoGpuHeader(), RecordingFormat::kJsonl);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append(MakeSample(0)).ok());
    ASSERT_TRUE(w->Append(MakeSample(1)).ok());
  }
  {
    std::ofstream out(path, std::ios::app);
    out << "{\"type\":\"sample\",\"timestamp\":\"2023-";  // killed mid-line
  }
  auto rec = ReadRecording(path);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->samples.size(), 2u);
  EXPECT_TRUE(rec->truncated_last_line);
  EXPECT_FALSE(rec->finished);
  ASSERT_FALSE(rec->warnings.empty());
  EXPECT_NE(rec->warnings[0].find("incomplete"), std::string::npos);
}

TEST(Recording, MalformedLinesAreCountedAndSkipped) {
  std::string path = TempPath("malformed.jsonl");
  std::string header;
  AppendHeaderJson(TwoGpuHeader(), header);
  std::string sample;
  AppendSampleJson(TwoGpuHeader(), MakeSample(0), sample);
  std::ofstream(path) << header << "\nnot json at all\n"
                      << sample << "\n{\"type\":\"weird\"}\n"
                      << "{\"type\":\"sample\"}\n"
                      << sample << "\n";
  auto rec = ReadRecording(path);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->samples.size(), 2u);
  EXPECT_EQ(rec->malformed_lines, 3);
}

TEST(Recording, UnreadableInputFailsWithTheFileName) {
  auto missing = ReadRecording("/nonexistent/run.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("/nonexistent/run.jsonl"), std::string::npos);

  std::string path = TempPath("notarecording.jsonl");
  std::ofstream(path) << "{\"hello\": 1}\n";
  auto wrong = ReadRecording(path);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, ErrorCode::kParse);
  EXPECT_NE(wrong.error().message.find("not a stallscope recording"), std::string::npos);

  std::string empty = TempPath("empty.jsonl");
  std::ofstream(empty).flush();
  EXPECT_FALSE(ReadRecording(empty).ok());
}

// A writer killed with SIGKILL at any moment leaves a file readable up to its last whole line.
TEST(Recording, SigkillMidRecordLeavesReadableFile) {
  std::string path = TempPath("killed.jsonl");
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto w = RecordingWriter::Open(path, TwoGpuHeader(), RecordingFormat::kJsonl);
    if (!w.ok()) _exit(2);
    for (int64_t t = 0;; ++t) {
      if (!w->Append(MakeSample(t)).ok()) _exit(3);
    }
  }
  // Let it write a few thousand lines, then kill it mid-stream.
  for (int i = 0; i < 200; ++i) {
    usleep(1000);
    if (std::filesystem::exists(path) && std::filesystem::file_size(path) > 2'000'000) break;
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  auto rec = ReadRecording(path);
  ASSERT_TRUE(rec.ok()) << rec.error().message;
  EXPECT_GT(rec->samples.size(), 10u);
  EXPECT_EQ(rec->malformed_lines, 0);
  EXPECT_FALSE(rec->finished);
  for (size_t i = 0; i < rec->samples.size(); ++i) {
    ASSERT_EQ(rec->samples[i].mono_ns, 5'000'000'000 + static_cast<int64_t>(i) * 500'000'000);
  }
}

// A sample line that cannot be written in full is not counted: the trailer's "samples" and
// `record`'s "N samples in FILE" say what the file holds.
TEST(Recording, FailedWritesAreNotCounted) {
  std::string path = TempPath("full.jsonl");
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);  // over RLIMIT_FSIZE, write(2) fails with EFBIG instead
    auto w = RecordingWriter::Open(path, TwoGpuHeader(), RecordingFormat::kJsonl);
    if (!w.ok()) _exit(2);
    if (!w->Append(MakeSample(0)).ok()) _exit(3);
    const auto size = static_cast<rlim_t>(std::filesystem::file_size(path));
    const struct rlimit limit = {size + 10, size + 10};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(4);
    if (w->Append(MakeSample(1)).ok()) _exit(5);  // a partial line, then EFBIG
    _exit(w->samples_written() == 1 ? 0 : 6);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Issue 12, finding 10: summary of a `record --csv` file said "empty or has no header line".
TEST(Recording, ACsvRecordingIsNamedAsSuch) {
  std::string path = TempPath("rec.csv");
  {
    auto w = RecordingWriter::Open(path, TwoGpuHeader(), RecordingFormat::kCsv);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append(MakeSample(0)).ok());
  }
  auto rec = ReadRecording(path);
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.error().message,
            path +
                ": a CSV recording (record --csv), for spreadsheets; summary reads the JSON "
                "Lines form: record without --csv");
  std::ofstream(path) << "hello\n{\"type\":\"header\"}\n";
  rec = ReadRecording(path);
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.error().message, path + ": not a stallscope recording (line 1 is not JSON)");
}

/// Records what StreamRecording hands over, in order, as text.
class Transcript final : public RecordingConsumer {
 public:
  void OnHeader(const RecordingHeader& header) override { log += "header " + header.hostname; }
  void OnSample(const Sample& s) override {
    log += " sample " + std::to_string(s.mono_ns);
    samples.push_back(s);
  }
  void OnEvent(std::string_view line) override { log += " event " + std::string(line); }
  std::string log;
  std::vector<Sample> samples;
};

// The reader keeps every field of a sample: for the run fixtures (written by `record`), each
// sample read back and written again is the very line that was read.
TEST(Recording, FixtureSamplesReadBackToTheSameLines) {
  for (const char* run : {"runs/data_cpu/recording.jsonl", "runs/gpu_throttled/recording.jsonl"}) {
    const std::string path = host::testing::DataPath(run).string();
    Transcript t;
    auto tail = StreamRecording(path, t);
    ASSERT_TRUE(tail.ok()) << tail.error().message;
    auto rec = ReadRecording(path);
    ASSERT_TRUE(rec.ok()) << rec.error().message;
    std::ifstream in(path);
    std::string line;
    std::vector<std::string> sample_lines;
    while (std::getline(in, line)) {
      if (line.find("\"type\":\"sample\"") != std::string::npos) sample_lines.push_back(line);
    }
    ASSERT_EQ(t.samples.size(), sample_lines.size()) << run;
    ASSERT_EQ(rec->samples.size(), sample_lines.size()) << run;
    EXPECT_EQ(tail->samples, static_cast<int64_t>(sample_lines.size()));
    EXPECT_TRUE(tail->finished);
    EXPECT_EQ(tail->exit_code, rec->exit_code);
    EXPECT_EQ(tail->malformed_lines, 0);
    for (size_t i = 0; i < sample_lines.size(); ++i) {
      std::string streamed, whole;
      AppendSampleJson(rec->header, t.samples[i], streamed);
      AppendSampleJson(rec->header, rec->samples[i], whole);
      EXPECT_EQ(streamed, sample_lines[i]) << run << " sample " << i;
      EXPECT_EQ(whole, sample_lines[i]) << run << " sample " << i;
    }
  }
}

// The consumer sees the header first, then samples and events in file order; the reused Sample
// carries nothing over from one line to the next.
TEST(Recording, StreamHandsOverLinesInOrder) {
  std::string path = TempPath("stream.jsonl");
  {
    auto w = RecordingWriter::Open(path, TwoGpuHeader(), RecordingFormat::kJsonl);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append(MakeSample(0)).ok());
    ASSERT_TRUE(w->AppendEvent("gpu_lost", 6'000'000'000, "GPU 1").ok());
    Sample bare;  // no GPUs, no host, no processes: nothing may leak in from sample 0
    bare.mono_ns = 7'000'000'000;
    ASSERT_TRUE(w->Append(bare).ok());
    ASSERT_TRUE(w->Finish(8'000'000'000, std::nullopt).ok());
  }
  Transcript t;
  auto tail = StreamRecording(path, t);
  ASSERT_TRUE(tail.ok()) << tail.error().message;
  EXPECT_EQ(t.log.substr(0, 38), "header node-1 sample 5000000000 event ");
  EXPECT_NE(t.log.find("\"kind\":\"gpu_lost\""), std::string::npos) << t.log;
  EXPECT_EQ(t.log.substr(t.log.size() - 18), " sample 7000000000") << t.log;
  ASSERT_EQ(t.samples.size(), 2u);
  EXPECT_TRUE(t.samples[1].gpus.empty());
  EXPECT_TRUE(t.samples[1].processes.empty());
  EXPECT_FALSE(t.samples[1].has_processes);
  EXPECT_TRUE(t.samples[1].host.per_cpu.empty());
  EXPECT_FALSE(t.samples[1].host.cpu.has_value());
  EXPECT_TRUE(tail->finished);
  EXPECT_FALSE(tail->exit_code.has_value());
}

// A file cut at any byte reads like the writer killed there: every whole line kept, a torn last
// line a warning, never a malformed count; no header yet is the one error.
TEST(Recording, CutAtEveryByte) {
  std::string full_path = TempPath("full_for_cuts.jsonl");
  {
    auto w = RecordingWriter::Open(full_path, TwoGpuHeader(), RecordingFormat::kJsonl);
    ASSERT_TRUE(w.ok());
    for (int t = 0; t < 3; ++t) ASSERT_TRUE(w->Append(MakeSample(t)).ok());
    ASSERT_TRUE(w->AppendEvent("note", 6'000'000'000, "x").ok());
    ASSERT_TRUE(w->Finish(7'000'000'000, 0).ok());
  }
  std::ifstream in(full_path, std::ios::binary);
  const std::string full((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<size_t> line_ends;  // offset of each '\n'
  for (size_t i = 0; i < full.size(); ++i) {
    if (full[i] == '\n') line_ends.push_back(i);
  }
  ASSERT_EQ(line_ends.size(), 6u);  // header, 3 samples, event, end
  // Every byte near a line boundary, and every 7th byte in between (each cut is a file write
  // and a parser: every byte of the ~7 KB file takes half a minute on a loaded machine).
  std::vector<size_t> cuts;
  for (size_t cut = 0; cut <= full.size(); ++cut) {
    bool near_end = false;
    for (size_t e : line_ends) near_end |= cut + 3 >= e && cut <= e + 3;
    if (near_end || cut % 7 == 0 || cut == full.size()) cuts.push_back(cut);
  }
  const std::string path = TempPath("cut.jsonl");
  for (size_t cut : cuts) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << full.substr(0, cut);
    // Whole lines in the prefix (a line is whole once its '}' is in, newline or not).
    size_t whole = 0;
    while (whole < line_ends.size() && line_ends[whole] <= cut) ++whole;
    const bool torn = whole < line_ends.size() && cut > (whole == 0 ? 0 : line_ends[whole - 1] + 1);
    Transcript t;
    auto tail = StreamRecording(path, t);
    if (whole == 0) {
      EXPECT_FALSE(tail.ok()) << "cut " << cut;
      continue;
    }
    ASSERT_TRUE(tail.ok()) << "cut " << cut << ": " << tail.error().message;
    EXPECT_EQ(tail->samples, static_cast<int64_t>(std::min<size_t>(whole - 1, 3))) << cut;
    EXPECT_EQ(tail->malformed_lines, 0) << "cut " << cut;
    EXPECT_EQ(tail->truncated_last_line, torn) << "cut " << cut;
    EXPECT_EQ(tail->finished, whole == 6) << "cut " << cut;
  }
}

// A line over the cap is counted malformed (and overlong), skipped unread, and named in the
// warning; the lines after it are read. A header over the cap is not a recording.
TEST(Recording, ALineOverTheCapIsSkippedAndCounted) {
  std::string header, sample;
  AppendHeaderJson(TwoGpuHeader(), header);
  AppendSampleJson(TwoGpuHeader(), MakeSample(0), sample);
  const size_t cap = std::max(header.size(), sample.size()) + 10;
  const std::string huge = "{\"type\":\"sample\",\"pad\":\"" + std::string(cap, 'x') + "\"}";
  std::string path = TempPath("overlong.jsonl");
  std::ofstream(path) << header << "\n" << sample << "\n" << huge << "\n" << sample << "\n";
  Transcript t;
  auto tail = StreamRecording(path, t, cap);
  ASSERT_TRUE(tail.ok()) << tail.error().message;
  EXPECT_EQ(tail->samples, 2);
  EXPECT_EQ(tail->malformed_lines, 1);
  EXPECT_EQ(tail->overlong_lines, 1);
  ASSERT_EQ(tail->warnings.size(), 1u);
  EXPECT_EQ(tail->warnings[0],
            fmt::format("{}: skipped 1 malformed line(s), 1 of them longer than the {}-byte line "
                        "limit",
                        path, cap));
  // Under the default cap the line is read, and is malformed for another reason (no ts_ns).
  auto whole = ReadRecording(path);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->samples.size(), 2u);
  EXPECT_EQ(whole->malformed_lines, 1);
  EXPECT_EQ(whole->warnings[0], path + ": skipped 1 malformed line(s)");

  std::ofstream(path) << header << "\n";
  Transcript none;
  auto bad = StreamRecording(path, none, header.size() - 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            fmt::format("{}: not a stallscope recording (line 1 is longer than {} bytes)", path,
                        header.size() - 1));
}

TEST(Recording, CsvHasOneColumnSetPerGpu) {
  std::string out;
  AppendCsvHeader(TwoGpuHeader(), out);
  EXPECT_NE(out.find("gpu1_utilization_pct"), std::string::npos);
  std::string row;
  AppendCsvRow(TwoGpuHeader(), MakeSample(0), row);
  auto count = [](const std::string& s) { return std::count(s.begin(), s.end(), ','); };
  EXPECT_EQ(count(out), count(row));
  EXPECT_NE(row.find(",85,"), std::string::npos);
  EXPECT_EQ(row.substr(row.size() - 2), ",1");  // GPU 1 lost
}

}  // namespace
}  // namespace stallscope::sample
