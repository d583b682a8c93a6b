#include "trace/timeline.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "trace_events.h"

namespace stallscope::trace {
namespace {

using testing::Add;
using testing::Ev;
using testing::kAnn;
using testing::kK;
using testing::kOp;
using testing::kRt;

constexpr auto kGpuAnn = EventKind::kGpuUserAnnotation;

RankTrace TraceOf(const std::vector<Ev>& events) {
  RankTrace t;
  for (const Ev& e : events) Add(t, e);
  return t;
}

std::vector<int64_t> Numbers(const std::vector<Step>& steps) {
  std::vector<int64_t> out;
  for (const Step& s : steps) out.push_back(s.number);
  return out;
}

TEST(FindSteps, StepNameTable) {
  struct Case {
    std::string name;
    std::optional<int64_t> want;
  } cases[] = {
      {"ProfilerStep#3", 3},
      {"ProfilerStep#0", 0},
      {"ProfilerStep#-2", -2},
      {"ProfilerStep#", {}},
      {"ProfilerStep#x", {}},
      {"ProfilerStep#3a", {}},
      {"ProfilerStep# 3", {}},
      {"profilerstep#3", {}},
      {"ProfilerStep3", {}},
      {"xProfilerStep#3", {}},
      {"", {}},
      {"ProfilerStep#99999999999999999999", {}},
  };
  for (const Case& c : cases) {
    std::vector<Step> steps = FindSteps(TraceOf({{kAnn, c.name, 100, 50, 7, 9}}));
    if (!c.want) {
      EXPECT_TRUE(steps.empty()) << c.name;
      continue;
    }
    ASSERT_EQ(steps.size(), 1u) << c.name;
    EXPECT_EQ(steps[0].number, *c.want) << c.name;
    EXPECT_EQ(steps[0].begin_ns, 100);
    EXPECT_EQ(steps[0].end_ns, 150);
    EXPECT_EQ(steps[0].pid, 7);
    EXPECT_EQ(steps[0].tid, 9);
  }
}

TEST(FindSteps, SortedByBeginGpuRowsSkippedFirstOfEachNumberKept) {
  RankTrace t = TraceOf({
      {kAnn, "ProfilerStep#2", 200, 100},
      {kAnn, "ProfilerStep#1", 100, 100},
      {kGpuAnn, "ProfilerStep#1", 50, 10},  // a GPU row: never a step
      {kOp, "ProfilerStep#2", 250, 10},     // the same number again, later: dropped
      {kOp, "aten::mm", 120, 10},
  });
  std::vector<Step> steps = FindSteps(t);
  EXPECT_EQ(Numbers(steps), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(steps[0].begin_ns, 100);
  EXPECT_EQ(steps[1].begin_ns, 200);
  EXPECT_EQ(steps[1].end_ns, 300);
}

TEST(FindSteps, SameBeginOrderedByNumber) {
  RankTrace t = TraceOf({{kAnn, "ProfilerStep#5", 100, 10}, {kAnn, "ProfilerStep#4", 100, 10}});
  EXPECT_EQ(Numbers(FindSteps(t)), (std::vector<int64_t>{4, 5}));
}

// hta_compat: ts ceiled and ts+dur floored to whole µs; the duration may turn negative.
TEST(PrepareTimeline, HtaRoundingTable) {
  struct Case {
    int64_t ts_ns, dur_ns, want_ts_ns, want_dur_ns;
  } cases[] = {
      {1000, 2000, 1000, 2000},  // already whole µs
      {1500, 2000, 2000, 1000},  // [1.5, 3.5] µs → [2, 3]
      {1500, 200, 2000, -1000},  // [1.5, 1.7] µs → [2, 1]
      {0, 999, 0, 0},            // end floored to 0
      {-1500, 1000, -1000, 0},   // [-1.5, -0.5] µs → [-1, -1]
      {-2000, 500, -2000, 0},    // [-2, -1.5] µs → [-2, -2]
  };
  for (const Case& c : cases) {
    RankTrace t = TraceOf({{kOp, "op", c.ts_ns, c.dur_ns}});
    AnalysisOptions options;
    options.hta_compat = true;
    (void)PrepareTimeline(t, options);
    ASSERT_EQ(t.events.size(), 1u);
    EXPECT_EQ(t.events[0].ts_ns, c.want_ts_ns) << c.ts_ns << "+" << c.dur_ns;
    EXPECT_EQ(t.events[0].dur_ns, c.want_dur_ns) << c.ts_ns << "+" << c.dur_ns;
  }
}

TEST(PrepareTimeline, CleanModeKeepsNanoseconds) {
  RankTrace t = TraceOf({{kOp, "op", 1500, 200}});
  (void)PrepareTimeline(t, AnalysisOptions{});
  EXPECT_EQ(t.events[0].ts_ns, 1500);
  EXPECT_EQ(t.events[0].dur_ns, 200);
}

TEST(PrepareTimeline, SortsByBeginThenLongestFirst) {
  RankTrace t = TraceOf({
      {kOp, "c", 300, 5},
      {kOp, "short", 100, 10},
      {kOp, "long", 100, 50},
      {kOp, "a", 50, 1},
  });
  (void)PrepareTimeline(t, AnalysisOptions{});
  std::vector<std::string> names;
  for (const Event& e : t.events) names.push_back(t.NameOf(e));
  EXPECT_EQ(names, (std::vector<std::string>{"a", "long", "short", "c"}));
}

/// 40,000 events (the sort runs on two threads above 32768) with many equal starts and lengths,
/// differing in kind, thread and name.
RankTrace ManyTies(uint64_t seed) {
  RankTrace t;
  uint64_t x = seed;
  const EventKind kinds[] = {kOp, kRt, kK, kAnn};
  const char* names[] = {"a", "b", "c"};
  for (int i = 0; i < 40000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    Add(t, {kinds[(x >> 40) % 4], names[(x >> 50) % 3], static_cast<int64_t>(x % 5000),
            static_cast<int64_t>((x >> 20) % 100)});
    t.events.back().tid = static_cast<int64_t>((x >> 30) % 3);
  }
  return t;
}

std::vector<std::tuple<int64_t, int64_t, EventKind, int64_t, std::string>> Keys(
    const RankTrace& t) {
  std::vector<std::tuple<int64_t, int64_t, EventKind, int64_t, std::string>> out;
  for (const Event& e : t.events) out.emplace_back(e.ts_ns, e.dur_ns, e.kind, e.tid, t.NameOf(e));
  return out;
}

// Above 32768 events the sort runs on two threads: the same order as one sort of the whole.
TEST(PrepareTimeline, LargeTraceSortedLikeSmall) {
  RankTrace t = ManyTies(88172645463325252ULL);
  std::vector<Event> want = t.events;
  std::sort(want.begin(), want.end(), EventOrder{});
  (void)PrepareTimeline(t, AnalysisOptions{});
  ASSERT_EQ(t.events.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(t.events[i].ts_ns, want[i].ts_ns) << i;
    ASSERT_EQ(t.events[i].dur_ns, want[i].dur_ns) << i;
    ASSERT_EQ(t.events[i].kind, want[i].kind) << i;
    ASSERT_EQ(t.events[i].tid, want[i].tid) << i;
    ASSERT_EQ(t.events[i].name_id, want[i].name_id) << i;
  }
}

// Events with the same start and length come out in one order whatever order they were read in
// (the numbers of a trace must not depend on the sort algorithm or on how many threads sorted).
TEST(PrepareTimeline, TiesComeOutInOneOrderWhateverTheInputOrder) {
  RankTrace a = ManyTies(88172645463325252ULL);
  RankTrace b = a;
  std::reverse(b.events.begin(), b.events.end());
  RankTrace c = a;
  std::rotate(c.events.begin(), c.events.begin() + 12345, c.events.end());
  (void)PrepareTimeline(a, AnalysisOptions{});
  (void)PrepareTimeline(b, AnalysisOptions{});
  (void)PrepareTimeline(c, AnalysisOptions{});
  EXPECT_TRUE(Keys(a) == Keys(b));
  EXPECT_TRUE(Keys(a) == Keys(c));
  EXPECT_TRUE(std::is_sorted(a.events.begin(), a.events.end(), EventOrder{}));
}

std::vector<Ev> ThreeSteps() {
  return {
      {kAnn, "ProfilerStep#1", 100, 100},
      {kAnn, "ProfilerStep#2", 200, 100},
      {kAnn, "ProfilerStep#3", 300, 100},
      {kOp, "before", 50, 10},     // ends before the window
      {kOp, "straddles", 90, 20},  // overlaps its start
      {kOp, "late", 390, 60},      // overlaps its end
      {kOp, "at_end", 400, 0},     // touches its end
      {kOp, "after", 401, 9},      // starts after it
  };
}

std::vector<std::string> TimelineNames(const RankTrace& t, EventKind kind) {
  std::vector<std::string> out;
  for (const Event& e : t.events) {
    if (e.kind == kind) out.push_back(t.NameOf(e));
  }
  return out;
}

TEST(PrepareTimeline, StepScopeTable) {
  struct Case {
    const char* what;
    std::optional<int64_t> first, last;
    std::vector<int64_t> want_steps;
    int64_t want_begin_ns, want_end_ns;
    std::vector<std::string> want_ops;
  } cases[] = {
      {"all steps", {}, {}, {1, 2, 3}, 100, 400, {"straddles", "late", "at_end"}},
      {"--steps 2:", 2, {}, {2, 3}, 200, 400, {"late", "at_end"}},
      {"--steps :1", {}, 1, {1}, 100, 200, {"straddles"}},
      {"--steps 2:2", 2, 2, {2}, 200, 300, {}},
  };
  for (const Case& c : cases) {
    RankTrace t = TraceOf(ThreeSteps());
    AnalysisOptions options;
    options.first_step = c.first;
    options.last_step = c.last;
    Timeline tl = PrepareTimeline(t, options);
    EXPECT_EQ(Numbers(tl.steps), c.want_steps) << c.what;
    EXPECT_EQ(tl.window_begin_ns, c.want_begin_ns) << c.what;
    EXPECT_EQ(tl.window_end_ns, c.want_end_ns) << c.what;
    EXPECT_EQ(TimelineNames(t, kOp), c.want_ops) << c.what;
    EXPECT_FALSE(tl.last_step_dropped) << c.what;
  }
}

TEST(PrepareTimeline, NoStepsWindowIsSpanOfAllEvents) {
  RankTrace t = TraceOf({{kOp, "a", 500, 100}, {kOp, "b", 200, 50}, {kOp, "c", 300, 900}});
  Timeline tl = PrepareTimeline(t, AnalysisOptions{});
  EXPECT_TRUE(tl.steps.empty());
  EXPECT_EQ(tl.window_begin_ns, 200);
  EXPECT_EQ(tl.window_end_ns, 1200);
  EXPECT_EQ(t.events.size(), 3u);
}

TEST(PrepareTimeline, EmptyTrace) {
  RankTrace t;
  Timeline tl = PrepareTimeline(t, AnalysisOptions{});
  EXPECT_TRUE(tl.steps.empty());
  EXPECT_EQ(tl.window_begin_ns, 0);
  EXPECT_EQ(tl.window_end_ns, 0);
}

// HTA drops the last ProfilerStep: CPU events starting in it go, GPU rows go unless a kept CPU
// event launched them (same correlation), wherever they ran.
RankTrace HtaTrace() {
  constexpr int64_t kUs = 1000;  // whole µs, so the HTA rounding leaves every event as it is
  return TraceOf({
      {kAnn, "ProfilerStep#1", 1000 * kUs, 1000 * kUs},
      {kAnn, "ProfilerStep#2", 2000 * kUs, 1000 * kUs},
      {kRt, "launch_early", 1500 * kUs, 100 * kUs, 0, 1, 7},
      {kK, "kernel_early", 2500 * kUs, 300 * kUs, 0, 7, 7},  // launched in step 1: kept
      {kRt, "launch_late", 2100 * kUs, 100 * kUs, 0, 1, 8},
      {kK, "kernel_late", 2200 * kUs, 300 * kUs, 0, 7, 8},      // launched in the dropped step
      {kK, "kernel_orphan", 1200 * kUs, 100 * kUs, 0, 7},       // no correlation: dropped
      {kGpuAnn, "gpu_ann_early", 1200 * kUs, 100 * kUs, 0, 7},  // filed with the CPU events
      {kGpuAnn, "gpu_ann_late", 2500 * kUs, 100 * kUs, 0, 7},   // starts in the dropped step
  });
}

TEST(PrepareTimeline, HtaDropsLastStepByLaunch) {
  RankTrace t = HtaTrace();
  AnalysisOptions options;
  options.hta_compat = true;
  Timeline tl = PrepareTimeline(t, options);
  EXPECT_TRUE(tl.last_step_dropped);
  EXPECT_EQ(Numbers(tl.steps), (std::vector<int64_t>{1}));
  EXPECT_EQ(tl.window_begin_ns, 1'000'000);
  EXPECT_EQ(tl.window_end_ns, 2'000'000);
  EXPECT_EQ(TimelineNames(t, kK), (std::vector<std::string>{"kernel_early"}));
  EXPECT_EQ(TimelineNames(t, kRt), (std::vector<std::string>{"launch_early"}));
  EXPECT_EQ(TimelineNames(t, kGpuAnn), (std::vector<std::string>{"gpu_ann_early"}));
  EXPECT_EQ(TimelineNames(t, kAnn), (std::vector<std::string>{"ProfilerStep#1"}));
}

TEST(PrepareTimeline, HtaNarrowedByStepsClipsToTheWindow) {
  RankTrace t = HtaTrace();
  AnalysisOptions options;
  options.hta_compat = true;
  options.first_step = 1;
  Timeline tl = PrepareTimeline(t, options);
  EXPECT_TRUE(tl.last_step_dropped);
  // kernel_early (2500..2800 µs) lies outside [1000, 2000] µs once --steps narrows the range.
  EXPECT_TRUE(TimelineNames(t, kK).empty());
}

TEST(PrepareTimeline, HtaKeepsASingleStep) {
  RankTrace t =
      TraceOf({{kAnn, "ProfilerStep#1", 1'000'000, 1'000'000}, {kOp, "op", 1'500'000, 1000}});
  AnalysisOptions options;
  options.hta_compat = true;
  Timeline tl = PrepareTimeline(t, options);
  EXPECT_FALSE(tl.last_step_dropped);
  EXPECT_EQ(Numbers(tl.steps), (std::vector<int64_t>{1}));
  EXPECT_EQ(t.events.size(), 2u);
}

}  // namespace
}  // namespace stallscope::trace
