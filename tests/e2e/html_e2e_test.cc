// `stallscope report --html` opened in Debian's headless Chromium from file://, networking off
// (issue 14's acceptance): every report kind draws each chart (a pixel count of every canvas,
// written by the page's #selftest), the verdict is in the DOM, nothing is logged to the console,
// and hostile names from the job render as text. `--png` writes decodable figures.
// Skipped where Chromium is not installed (apt-get install chromium).

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "hta_traces.h"
#include "subprocess.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using stallscope::testing::ProcessOutput;

std::string Chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (fs::exists(p)) return p;
  }
  return "";
}

class HtmlE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = stallscope::testing::FreshTestDir("stallscope_html_e2e");
    fs::create_directories(dir_ / "log");
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  ProcessOutput Stallscope(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {STALLSCOPE_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    return stallscope::testing::RunProcess(
        argv, stallscope::testing::EnvironmentWithout({"STALLSCOPE_"}), dir_ / "log", 300);
  }

  /// The DOM after the page ran (#selftest adds the canvases' pixel counts), and Chromium's log.
  struct Page {
    std::string dom;
    std::string log;
    json charts;
  };
  Page Open(const fs::path& html) {
    Page p;
    // No network: every host resolves to nothing and the proxy is a closed port.
    auto r = stallscope::testing::RunProcess(
        {Chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--user-data-dir=" + (dir_ / "profile").string(), "--proxy-server=127.0.0.1:9",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=5000", "--window-size=1280,2400", "--dump-dom",
         "file://" + fs::absolute(html).string() + "#selftest"},
        stallscope::testing::EnvironmentWithout({}), dir_ / "log", 120);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    p.dom = r.out;
    p.log = r.err;
    const std::string tag = "<pre id=\"selftest\">";
    size_t at = p.dom.find(tag);
    if (at != std::string::npos) {
      size_t end = p.dom.find("</pre>", at);
      p.charts = json::parse(p.dom.substr(at + tag.size(), end - at - tag.size()), nullptr, false);
    }
    return p;
  }

  /// Every chart drew its series; the page logged nothing (no error, no warning).
  void ExpectChartsDrawn(const Page& p, size_t at_least) {
    ASSERT_TRUE(p.charts.is_array()) << p.dom.substr(0, 2000);
    EXPECT_GE(p.charts.size(), at_least) << p.charts.dump();
    for (const auto& c : p.charts) {
      EXPECT_GT(c["colored"].get<int64_t>(), 200) << c.dump();
    }
    EXPECT_EQ(p.log.find("CONSOLE"), std::string::npos) << p.log;
    EXPECT_EQ(p.log.find("Uncaught"), std::string::npos) << p.log;
  }

  fs::path dir_;
};

const std::string kRuns = std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/runs/";

