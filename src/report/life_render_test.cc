#include "report/life_render.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "terminal_safe.h"

namespace stallscope::report {
namespace {

using diagnose::LifePart;
using diagnose::LifePartKind;

/// The H100 ResNet-50 of issue 26: 15 s of start-up, a 16 s first forward/backward, 4 s steady.
diagnose::RunLife ResNet() {
  diagnose::RunLife l;
  l.has_steps = true;
  l.wall_s = 36.2;
  l.startup_s = 15.1;
  l.warmup_s = 16.2;
  l.warmup_steps = 3;
  l.steady_s = 4.1;
  l.steady_steps = 77;
  l.tail_s = 0.8;
  l.startup = {{LifePartKind::kInterpreter, 0.07, 0, {}},
               {LifePartKind::kImportTorch, 3.9, 0, {}},
               {LifePartKind::kSetup, 5.5, 0, {}},
               {LifePartKind::kCudaInit, 0.04, 0, {}},  // under 50 ms: left out of the line
               {LifePartKind::kFirstBatch, 5.6, 8, {}}};
  l.warmup = {{LifePartKind::kCudnnBenchmark, 0, 0, {}},
              {LifePartKind::kPhase, 12.0, 0, "forward_pass"},
              {LifePartKind::kPhase, 4.0, 0, "backward_pass"}};
  l.tail = {{LifePartKind::kExit, 0.8, 0, {}}};
  l.mostly_startup = true;
  return l;
}

TEST(RenderLifeLine, TheStagesWithWhatIsKnownOfThem) {
  EXPECT_EQ(
      RenderLifeLine(ResNet()),
      "start-up 15.1 s (Python start 70 ms, import torch 3.9 s, the job's set-up 5.5 s, first "
      "batch 5.6 s: 8 workers started) · warm-up 16.2 s over 3 steps (cudnn.benchmark on, "
      "forward_pass +12.0 s, backward_pass +4.0 s) · steady 4.1 s over 77 steps · tail "
      "800 ms (exit 800 ms)");
}

TEST(RenderLifeLine, AtMostFourPartsNoWarmupAndNoTinyTail) {
  diagnose::RunLife l = ResNet();
  l.startup.push_back({LifePartKind::kPhase, 2.0, 0, "eval_forward"});
  l.warmup_steps = 0;
  l.warmup_s = 0;
  l.tail_s = 0.01;
  const std::string line = RenderLifeLine(l);
  EXPECT_EQ(line.find("eval_forward"), std::string::npos) << line;
  EXPECT_EQ(line.find("warm-up"), std::string::npos) << line;
  EXPECT_EQ(line.find("tail"), std::string::npos) << line;
  EXPECT_EQ(RenderLifeLine(diagnose::RunLife{}), "");
}

TEST(RenderLifeLine, PhaseNamesAreEscaped) {
  diagnose::RunLife l = ResNet();
  l.warmup[1].phase = std::string(testing::kHostileName);
  EXPECT_EQ(testing::RawControlBytes(RenderLifeLine(l)), "");
}

TEST(RenderLifeHeadline, OnlyWhenStartupIsMostOfTheRun) {
  EXPECT_EQ(RenderLifeHeadline(ResNet()),
            "START-UP 31.3 s of this 36.2 s run (86%) was start-up and warm-up; the verdict below "
            "is the steady state's (4.1 s over 77 steps)\n");
  diagnose::RunLife l = ResNet();
  l.mostly_startup = false;
  EXPECT_EQ(RenderLifeHeadline(l), "");
}

TEST(WriteLifeJson, NumbersPartsAndTheWindow) {
  diagnose::RunLife l = ResNet();
  l.steady_begin_ns = 31'300'000'000 + 5;
  l.steady_end_ns = 35'400'000'000 + 5;
  std::string out;
  JsonWriter w(out);
  w.BeginObject();
  WriteLifeJson(w, l, 5);
  w.EndObject();
  auto j = nlohmann::json::parse(out);
  const auto& life = j["life"];
  EXPECT_EQ(life["text"], RenderLifeLine(l));
  EXPECT_EQ(life["mostly_startup"], true);
  EXPECT_EQ(life["sure"], false);
  EXPECT_EQ(life["warmup_steps"], 3);
  EXPECT_DOUBLE_EQ(life["steady_window"]["begin_s"].get<double>(), 31.3);
  EXPECT_DOUBLE_EQ(life["steady_window"]["end_s"].get<double>(), 35.4);
  ASSERT_EQ(life["startup"].size(), 5u);
  EXPECT_EQ(life["startup"][4]["what"], "first_batch");
  EXPECT_EQ(life["startup"][4]["count"], 8);
  EXPECT_TRUE(life["startup"][4]["phase"].is_null());
  EXPECT_EQ(life["warmup"][1]["phase"], "forward_pass");
  diagnose::RunLife none;
  std::string empty;
  JsonWriter e(empty);
  e.BeginObject();
  WriteLifeJson(e, none, 0);
  e.EndObject();
  EXPECT_TRUE(nlohmann::json::parse(empty)["life"]["steady_window"].is_null());
}

}  // namespace
}  // namespace stallscope::report
