#include "report/top_screen.h"

#include <gtest/gtest.h>

#include "recording_fixtures.h"

#include "golden.h"

namespace stallscope::report {
namespace {

constexpr int64_t kWall = 1'763'750'000'000'000'000;

using stallscope::testing::H100Header;

/// One sample at `wall_ns` whose GPUs saw a 2 s sawtooth (100% for 1 s, 0% for 1 s) in the
/// driver's buffer: 6 points a second over the last `seconds`.
sample::Sample Sawtooth(size_t gpus, int64_t wall_ns, int seconds) {
  sample::Sample s;
  s.wall_ns = wall_ns;
  s.mono_ns = wall_ns - kWall + 10'000'000'000;
  s.gpus.resize(gpus);
  for (size_t i = 0; i < gpus; ++i) {
    auto& g = s.gpus[i];
    g.util_gpu_pct = 50;
    g.mem_used_bytes = 60ull << 30;
    g.mem_total_bytes = 80ull << 30;
    g.power_mw = 350'000;
    g.power_limit_mw = 700'000;
    g.temperature_c = 65;
    for (int k = 0; k < seconds * 6; ++k) {
      int64_t ts_ns = wall_ns - static_cast<int64_t>(seconds) * 1'000'000'000 +
                      int64_t{k + 1} * 1'000'000'000 / 6;
      g.util_samples[g.util_sample_count++] = {ts_ns / 1000,
                                               (ts_ns / 1'000'000'000) % 2 ? 100u : 0u};
    }
  }
  s.host.cpu_count = 16;
  s.host.cpu = host::CpuShares{45.2, 40.1, 5.1, 0.0, 0.0};
  s.host.mem_total_bytes = 64ull << 30;
  s.host.mem_used_bytes = 18ull << 30;
  s.host.load1 = 1.2;
  s.host.psi_io = host::Pressure{2.5, 1.0, 0};
  return s;
}

void AddJob(sample::Sample& s, uint64_t io_bytes) {
  s.has_processes = true;
  auto proc = [&](int32_t pid, int32_t ppid, const char* comm, char state, double cpu) {
    host::ProcessSample p;
    p.pid = pid;
    p.ppid = ppid;
    p.comm = comm;
    p.state = state;
    p.cpu_pct = cpu;
    p.rss_bytes = 1ull << 30;
    p.read_bytes = io_bytes * static_cast<uint64_t>(pid - 99);
    p.write_bytes = 0;
    s.processes.push_back(p);
  };
  proc(100, 1, "python", 'S', 35.0);
  proc(101, 100, "pt_data_worker", 'R', 98.5);
  proc(102, 100, "pt_data_worker", 'D', 12.0);
}

std::string Dump(const std::vector<TopRow>& rows) {
  std::string out;
  for (const auto& r : rows) out += r.Text() + "\n";
  return out;
}

TopModel Model(size_t gpus, bool job) {
  TopModel m(H100Header(gpus));
  auto first = Sawtooth(gpus, kWall - 1'000'000'000, 20);
  auto second = Sawtooth(gpus, kWall, 1);
  if (job) {
    AddJob(first, 0);
    AddJob(second, 10 << 20);
  }
  m.Add(first);
  m.Add(second);
  return m;
}

/// GPM values of a bf16 matmul burn on an H100 (issue 28's measurement), over a 5 s window.
gpu::GpmMetrics Burn() {
  gpu::GpmMetrics x;
  x.window_ns = 5'000'000'000;
  x.sm_active_pct = 96.1;
  x.sm_occupancy_pct = 14.2;
  x.tensor_active_pct = 93.3;
  x.tensor_hmma_pct = 93.3;
  x.dram_active_pct = 24.6;
  x.pcie_tx_mibps = 12.5;
  x.pcie_rx_mibps = 1200.0;
  x.nvlink_tx_mibps = 0;
  x.nvlink_rx_mibps = 0;
  return x;
}

/// Three H100s: GPU 0 with GPM values, GPU 1 sampled but no window closed yet, GPU 2 in MIG mode
/// (no GPM, with the backend's note).
TopModel GpmModel() {
  auto header = H100Header(3);
  header.gpus[0].gpm = true;
  header.gpus[1].gpm = true;
  header.gpus[2].gpm_note = "MIG is enabled";
  TopModel m(header);
  auto s = Sawtooth(3, kWall, 20);
  s.gpus[0].gpm = Burn();
  s.gpus[0].util_gpu_pct = 99;
  m.Add(s);
  return m;
}

TEST(HistoryGlyphs, SawtoothShowsHighAndLowColumns) {
  TopModel m = Model(1, false);
  // 60 columns of 1 s over 60 s: the last 21 s hold points, alternating 100% and 0%.
  // A column holds 5 points of one second and the first of the next: 83% and 17%.
  std::string g = HistoryGlyphs(m.history()[0], kWall, 60, true);
  EXPECT_NE(g.find("▇"), std::string::npos) << g;
  EXPECT_NE(g.find("▂"), std::string::npos) << g;
  std::string ascii = HistoryGlyphs(m.history()[0], kWall, 60, false);
  ASSERT_EQ(ascii.size(), 60u);
  EXPECT_NE(ascii.find(".*.*.*.*.*.*.*.*.*.*"), std::string::npos) << ascii;
}

TEST(HistoryGlyphs, EmptyAndOldPointsAreBlank) {
  std::deque<UtilPoint> points = {{kWall - 61'000'000'000, 100}};
  EXPECT_EQ(HistoryGlyphs(points, kWall, 4, true), "    ");
  EXPECT_EQ(HistoryGlyphs({}, kWall, 0, true), "");
}

TEST(TopModel, HistoryIsBoundedToSixtySeconds) {
  TopModel m(H100Header(1));
  for (int i = 0; i < 200; ++i) m.Add(Sawtooth(1, kWall + int64_t{i} * 1'000'000'000, 1));
  ASSERT_EQ(m.history().size(), 1u);
  EXPECT_LE(m.history()[0].size(), 61u * 6);
  EXPECT_GT(m.history()[0].front().wall_ns, kWall + 199'000'000'000 - TopModel::kHistoryNs);
}

// Issue 28: the driver's buffer now comes in batches every 1-10 s. A per-sample point between
// two batches made the next batch's older points look stale: they were all dropped.
TEST(TopModel, BufferedGpusKeepEveryBatchedPointAndNoPerSamplePoints) {
  TopModel m(H100Header(2));
  for (int i = 0; i <= 10; ++i) {
    const int64_t wall = kWall + int64_t{i} * 1'000'000'000;
    // GPU 0: a batch every 5 s, covering the 5 s before; GPU 1: never a buffer.
    auto s = Sawtooth(2, wall, i % 5 == 0 ? 5 : 0);
    s.gpus[1].util_sample_count = 0;
    s.gpus[0].util_gpu_pct = 50;
    s.gpus[1].util_gpu_pct = static_cast<uint32_t>(10 * i);
    m.Add(s);
  }
  // Three batches of 30 points (the first at i = 0, then i = 5 and 10), no 50% point.
  ASSERT_EQ(m.history().size(), 2u);
  EXPECT_EQ(m.history()[0].size(), 90u);
  for (const auto& p : m.history()[0]) EXPECT_NE(p.util_pct, 50u) << p.wall_ns;
  // The GPU without a buffer keeps one point per sample.
  ASSERT_EQ(m.history()[1].size(), 11u);
  EXPECT_EQ(m.history()[1].back().util_pct, 100u);
}

TEST(TopModel, FirstBatchReplacesThePerSamplePointsItCovers) {
  TopModel m(H100Header(1));
  for (int i = 0; i < 5; ++i) {
    auto s = Sawtooth(1, kWall + int64_t{i} * 1'000'000'000, 0);
    s.gpus[0].util_gpu_pct = 50;
    m.Add(s);
  }
  m.Add(Sawtooth(1, kWall + 5'000'000'000, 2));  // covers (kWall + 3 s, kWall + 5 s]
  const auto& h = m.history()[0];
  ASSERT_EQ(h.size(), 4u + 12u);  // the per-sample points at 0..3 s, then the batch
  EXPECT_EQ(h[3].util_pct, 50u);
  EXPECT_NE(h[4].util_pct, 50u);
}

TEST(TopModel, ProcessesInTreeOrderWithIoRates) {
  TopModel m = Model(1, true);
  ASSERT_EQ(m.processes().size(), 3u);
  EXPECT_EQ(m.processes()[0].pid, 100);
  EXPECT_EQ(m.processes()[1].depth, 1);
  ASSERT_TRUE(m.processes()[2].io_bps.has_value());
  EXPECT_NEAR(*m.processes()[2].io_bps, 3.0 * (10 << 20), 1.0);  // 30 MiB in 1 s
}

TEST(TopScreen, RowsNeverExceedTheSize) {
  for (const TopModel& m : {Model(8, true), GpmModel()}) {
    for (int w : {1, 20, 60, 80, 132, 200}) {
      for (int h : {0, 1, 5, 9, 20, 50}) {
        for (bool help : {false, true}) {
          auto rows = RenderTopScreen(m, {w, h, TopSort::kCpu, false, help, true});
          EXPECT_LE(rows.size(), static_cast<size_t>(h));
          for (const auto& r : rows) {
            size_t cols = 0;
            for (char c : r.Text()) cols += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
            EXPECT_LE(cols, static_cast<size_t>(w)) << r.Text();
          }
        }
      }
    }
  }
}

TEST(TopScreen, ShortTerminalDropsHistoryBeforeGpus) {
  auto rows = RenderTopScreen(Model(8, false), {80, 19, TopSort::kCpu, false, false, true});
  std::string text = Dump(rows);
  EXPECT_NE(text.find(" 7 "), std::string::npos) << text;
  EXPECT_EQ(text.find("60s"), std::string::npos) << text;
}

TEST(TopScreen, Golden) {
  TopModel m = Model(2, true);
  m.run = TopRunStatus{"runs/exp1", analysis::LiveWindow{}, "suspect: data loading", ""};
  m.run->window->steps_per_s = 3.25;
  m.run->window->phases = {{"data_loading", 0, 0.62}, {"forward_pass", 0, 0.21}};
  std::string out;
  out += Dump(RenderTopScreen(m, {100, 30, TopSort::kCpu, false, false, true}));
  out += "--- 60x20, paused, sorted as a tree, ASCII\n";
  out += Dump(RenderTopScreen(m, {60, 20, TopSort::kPid, true, false, false}));
  out += "--- help\n";
  out += Dump(RenderTopScreen(m, {80, 12, TopSort::kIo, false, true, true}));
  testing::ExpectGolden("top_screen.txt", out);
}

TEST(TopScreen, GpmLineUnderTheGpuAndOneNotePerReason) {
  TopModel m = GpmModel();
  std::string out = Dump(RenderTopScreen(m, {100, 30, TopSort::kCpu, false, false, true}));
  out += "--- 160x8: the links where there is room\n";
  out += Dump(RenderTopScreen(m, {160, 8, TopSort::kCpu, false, false, true}));
  out += "--- 70x12: the history goes first\n";
  out += Dump(RenderTopScreen(m, {70, 12, TopSort::kCpu, false, false, false}));
  out += "--- 60x9: then the notes\n";
  out += Dump(RenderTopScreen(m, {60, 9, TopSort::kCpu, false, false, false}));
  testing::ExpectGolden("top_screen_gpm.txt", out);
  EXPECT_NE(out.find("SM active  96%  tensor  93%  DRAM  25%  occupancy  14%"), std::string::npos)
      << out;
  EXPECT_NE(out.find("GPM: GPU 1: its first window is still open (read every few seconds)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("GPM: GPU 2: MIG is enabled"), std::string::npos) << out;
}

TEST(GpmNotes, OneLinePerReasonNamingGpusUnlessAll) {
  auto header = H100Header(2);
  header.gpus[0].gpm_note = "not supported by this GPU (GPM needs Hopper or later)";
  header.gpus[1].gpm_note = header.gpus[0].gpm_note;
  auto s = Sawtooth(2, kWall, 1);
  EXPECT_EQ(GpmNotes(header, s),
            std::vector<std::string>{"not supported by this GPU (GPM needs Hopper or later)"});
  header.gpus[1].gpm_note = "\x1b[31mvGPU";  // the driver's words, escaped
  s.gpus[0].lost = true;                     // a lost GPU says nothing
  EXPECT_EQ(GpmNotes(header, s), std::vector<std::string>{"GPU 1: \\x1b[31mvGPU"});
  header.gpus[1].gpm_note.clear();
  EXPECT_TRUE(GpmNotes(header, s).empty());
}

TEST(TopScreen, FinishedRunKeepsItsNumbersBesideTheNote) {
  TopModel m = Model(1, false);
  m.run = TopRunStatus{"runs/exp1", analysis::LiveWindow{}, "", "finished: exited, exit 0"};
  m.run->window->steps_per_s = 3.25;
  m.run->window->phases = {{"data_loading", 0, 0.62}};
  std::string text = Dump(RenderTopScreen(m, {100, 30, TopSort::kCpu, false, false, true}));
  EXPECT_NE(text.find("RUN runs/exp1  3.25 steps/s  finished: exited, exit 0"), std::string::npos)
      << text;
  EXPECT_NE(text.find("data_loading 62%"), std::string::npos) << text;
}

TEST(TopScreen, RunLineForTheTextModes) {
  TopRunStatus run{"runs/exp1", analysis::LiveWindow{}, "suspect: input pipeline", ""};
  run.window->steps_per_s = 3.25;
  run.window->phases = {{"data_loading", 0, 0.62}, {"forward_pass", 0, 0.21}};
  EXPECT_EQ(RenderTopRunLine(run),
            "run runs/exp1: 3.25 steps/s | data_loading 62% | forward_pass 21% | suspect: input "
            "pipeline\n");
  run.note = "run directory removed";
  EXPECT_EQ(RenderTopRunLine(run).substr(RenderTopRunLine(run).size() - 24),
            "| run directory removed\n");
  EXPECT_EQ(RenderTopRunLine(TopRunStatus{"d", std::nullopt, "", ""}), "run d: no steps yet\n");
  EXPECT_EQ(RenderTopRunLine(TopRunStatus{"d\x1b", std::nullopt, "", "no step in the last 5 s"}),
            "run d\\x1b: no step in the last 5 s\n");
}

}  // namespace
}  // namespace stallscope::report
