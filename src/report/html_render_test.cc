// The HTML page: self-contained (no URL to fetch), the verdict as escaped static HTML, and the
// job's strings unable to become markup.

#include "report/html_render.h"

#include <regex>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace stallscope::report
