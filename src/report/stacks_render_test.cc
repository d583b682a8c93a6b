#include "report/stacks_render.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <string>

namespace stallscope::report {
namespace {

diagnose::StackReport Example() {
  diagnose::StackReport s;
  s.present = true;
  s.main_hz = 50;
  s.worker_hz = 10;
  s.samples = 900;
  s.steady_samples = 800;
  s.torn = 3;
  s.cpu_s = 0.125;
  diagnose::StackLine metrics;
  metrics.where = "train.py:141";
  metrics.file = "train.py";
  metrics.function = "heavy_metrics";
  metrics.line = 141;
  metrics.text = "probs = logits.softmax(1).cpu().numpy()";
  metrics.samples = 416;
  metrics.share = 0.52;
  diagnose::StackLine sort = metrics;
  sort.where = "train.py:143";
  sort.line = 143;
  sort.text = "order = np.argsort(probs)\x1b[2J";  // the job's text: escaped
  sort.samples = 248;
  sort.share = 0.31;
  sort.via = "numpy/core/fromnumeric.py:1133 argsort";
  sort.via_share = 1;
  s.phases.push_back({"other", 800, {metrics, sort}});
  s.unreadable.push_back("pid 7: may not read");
  return s;
}

TEST(StacksRender, TextNamesThePhasesLinesAndTheirShares) {
  const std::string text = RenderStacksText(Example());
  EXPECT_EQ(text,
            "Stacks  where the Python was in the steady steps: the main thread by phase (800 "
            "samples at 50 Hz); 3 torn reads dropped\n"
            "  other (800)  52%  train.py:141  probs = logits.softmax(1).cpu().numpy()\n"
            "               31%  train.py:143  order = np.argsort(probs)\\x1b[2J  (in "
            "numpy/core/fromnumeric.py:1133 argsort 100%)\n"
            "  not sampled: pid 7: may not read\n");
  EXPECT_EQ(RenderStacksText({}), "");
}

TEST(StacksRender, JsonHasEveryFieldAndNullWithoutSamples) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject();
  WriteStacksJson(w, Example());
  w.EndObject();
  const auto j = nlohmann::json::parse(out);
  const auto& s = j.at("stacks");
  EXPECT_EQ(s.at("main_hz"), 50);
  EXPECT_EQ(s.at("torn"), 3);
  EXPECT_DOUBLE_EQ(s.at("cpu_s").get<double>(), 0.125);
  ASSERT_EQ(s.at("phases").size(), 1u);
  const auto& line = s.at("phases")[0].at("lines")[1];
  EXPECT_EQ(line.at("where"), "train.py:143");
  EXPECT_EQ(line.at("via"), "numpy/core/fromnumeric.py:1133 argsort");
  EXPECT_DOUBLE_EQ(line.at("share").get<double>(), 0.31);
  EXPECT_TRUE(s.at("workers").is_null());
  EXPECT_EQ(s.at("unreadable")[0], "pid 7: may not read");

  std::string none;
  JsonWriter w2(none);
  w2.BeginObject();
  WriteStacksJson(w2, {});
  w2.EndObject();
  EXPECT_TRUE(nlohmann::json::parse(none).at("stacks").is_null());
}

// Issue 40: a job that marked no steps shows where its Python was over the whole run; a job's
// other threads (--stacks-threads all) are a group; many processes not sampled are one line past
// the first few (report.json has each).
TEST(StacksRender, WholeRunThreadsAndManyProcessesNotSampled) {
  diagnose::StackReport s = Example();
  s.phases.clear();
  s.steady_samples = 0;
  s.torn = 0;
  s.whole_run = diagnose::StackGroup{"whole_run", 90, {diagnose::StackLine{}}};
  s.whole_run->lines[0].where = "job.py:3";
  s.whole_run->lines[0].share = 1;
  s.threads = diagnose::StackGroup{"threads", 10, {s.whole_run->lines[0]}};
  s.threads->lines[0].where = "log.py:9";
  for (int pid = 8; pid < 18; ++pid) s.unreadable.push_back(fmt::format("pid {}: gone", pid));
  const std::string text = RenderStacksText(s);
  EXPECT_EQ(text,
            "Stacks  where the Python was: the job marked no steps, so each main thread over the "
            "whole run (90 samples)\n"
            "  threads (10)   100%  log.py:9\n"
            "  whole_run (90) 100%  job.py:3\n"
            "  not sampled: pid 7: may not read\n"
            "  not sampled: pid 8: gone\n"
            "  not sampled: pid 9: gone\n"
            "  not sampled: pid 10: gone\n"
            "  not sampled: pid 11: gone\n"
            "  not sampled: pid 12: gone\n"
            "  not sampled: pid 13: gone\n"
            "  not sampled: pid 14: gone\n"
            "  not sampled: 3 more processes (report.json stacks.unreadable)\n");
  std::string out;
  JsonWriter w(out);
  w.BeginObject();
  WriteStacksJson(w, s);
  w.EndObject();
  const auto j = nlohmann::json::parse(out).at("stacks");
  EXPECT_EQ(j.at("whole_run").at("samples"), 90);
  EXPECT_EQ(j.at("threads").at("lines")[0].at("where"), "log.py:9");
  EXPECT_EQ(j.at("unreadable").size(), 11u);
  // Absent groups of the new kinds leave no key (reports of runs without them are unchanged).
  std::string plain;
  JsonWriter w2(plain);
  w2.BeginObject();
  WriteStacksJson(w2, Example());
  w2.EndObject();
  EXPECT_FALSE(nlohmann::json::parse(plain).at("stacks").contains("whole_run"));
}

}  // namespace
}  // namespace stallscope::report
