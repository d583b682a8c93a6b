// The data the HTML page embeds: golden for the fixed run directories of tests/data/runs (the
// same ones report.txt's goldens use), and the envelope that keeps every peak.

#include "report/html_data.h"

#include <iostream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "diagnose/run_analysis.h"
#include "diagnose/verdict.h"
#include "golden.h"

namespace stallscope::report {
namespace {

using diagnose::SeriesPoint;

std::string RunData(const std::string& name, const PageLimits& limits = {}) {
  std::string dir = std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/runs/" + name;
  auto data = rundir::LoadRun(dir);
  EXPECT_TRUE(data.ok()) << data.error().message;
  if (!data.ok()) return "";
  auto report = diagnose::AnalyzeRun(*data).report;
  return RunPageData(*data, report, limits);
}

TEST(HtmlDataGolden, DataBoundCpuRun) {
  testing::ExpectGolden("html_run_data_cpu.json", RunData("data_cpu") + "\n");
}
TEST(HtmlDataGolden, ThrottledGpuRun) {
  testing::ExpectGolden("html_run_gpu_throttled.json", RunData("gpu_throttled") + "\n");
}

TEST(HtmlData, TheRunPageHasTheVerdictTheSawtoothAndTheDataLoadingBands) {
  auto j = nlohmann::json::parse(RunData("data_cpu"));
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["kind"], "run");
  EXPECT_EQ(j["verdict"]["principal"]["class"], "data_bound_cpu");
  bool loading = false;
  for (const auto& b : j["timeline"]["bands"]) {
    if (b["phase"] == "data_loading") {
      loading = true;
      ASSERT_EQ(b["b"].size(), b["e"].size());
      ASSERT_FALSE(b["b"].empty());
      for (size_t i = 0; i < b["b"].size(); ++i) EXPECT_LE(b["b"][i], b["e"][i]);
    }
  }
  EXPECT_TRUE(loading) << j["timeline"]["bands"].dump();
  ASSERT_FALSE(j["steps"].empty());
  EXPECT_EQ(j["steps"][0]["t"].size(), j["steps"][0]["ms"].size());
  ASSERT_FALSE(j["step_phases"].empty());
  for (const auto& row : j["step_phases"][0]["ms"])
    EXPECT_EQ(row.size(), j["step_phases"][0]["names"].size());
}

TEST(HtmlData, FewerBandsThanTheLimitWhateverTheRun) {
  PageLimits tight;
  tight.max_bands_per_phase = 5;
  tight.max_steps = 4;
  auto j = nlohmann::json::parse(RunData("data_cpu", tight));
  for (const auto& b : j["timeline"]["bands"]) EXPECT_LE(b["b"].size(), 5u) << b["phase"];
  // Thinned to every k-th step, outliers kept on top.
  EXPECT_LE(j["steps"][0]["t"].size(), 4u + j["steps"][0]["outliers"].size());
}

TEST(EnvelopeSeries, ShortSeriesComeBackUnchanged) {
  std::vector<SeriesPoint> p = {{0, 1}, {1, 2}, {2, 3}};
  auto e = EnvelopeSeries(p, 2);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[2].value, 3);
}

