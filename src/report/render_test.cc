#include "report/render.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "recording_fixtures.h"

#include "base/units.h"

#include "golden.h"
#include "terminal_safe.h"

namespace stallscope::report {
namespace {

using stallscope::testing::H100Header;

sample::Sample Snapshot(size_t gpus) {
  sample::Sample s;
  s.wall_ns = 1'763'750'000'000'000'000;
  s.gpus.resize(gpus);
  for (size_t i = 0; i < gpus; ++i) {
    auto& g = s.gpus[i];
    g.util_gpu_pct = static_cast<uint32_t>(85 - 30 * i);
    g.util_mem_pct = 40;
    g.mem_used_bytes = (12ull << 30) + (i << 29);
    g.mem_total_bytes = 80ull << 30;
    g.power_mw = 350'000;
    g.power_limit_mw = 700'000;
    g.temperature_c = 65;
    g.sm_clock_mhz = 1980;
    g.clock_event_reasons = i == 1 ? uint64_t{gpu::kClockEventSwPowerCap} : uint64_t{0};
  }
  if (gpus > 2) {
    s.gpus[2] = gpu::GpuSample{};
    s.gpus[2].lost = true;
  }
  s.host.cpu_count = 16;
  s.host.cpu = host::CpuShares{45.2, 40.1, 5.1, 0.0, 0.0};
  s.host.mem_total_bytes = 64ull << 30;
  s.host.mem_used_bytes = static_cast<uint64_t>(18.4 * (1ull << 30));
  s.host.load1 = 1.2;
  s.host.load5 = 0.9;
  s.host.load15 = 0.8;
  s.host.psi_io = host::Pressure{2.5, 1.0, 0};
  s.host.cgroup_cpu_quota_cpus = 8.0;
  s.host.shm_total_bytes = 32'000'000'000;
  s.host.shm_used_bytes = 1'000'000;
  return s;
}

TEST(StatusLine, SeedFourFormForOneGpu) {
  auto s = Snapshot(1);
  s.gpus[0].mem_used_bytes = static_cast<uint64_t>(12.3 * (1ull << 30));
  s.gpus[0].mem_total_bytes = 24ull << 30;
  EXPECT_EQ(RenderStatusLine(s),
            "GPU: 85% | VRAM:12.3/24.0GB(51.2%) | CPU: 45.2% | RAM:18.4/64.0GB(28.7%)");
}

TEST(StatusLine, PerGpuWhenSeveralAndNoGpu) {
  EXPECT_EQ(
      RenderStatusLine(Snapshot(3)),
      "GPU0: 85% | VRAM0:12.0/80.0GB(15.0%) | GPU1: 55% | VRAM1:12.5/80.0GB(15.6%) | GPU2: LOST | "
      "CPU: 45.2% | RAM:18.4/64.0GB(28.7%)");
  EXPECT_EQ(RenderStatusLine(Snapshot(0)), "GPU: n/a | CPU: 45.2% | RAM:18.4/64.0GB(28.7%)");
}

TEST(Top, GoldenText) {
  testing::ExpectGolden("top_3gpu.txt", RenderTopText(H100Header(3), Snapshot(3)));
  auto h = H100Header(0);
  h.gpu_note = "no NVIDIA GPU: libnvidia-ml.so.1 not found — GPU metrics unavailable";
  testing::ExpectGolden("top_nogpu.txt", RenderTopText(h, Snapshot(0)));
}

TEST(Top, GoldenJson) {
  testing::ExpectGolden("top_1gpu.json", RenderTopJson(H100Header(1), Snapshot(1)));
}

/// GPU 0 with GPM values (the issue 28 H100 during a bf16 matmul burn), GPU 1 without a value
/// (absent in the driver's answer), GPU 2 in MIG mode (no GPM, with the backend's note).
sample::Sample WithGpm(sample::Sample s, sample::RecordingHeader& h) {
  gpu::GpmMetrics x;
  x.window_ns = 5'000'000'000;
  x.graphics_active_pct = 99.4;
  x.sm_active_pct = 96.1;
  x.sm_occupancy_pct = 14.2;
  x.tensor_active_pct = 93.3;
  x.tensor_hmma_pct = 93.3;
  x.dram_active_pct = 24.6;
  x.fp16_active_pct = 0.0;
  x.fp32_active_pct = 1.2;
  x.fp64_active_pct = 0.0;
  x.pcie_tx_mibps = 12.5;
  x.pcie_rx_mibps = 1200.0;
  x.nvlink_tx_mibps = 0;
  x.nvlink_rx_mibps = 0;
  s.gpus[0].gpm = x;
  h.gpus[0].gpm = true;
  if (s.gpus.size() > 1) {
    gpu::GpmMetrics second;
    second.window_ns = 5'000'000'000;
    second.sm_active_pct = 21.7;
    s.gpus[1].gpm = second;
    h.gpus[1].gpm = true;
  }
  if (s.gpus.size() > 2) {
    s.gpus[2] = s.gpus[1];
    s.gpus[2].gpm.reset();
    h.gpus[2].gpm_note = "MIG is enabled";
  }
  return s;
}

// Issue 28: SM active, tensor and DRAM beside utilization where a GPU has GPM; why not, once.
TEST(Top, GoldenTextWithGpm) {
  auto h = H100Header(3);
  const auto s = WithGpm(Snapshot(3), h);
  const std::string text = RenderTopText(h, s);
  testing::ExpectGolden("top_3gpu_gpm.txt", text);
  EXPECT_NE(text.find("UTIL  MEMBW SM ACT TENSOR  DRAM  MEMORY"), std::string::npos) << text;
  EXPECT_NE(text.find("GPM   GPU 2: MIG is enabled\n"), std::string::npos) << text;
  // No GPU with values: no columns, only the reason.
  auto pre_hopper = H100Header(1);
  pre_hopper.gpus[0].gpm_note = "not supported by this GPU (GPM needs Hopper or later)";
  const std::string old = RenderTopText(pre_hopper, Snapshot(1));
  EXPECT_EQ(old.find("SM ACT"), std::string::npos) << old;
  EXPECT_NE(old.find("GPM   not supported by this GPU (GPM needs Hopper or later)\n"),
            std::string::npos)
      << old;
  // The status line stays as seed 004 has it.
  EXPECT_EQ(RenderStatusLine(s).find("GPM"), std::string::npos);
}

TEST(Top, JsonHasTheRecordingsGpmKeys) {
  auto h = H100Header(1);
  testing::ExpectGolden("top_1gpu_gpm.json", RenderTopJson(h, WithGpm(Snapshot(1), h)));
}

TEST(Summary, GoldenTextAndJson) {
  sample::Recording rec;
  rec.header = H100Header(4);
  const double mem_gib[] = {12.5, 12.45, 12.52, 12.48};
  for (int t = 0; t < 10; ++t) {
    auto s = Snapshot(4);
    s.mono_ns = t * 1'000'000'000LL;
    for (size_t i = 0; i < 4; ++i) {
      s.gpus[i] = gpu::GpuSample{};
      s.gpus[i].mem_used_bytes =
          static_cast<uint64_t>((mem_gib[i] + 0.01 * (t % 3)) * (1ull << 30));
      s.gpus[i].mem_total_bytes = 24ull << 30;
      s.gpus[i].util_gpu_pct = static_cast<uint32_t>(t % 2 == 0 ? 90 : 70 + 5 * i);
      s.gpus[i].power_mw = 150'000;
    }
    rec.samples.push_back(s);
  }
  rec.exit_code = 0;
  auto summary = analysis::Summarize(rec);
  testing::ExpectGolden("summary_4gpu.txt", RenderSummaryText(summary));
  testing::ExpectGolden("summary_4gpu.json", RenderSummaryJson(summary));
}

TEST(LowUtilWarning, NamesTheChecks) {
  auto text = RenderLowUtilWarning(11.0, 10);
  EXPECT_NE(text.find("LOW GPU UTILIZATION (11.0% over the last 10 samples)"), std::string::npos);
  EXPECT_NE(text.find("num_workers"), std::string::npos);
}

// Issue 12, finding 6: the hostname and GPU names (NVML's strings) are shown escaped, and the
// NAME column is cut on the escaped text, so the columns after it stay aligned.
TEST(Top, ControlCharactersAreEscapedAndColumnsStayAligned) {
  auto h = H100Header(2);
  h.hostname = testing::kHostileName;
  h.gpus[0].name = testing::kHostileName;
  h.gpus[1].name = "\r";
  const std::string text = RenderTopText(h, Snapshot(2));
  EXPECT_EQ(testing::RawControlBytes(text), "");
  EXPECT_NE(text.find(std::string("stallscope top  ") + std::string(testing::kHostileEscaped)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  0  " + Elide(std::string(testing::kHostileEscaped), 24) + "   85%"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  1  " + fmt::format("{:<24}", "\\r") + "   55%"), std::string::npos)
      << text;
  auto none = H100Header(0);
  none.gpu_note = testing::kHostileName;
  EXPECT_EQ(testing::RawControlBytes(RenderTopText(none, Snapshot(0))), "");
}

TEST(Summary, ControlCharactersAreEscaped) {
  analysis::RecordingSummary s;
  s.hostname = testing::kHostileName;
  s.gpu_note = testing::kHostileName;
  s.warnings.push_back(testing::kHostileName);
  const std::string text = RenderSummaryText(s);
  EXPECT_EQ(testing::RawControlBytes(text), "");
  EXPECT_NE(text.find(testing::kHostileEscaped), std::string::npos) << text;
  EXPECT_EQ(testing::RawControlBytes(RenderSummaryJson(s)), "");
}

}  // namespace
}  // namespace stallscope::report
