#include "report/stacks_render.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace stallscope::report