TEST(EnvelopeSeries, EverySpikeAndDipSurvives) {
  // 100,000 points at 50% with one spike to 100 and one dip to 0: 100 buckets keep both.
  std::vector<SeriesPoint> p;
  for (int i = 0; i < 100'000; ++i) p.push_back({i * 0.01, 50});
  p[31'337].value = 100;
  p[77'777].value = 0;
  auto e = EnvelopeSeries(p, 100);
  EXPECT_LE(e.size(), 200u);
  double hi = 0, lo = 100;
  for (size_t i = 0; i < e.size(); ++i) {
    hi = std::max(hi, e[i].value);
    lo = std::min(lo, e[i].value);
    if (i > 0) {
      EXPECT_LE(e[i - 1].t_s, e[i].t_s);
    }
  }
  EXPECT_EQ(hi, 100);
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(e.front().t_s, 0);
}

// Issue 14: a one-hour run at 1 Hz gives at most 2 MB of HTML data; here 8 GPUs with the
// driver's sub-second samples (6 per second each), every series reduced to envelopes, and a
// single one-sample spike still in the page.
TEST(HtmlData, AnHourOfEightGpusAtOneHertzStaysUnderTwoMegabytes) {
  sample::Recording rec;
  for (uint32_t g = 0; g < 8; ++g) {
    gpu::GpuStatic gpu;
    gpu.index = g;
    gpu.name = "GPU";
    rec.header.gpus.push_back(gpu);
  }
  const int64_t t0 = 1'000'000'000;
  for (int64_t s = 0; s < 3600; ++s) {
    sample::Sample x;
    x.mono_ns = t0 + s * 1'000'000'000;
    x.wall_ns = x.mono_ns;
    for (uint32_t g = 0; g < 8; ++g) {
      gpu::GpuSample gs;
      gs.util_gpu_pct = static_cast<uint32_t>(s % 4 < 2 ? 100 : 0);  // the sawtooth
      gs.mem_used_bytes = uint64_t{40} << 30;
      gs.power_mw = 300'000 + static_cast<uint32_t>(s % 7) * 1000;
      gs.sm_clock_mhz = 1980;
      for (size_t k = 0; k < 6; ++k) {
        gs.util_samples[k] = {
            (x.wall_ns - 1'000'000'000 + static_cast<int64_t>(k) * 166'000'000) / 1000,
            static_cast<uint32_t>((s * 6 + static_cast<int64_t>(k)) % 5 * 25)};
      }
      gs.util_sample_count = 6;
      x.gpus.push_back(gs);
    }
    rec.samples.push_back(std::move(x));
  }
  rec.samples[1234].gpus[3].power_mw = 700'000;  // one spike
  auto summary = analysis::Summarize(rec);
  std::string page = RecordingPageData("hour.jsonl", rec, summary);
  EXPECT_LT(page.size(), 2'000'000u);
  auto j = nlohmann::json::parse(page);
  double peak = 0;
  for (const auto& series : j["timeline"]["series"]) {
    if (series["name"] != "gpu3.power_w") continue;
    for (const auto& v : series["v"]) peak = std::max(peak, v.get<double>());
  }
  EXPECT_EQ(peak, 700.0);
  std::cout << "page data for 8 GPUs x 3600 s: " << page.size() << " bytes\n";
}

/// Two GPUs sampled at 1 Hz for 8 s; GPU 0 gives a GPM window every 2 s, at 20% SM active then
/// 60% (mean 40%), tensor 10% and no DRAM value; GPU 1 has no GPM.
sample::Recording GpmRecording() {
  sample::Recording rec;
  rec.header.gpus.resize(2);
  rec.header.gpus[1].index = 1;
  rec.header.gpus[0].gpm = true;
  rec.header.gpus[1].gpm_note = "not supported by this GPU (GPM needs Hopper or later)";
  for (int64_t t = 1; t <= 8; ++t) {
    sample::Sample x;
    x.mono_ns = x.wall_ns = t * 1'000'000'000;
    x.gpus.resize(2);
    for (auto& g : x.gpus) g.util_gpu_pct = 99;
    if (t % 2 == 0) {
      gpu::GpmMetrics m;
      m.window_ns = 2'000'000'000;
      m.sm_active_pct = t <= 4 ? 20 : 60;
      m.tensor_active_pct = 10;  // the driver gives no DRAM value here
      x.gpus[0].gpm = m;
    }
    rec.samples.push_back(std::move(x));
  }
  return rec;
}

// Issue 28: the GPM series reach the page, and the GPU table has the summary's GPM means.
TEST(HtmlData, GpmSeriesAndMeansPerGpu) {
  const sample::Recording rec = GpmRecording();
  auto j = nlohmann::json::parse(RecordingPageData("gpm.jsonl", rec, analysis::Summarize(rec)));
  std::set<std::string> names;
  for (const auto& x : j["timeline"]["series"]) names.insert(x["name"].get<std::string>());
  EXPECT_TRUE(names.count("gpu0.sm_active_pct") && names.count("gpu0.tensor_active_pct"))
      << j["timeline"].dump();
  EXPECT_FALSE(names.count("gpu0.dram_active_pct") || names.count("gpu1.sm_active_pct"));
  ASSERT_EQ(j["gpus"].size(), 2u);
  EXPECT_EQ(j["gpus"][0]["sm_active_mean"], 40.0);
  EXPECT_EQ(j["gpus"][0]["tensor_active_mean"], 10.0);
  EXPECT_TRUE(j["gpus"][0]["dram_active_mean"].is_null());
  EXPECT_TRUE(j["gpus"][1]["sm_active_mean"].is_null());
}

TEST(HtmlData, ScriptEndingStringsCannotLeaveTheDataElement) {
  std::string dir = std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/runs/data_cpu";
  auto data = rundir::LoadRun(dir);
  ASSERT_TRUE(data.ok());
  auto report = diagnose::BuildRunReport(*data);
  report.meta.name = "</script><script>alert(1)</script>";
  report.meta.command = {"\"><img src=x onerror=alert(1)>", "<!--"};
  std::string page = RunPageData(*data, report);
  EXPECT_EQ(page.find('<'), std::string::npos);
  auto j = nlohmann::json::parse(page);
  EXPECT_EQ(j["title"], "</script><script>alert(1)</script>");
}

}  // namespace
}  // namespace stallscope::report
