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

TEST(TopModel, ProcessesInTreeOrderWithIoRates) {
  TopModel m = Model(1, true);
  ASSERT_EQ(m.processes().size(), 3u);
  EXPECT_EQ(m.processes()[0].pid, 100);
  EXPECT_EQ(m.processes()[1].depth, 1);
  ASSERT_TRUE(m.processes()[2].io_bps.has_value());
  EXPECT_NEAR(*m.processes()[2].io_bps, 3.0 * (10 << 20), 1.0);  // 30 MiB in 1 s
}

TEST(TopScreen, RowsNeverExceedTheSize) {
  TopModel m = Model(8, true);
  for (int w : {1, 20, 60, 80, 132, 200}) {
    for (int h : {0, 1, 5, 20, 50}) {
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