TEST_F(HtmlE2e, ARunDirectoryDrawsTimelineStepsAndBreakdownWithTheVerdictFirst) {
  if (Chromium().empty()) GTEST_SKIP() << "no chromium (apt-get install chromium)";
  auto r = Stallscope({"report", kRuns + "gpu_throttled", "--html", (dir_ / "r.html").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Page p = Open(dir_ / "r.html");
  // GPU utilization, memory, power, clock, host, step times, step breakdown, memory per GPU.
  ExpectChartsDrawn(p, 7);
  size_t verdict = p.dom.find("id=\"verdict\"");
  ASSERT_NE(verdict, std::string::npos);
  EXPECT_LT(verdict, p.dom.find("Timeline"));  // the verdict first
  EXPECT_NE(p.dom.find("gpu_throttled", verdict), std::string::npos);
  EXPECT_NE(p.dom.find("Fix, cheapest first"), std::string::npos);
}

TEST_F(HtmlE2e, ARecordingAndProfilerTracesDrawToo) {
  if (Chromium().empty()) GTEST_SKIP() << "no chromium (apt-get install chromium)";
  auto rec = Stallscope(
      {"report", kRuns + "gpu_throttled/recording.jsonl", "--html", (dir_ / "rec.html").string()});
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  ExpectChartsDrawn(Open(dir_ / "rec.html"), 5);
  const fs::path traces = stallscope::testing::HtaTracesDir() / "trace_filter";
  if (!fs::exists(traces)) GTEST_SKIP() << traces << " missing (../shared)";
  auto tr = Stallscope({"report", traces.string(), "--html", (dir_ / "tr.html").string()});
  ASSERT_EQ(tr.exit_code, 0) << tr.err;
  Page p = Open(dir_ / "tr.html");
  ExpectChartsDrawn(p, 4);  // step times and step breakdown of both ranks
  EXPECT_NE(p.dom.find("id=\"verdict\""), std::string::npos);
  EXPECT_NE(p.dom.find("Top kernels"), std::string::npos);
  EXPECT_NE(p.dom.find("GPU idle time and its causes"), std::string::npos);
}

TEST_F(HtmlE2e, HostileNamesFromTheJobRenderAsText) {
  if (Chromium().empty()) GTEST_SKIP() << "no chromium (apt-get install chromium)";
  fs::copy(kRuns + "data_cpu", dir_ / "run", fs::copy_options::recursive);
  const fs::path meta = dir_ / "run" / "run.json";
  json j = json::parse(stallscope::testing::Slurp(meta));
  j["name"] = "</script><script>document.title='pwned'</script>";
  j["command"] = {"\"><img src=x onerror=\"document.title='pwned'\">", "<b>bold</b>"};
  std::ofstream(meta) << j.dump();
  // The job's own code, as the stack sampler read it (stacks.jsonl frames: issue 31).
  const fs::path stacks = dir_ / "run" / "stacks.jsonl";
  std::string log = stallscope::testing::Slurp(stacks);
  const std::string plain = R"("function":"augment")";
  const std::string hostile = R"("function":"<img src=x onerror=\"document.title='pwned'\">")";
  ASSERT_NE(log.find(plain), std::string::npos);
  for (size_t at = 0; (at = log.find(plain, at)) != std::string::npos; at += hostile.size())
    log.replace(at, plain.size(), hostile);
  std::ofstream(stacks, std::ios::trunc) << log;
  auto r = Stallscope({"report", (dir_ / "run").string(), "--html", (dir_ / "h.html").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Page p = Open(dir_ / "h.html");
  ExpectChartsDrawn(p, 2);
  EXPECT_EQ(p.dom.find("pwned</title>"), std::string::npos);
  EXPECT_EQ(p.dom.find("<img"), std::string::npos);
  EXPECT_EQ(p.dom.find("<b>bold"), std::string::npos);
  // The names are there, as text.
  EXPECT_NE(p.dom.find("&lt;/script&gt;&lt;script&gt;document.title="), std::string::npos);
  EXPECT_NE(p.dom.find("\"&gt;&lt;img src=x onerror="), std::string::npos);
  // The stacks' table per phase, the hostile function name in it as text.
  EXPECT_NE(p.dom.find("Python: where the main thread was"), std::string::npos);
  EXPECT_NE(p.dom.find("data_loading ("), std::string::npos);
  EXPECT_NE(p.dom.find("train.py:130"), std::string::npos);
  EXPECT_NE(p.dom.find("&lt;img src=x onerror=\"document.title="), std::string::npos);
}

TEST_F(HtmlE2e, HostileKernelNamesFromATraceRenderAsText) {
  if (Chromium().empty()) GTEST_SKIP() << "no chromium (apt-get install chromium)";
  json t = json::parse(stallscope::testing::Slurp(std::string(STALLSCOPE_SOURCE_DIR) +
                                                  "/tests/data/traces/steps_kineto_gpu.json"));
  for (auto& e : t["traceEvents"]) {
    if (e.value("name", "") == "k1") e["name"] = "</script><script>document.title='pwned'</script>";
    if (e.value("name", "") == "k2") e["name"] = "\"><img src=x onerror=alert(1)>";
  }
  std::ofstream(dir_ / "hostile.json") << t.dump();
  auto r =
      Stallscope({"trace", (dir_ / "hostile.json").string(), "--html", (dir_ / "t.html").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Page p = Open(dir_ / "t.html");
  ExpectChartsDrawn(p, 2);
  EXPECT_EQ(p.dom.find("pwned</title>"), std::string::npos);
  EXPECT_EQ(p.dom.find("<img"), std::string::npos);
  EXPECT_NE(p.dom.find("&lt;/script&gt;&lt;script&gt;document.title="), std::string::npos);
}

TEST_F(HtmlE2e, PngFiguresAndOverwriteRules) {
  const std::string out = (dir_ / "r.html").string();
  const std::string figs = (dir_ / "figs").string();
  auto r = Stallscope({"report", kRuns + "gpu_throttled", "--html", out, "--png", figs});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"utilization.png", "memory.png", "load_balance.png"}) {
    std::string png = stallscope::testing::Slurp(dir_ / "figs" / f);
    ASSERT_GT(png.size(), 1000u) << f;
    EXPECT_EQ(png.substr(1, 3), "PNG") << f;
  }
  // Nothing the user owns is replaced without --force, and an input is never an output.
  auto again = Stallscope({"report", kRuns + "gpu_throttled", "--html", out});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
  auto figs_again = Stallscope({"report", kRuns + "gpu_throttled", "--png", figs});
  EXPECT_EQ(figs_again.exit_code, 1);
  EXPECT_NE(figs_again.err.find("--force"), std::string::npos) << figs_again.err;
  EXPECT_EQ(Stallscope({"report", kRuns + "gpu_throttled", "--html", out, "--force"}).exit_code, 0);
  const std::string rec = kRuns + "gpu_throttled/recording.jsonl";
  auto self = Stallscope({"report", rec, "--html", rec, "--force"});
  EXPECT_EQ(self.exit_code, 2) << self.err;
  EXPECT_EQ(Stallscope({"report", kRuns + "gpu_throttled"}).exit_code, 2);  // neither output
  auto missing = Stallscope({"report", (dir_ / "nope").string(), "--html", out, "--force"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1) << missing.err;
}

}  // namespace
