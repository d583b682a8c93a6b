// The HTML page: self-contained (no URL to fetch), the verdict as escaped static HTML, and the
// job's strings unable to become markup.

#include "report/html_render.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "analysis/summary.h"
#include "base/thresholds.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace stallscope::report {
namespace {

diagnose::Verdict HostileVerdict() {
  diagnose::Finding f;
  f.cls = diagnose::FindingClass::kDataBoundCpu;
  f.confidence = 0.9;
  f.cost_fraction = 0.41;
  f.reason = "the loop waits in </script><script>alert(1)</script>";
  f.recommendations.push_back({"num_workers=0 \"><img src=x onerror=alert(2)>", 0});
  f.evidence.push_back({"kernel \x1b]0;title\x07 & <b>", "m", 1, "", std::nullopt});
  diagnose::Verdict v;
  v.principal = f;
  v.caveats.push_back("busy host: <i>");
  return v;
}

TEST(EscapeHtml, MarkupAndControlCharacters) {
  EXPECT_EQ(EscapeHtml("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
  EXPECT_EQ(EscapeHtml(std::string("x\x1b[31my\0z", 9)), "x\xEF\xBF\xBD[31my\xEF\xBF\xBDz");
  EXPECT_EQ(EscapeHtml("line\nnext\ttab"), "line\nnext\ttab");
}

TEST(HtmlPage, TheVerdictIsStaticEscapedHtml) {
  diagnose::Verdict v = HostileVerdict();
  std::string page = RenderHtmlPage("run", "<title>", &v, "{}");
  EXPECT_NE(page.find("data_bound_cpu"), std::string::npos);
  EXPECT_NE(page.find("costs ~41% of wall time"), std::string::npos);
  EXPECT_NE(page.find("&lt;/script&gt;&lt;script&gt;alert(1)"), std::string::npos);
  EXPECT_NE(page.find("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"), std::string::npos);
  EXPECT_EQ(page.find("<img"), std::string::npos);
  EXPECT_EQ(page.find("alert(1)</script>"), std::string::npos);
  EXPECT_EQ(page.find('\x1b'), std::string::npos);
  EXPECT_NE(page.find("<title>stallscope run: &lt;title&gt;</title>"), std::string::npos);
}

// Issue 29: text that quotes a threshold is formatted from the table, page.js's included.
TEST(HtmlPage, PageScriptQuotesTheOutlierCutFromTheTable) {
  std::string page = RenderHtmlPage("run", "r", nullptr, "{}");
  EXPECT_NE(page.find(fmt::format("outliers (robust z > {})", kThresholds.outlier_robust_z.value)),
            std::string::npos);
  EXPECT_EQ(page.find("{{outlier_robust_z}}"), std::string::npos);
}

TEST(HtmlPage, SelfContainedNothingToFetch) {
  std::string page = RenderHtmlPage("recording", "r.jsonl", nullptr, "{}");
  // No element that loads anything: every script and style is inline.
  EXPECT_FALSE(std::regex_search(page, std::regex("<script[^>]*\\ssrc=")));
  EXPECT_FALSE(std::regex_search(page, std::regex("<link[^>]*href=")));
  EXPECT_NE(page.find("default-src 'none'"), std::string::npos);
  EXPECT_NE(page.find("uPlot"), std::string::npos);  // the chart library is in the page
  // Exactly the page's own script elements (data, uPlot, page script): none ended early.
  size_t scripts = 0;
  for (size_t at = 0; (at = page.find("</script", at)) != std::string::npos; ++at) ++scripts;
  EXPECT_EQ(scripts, 3u);
  EXPECT_EQ(page.find("id=\"verdict\""), std::string::npos);  // no verdict for a recording
}

/// A recording of two GPUs, 20 samples at 1 Hz; GPU 0 with a GPM window every 2 s when `gpm`.
sample::Recording Recording(bool gpm) {
  sample::Recording rec;
  rec.header.gpus.resize(2);
  rec.header.gpus[1].index = 1;
  for (int64_t t = 1; t <= 20; ++t) {
    sample::Sample x;
    x.mono_ns = x.wall_ns = t * 1'000'000'000;
    x.gpus.resize(2);
    for (auto& g : x.gpus) {
      g.util_gpu_pct = 99;
      g.mem_used_bytes = uint64_t{40} << 30;
      g.power_mw = 500'000;
    }
    if (gpm && t % 2 == 0) {
      gpu::GpmMetrics m;
      m.window_ns = 2'000'000'000;
      m.sm_active_pct = t < 10 ? 22 : 96;  // "utilization 99% but SM active 22%"
      m.tensor_active_pct = t < 10 ? 0 : 93;
      m.dram_active_pct = 25;
      x.gpus[0].gpm = m;
    }
    rec.samples.push_back(std::move(x));
  }
  return rec;
}

/// The page as Chromium leaves it (#selftest: each canvas's painted pixels), as
/// tests/e2e/html_e2e_test.cc opens it: headless, no network.
struct OpenedPage {
  std::string dom, log;
  nlohmann::json charts;
};
OpenedPage OpenInChromium(const std::string& html, const testing::TempDir& dir) {
  const std::string path = dir.Sub("page.html");
  std::ofstream(path) << html;
  std::filesystem::create_directories(dir.path() / "log");
  auto r =
      testing::RunProcess({"/usr/bin/chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--no-first-run", "--user-data-dir=" + dir.Sub("profile"),
                           "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
                           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
                           "--window-size=1280,2400", "--dump-dom", "file://" + path + "#selftest"},
                          testing::EnvironmentWithout({}), dir.path() / "log", 120);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  OpenedPage p{r.out, r.err, nullptr};
  const std::string tag = "<pre id=\"selftest\">";
  if (size_t at = p.dom.find(tag); at != std::string::npos) {
    size_t end = p.dom.find("</pre>", at);
    p.charts =
        nlohmann::json::parse(p.dom.substr(at + tag.size(), end - at - tag.size()), nullptr, false);
  }
  return p;
}

// Issue 28: a GPU with GPM gets its chart (utilization, SM active, tensor, DRAM, with a legend)
// and its means in the GPU table; a recording without GPM (an older run) has neither and still
// draws. Skipped where Chromium is not installed (apt-get install chromium).
TEST(HtmlPage, GpmChartAndMeansOnlyWhereRecorded) {
  if (!std::filesystem::exists("/usr/bin/chromium")) GTEST_SKIP() << "no /usr/bin/chromium";
  for (bool gpm : {true, false}) {
    SCOPED_TRACE(gpm ? "with GPM" : "without GPM");
    testing::TempDir dir("stallscope_html_gpm");
    const sample::Recording rec = Recording(gpm);
    OpenedPage p =
        OpenInChromium(RenderRecordingHtml("r.jsonl", rec, analysis::Summarize(rec)), dir);
    ASSERT_TRUE(p.charts.is_array()) << p.log;
    std::vector<std::string> titles;
    for (const auto& c : p.charts) {
      titles.push_back(c["title"].get<std::string>());
      EXPECT_GT(c["colored"].get<int64_t>(), 200) << c.dump();
    }
    const bool chart = std::count(titles.begin(), titles.end(),
                                  "GPU 0: utilization and hardware activity (GPM, %)") == 1;
    EXPECT_EQ(chart, gpm) << p.charts.dump();
    EXPECT_EQ(std::count(titles.begin(), titles.end(),
                         "GPU 1: utilization and hardware activity (GPM, %)"),
              0);
    EXPECT_EQ(p.dom.find("<th>SM active mean %</th>") != std::string::npos, gpm);
    if (gpm) {
      for (const char* legend :
           {">utilization<", ">SM active<", ">tensor active<", ">DRAM active<"})
        EXPECT_NE(p.dom.find(legend), std::string::npos) << legend;
      EXPECT_NE(p.dom.find(">66.4<"), std::string::npos);  // (4 x 22 + 6 x 96) / 10
    }
    EXPECT_EQ(p.log.find("CONSOLE"), std::string::npos) << p.log;
    EXPECT_EQ(p.log.find("Uncaught"), std::string::npos) << p.log;
  }
}

}  // namespace
}  // namespace stallscope::report
