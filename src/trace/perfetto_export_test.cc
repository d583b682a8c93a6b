#include "trace/perfetto_export.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "trace/timeline.h"
#include "trace/trace_reader.h"

#include "hta_traces.h"
#include "trace_events.h"

namespace stallscope::trace {
namespace {

using testing::Add;
using testing::kK;
using testing::kOp;
using testing::kRt;

TEST(LaneAssigner, NestedStaysPartialOverlapMoves) {
  struct In {
    int64_t b, e;
    uint32_t lane;
  } cases[] = {
      {0, 100, 0},    //
      {10, 20, 0},    // nested in [0,100]
      {15, 30, 1},    // overlaps [10,20] without nesting
      {20, 25, 0},    // [10,20] closed at 20: nests in [0,100]
      {50, 150, 1},   // overlaps [0,100]; lane 1's [15,30] closed
      {200, 200, 0},  // zero length
      {200, 210, 0},  // starts where the zero-length one ends
      {200, 210, 0},  // identical interval nests
  };
  LaneAssigner a;
  for (const In& c : cases) EXPECT_EQ(a.Add(c.b, c.e), c.lane) << c.b << "," << c.e;
  EXPECT_EQ(a.lanes(), 2u);
}

TEST(AppendMicros, ExactFromNs) {
  std::pair<int64_t, std::string> cases[] = {
      {0, "0.000"},
      {1, "0.001"},
      {1500, "1.500"},
      {1234567, "1234.567"},
      {-1500, "-1.500"},
      {-1, "-0.001"},
      {1682725898240951123, "1682725898240951.123"},
  };
  for (const auto& [ns, want] : cases) {
    std::string out;
    AppendMicros(out, ns);
    EXPECT_EQ(out, want);
  }
}

constexpr int64_t kBase = 1682725898240951000;  // absolute Kineto-like times, in ns

std::vector<RankTrace> ExportRanks() {
  std::vector<RankTrace> ranks(2);
  RankTrace& a = ranks[0];
  a.rank = 0;
  a.process_names[100] = "python";
  a.thread_names[1] = "MainThread";
  Add(a, {kOp, "aten::mm", kBase + 0, 500, 100, 1});
  Add(a, {kRt, "cudaLaunchKernel", kBase + 100, 50, 100, 1, 7});
  Add(a, {kRt, "cudaLaunchKernel", kBase + 200, 50, 100, 1, 8});
  // Partially overlapping kernels on stream 7 (bad data or a sync row): need a second lane.
  Add(a, {kK, "k1", kBase + 1000, 400, 0, 7, 7});
  Add(a, {kK, "k2", kBase + 1200, 600, 0, 7, 8});
  Add(a, {kK, "k3", kBase + 1900, 100, 0, 7});
  RankTrace& b = ranks[1];
  b.rank = 1;
  Add(b, {kRt, "cudaLaunchKernel", kBase + 50, 20, 200, 5, 7});  // same correlation as rank 0
  Add(b, {kK, "weird \"name\"\n\\", kBase + 400, 100, 1, 9, 7});
  return ranks;
}

nlohmann::json ExportAndParse(const std::vector<RankTrace>& ranks, PerfettoExportStats& stats) {
  // One file per test process: ctest runs this file's tests in parallel.
  const std::string path =
      ::testing::TempDir() + "/perfetto_export_test." + std::to_string(::getpid()) + "." +
      ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json";
  auto result = WritePerfettoJsonFile(ranks, path);
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
  if (result.ok()) stats = *result;
  std::ifstream in(path);
  nlohmann::json doc = nlohmann::json::parse(in);
  std::remove(path.c_str());
  return doc;
}

int64_t Ns(const nlohmann::json& micros) { return std::llround(micros.get<double>() * 1000.0); }

using Tracks = std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>>;
using ThreadNames = std::map<std::pair<int64_t, int64_t>, std::string>;

// Asserts that on every (pid, tid) the X slices are disjoint or nested and that every track and
// process is named; returns the number of slices checked.
int64_t CheckNesting(Tracks& slices, const std::map<int64_t, std::string>& process_names,
                     const ThreadNames& thread_names) {
  int64_t total = 0;
  for (auto& [track, list] : slices) {
    EXPECT_TRUE(process_names.count(track.first)) << track.first;
    EXPECT_TRUE(thread_names.count(track)) << track.first << "/" << track.second;
    std::sort(list.begin(), list.end(), [](auto x, auto y) {
      return x.first != y.first ? x.first < y.first : x.second > y.second;
    });
    std::vector<int64_t> open;  // ends of enclosing slices
    for (auto [ts, dur] : list) {
      while (!open.empty() && open.back() <= ts) open.pop_back();
      EXPECT_TRUE(open.empty() || ts + dur <= open.back())
          << "overlap without nesting at " << ts << " on " << track.first << "/" << track.second;
      open.push_back(ts + dur);
      ++total;
    }
  }
  return total;
}

TEST(PerfettoExport, TracksNestAndAreNamed) {
  PerfettoExportStats stats;
  nlohmann::json doc = ExportAndParse(ExportRanks(), stats);
  EXPECT_EQ(stats.slices, 8);
  EXPECT_EQ(stats.flows, 3);
  EXPECT_EQ(stats.extra_lanes, 1);
  EXPECT_EQ(stats.tracks, 5);  // rank 0: host thread, stream 7 ×2; rank 1: host, stream 9
  EXPECT_EQ(stats.origin_ns, kBase);
  EXPECT_EQ(doc["otherData"]["origin_ns"], kBase);

  std::map<int64_t, std::string> process_names;
  ThreadNames thread_names;
  Tracks slices;
  std::map<int64_t, int> flow_phases;
  std::set<std::string> names;
  for (const auto& e : doc["traceEvents"]) {
    std::string ph = e["ph"];
    auto key = std::make_pair(e["pid"].get<int64_t>(), e["tid"].get<int64_t>());
    if (ph == "M" && e["name"] == "process_name") process_names[key.first] = e["args"]["name"];
    if (ph == "M" && e["name"] == "thread_name") thread_names[key] = e["args"]["name"];
    if (ph == "X") {
      slices[key].emplace_back(Ns(e["ts"]), Ns(e["dur"]));
      names.insert(e["name"].get<std::string>());
    }
    if (ph == "s") flow_phases[e["id"].get<int64_t>()] += 1;
    if (ph == "f") {
      flow_phases[e["id"].get<int64_t>()] += 10;
      EXPECT_EQ(e["bp"], "e");
    }
  }
  std::set<std::string> pnames, tnames;
  for (const auto& [pid, n] : process_names) pnames.insert(n);
  for (const auto& [k, n] : thread_names) tnames.insert(n);
  EXPECT_EQ(pnames, (std::set<std::string>{"rank 0 host python (pid 100)", "rank 0 GPU 0",
                                           "rank 1 host (pid 200)", "rank 1 GPU 1"}));
  EXPECT_EQ(tnames,
            (std::set<std::string>{"rank 0 MainThread (tid 1)", "rank 0 stream 7",
                                   "rank 0 stream 7 (2)", "rank 1 thread 5", "rank 1 stream 9"}));
  EXPECT_TRUE(names.count("weird \"name\"\n\\"));
  for (const auto& [id, phases] : flow_phases) EXPECT_EQ(phases, 11) << "flow " << id;
  EXPECT_EQ(flow_phases.size(), 3u);

  EXPECT_EQ(CheckNesting(slices, process_names, thread_names), 8);
  // Exact ns after rebasing: k2 starts 1200 ns after the origin.
  const auto& stream7_lane2 = std::find_if(thread_names.begin(), thread_names.end(), [](auto& kv) {
                                return kv.second == "rank 0 stream 7 (2)";
                              })->first;
  ASSERT_EQ(slices[stream7_lane2].size(), 1u);
  EXPECT_EQ(slices[stream7_lane2][0], std::make_pair(int64_t{1200}, int64_t{600}));
}

TEST(PerfettoExport, FarApartRanksRebasedAlone) {
  std::vector<RankTrace> ranks(4);
  ranks[0].rank = 0;
  Add(ranks[0], {kK, "a", kBase + 7, 10, 0, 7});
  ranks[1].rank = 1;  // no events: must not pull the origin to 0
  ranks[2].rank = 2;
  constexpr int64_t kMonthNs = int64_t{30} * 24 * 3600 * 1'000'000'000;
  Add(ranks[2], {kK, "b", kBase + kMonthNs + 3, 10, 0, 7});
  ranks[3].rank = 3;  // same job as rank 2: shares its origin
  Add(ranks[3], {kK, "c", kBase + kMonthNs + 1003, 10, 0, 7});
  PerfettoExportStats stats;
  nlohmann::json doc = ExportAndParse(ranks, stats);
  EXPECT_EQ(stats.origin_ns, kBase + 7);
  EXPECT_EQ(stats.ranks_rebased_alone, 2);
  std::map<std::string, std::string> ts_by_name;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") ts_by_name[e["name"]] = e["ts"].dump();
  }
  EXPECT_EQ(ts_by_name["a"], "0.0");
  EXPECT_EQ(ts_by_name["b"], "0.0");
  EXPECT_EQ(ts_by_name["c"], "1.0");
  ASSERT_EQ(doc["otherData"]["ranks"].size(), 4u);
  EXPECT_EQ(doc["otherData"]["ranks"][2]["origin_ns"], kBase + kMonthNs + 3);
}

TEST(PerfettoExport, EmptyInputIsValidJson) {
  PerfettoExportStats stats;
  nlohmann::json doc = ExportAndParse({}, stats);
  EXPECT_TRUE(doc["traceEvents"].empty());
  EXPECT_EQ(stats.slices, 0);
}

TEST(PerfettoExport, UnwritablePathFailsNamingIt) {
  std::vector<RankTrace> none;
  auto r = WritePerfettoJsonFile(none, "/nonexistent-dir/x.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("/nonexistent-dir/x.json"), std::string::npos);
}

// ---------------------------------------------------------------- real traces (skipped if absent)

// The HTA reference traces (tests/support/hta_traces.h).
std::optional<std::string> PerfettoHtaDir() {
  std::string dir = testing::HtaTracesDir().string();
  if (!std::filesystem::exists(dir + "/trace_filter/sampled_rank-0.json.gz")) return std::nullopt;
  return dir;
}

TEST(HtaTraces, TraceFilterExport) {
  auto dir = PerfettoHtaDir();
  if (!dir) GTEST_SKIP() << "shared/traces/hta not present";
  std::vector<RankTrace> traces;
  for (const char* f : {"sampled_rank-0.json.gz", "sampled_rank-1.json.gz"}) {
    auto trace = ReadTrace(*dir + "/trace_filter/" + f);
    ASSERT_TRUE(trace.ok()) << trace.error().message;
    (void)PrepareTimeline(*trace, AnalysisOptions{});
    traces.push_back(std::move(*trace));
  }
  std::string path = ::testing::TempDir() + "/perfetto_export_test_trace_filter.json";
  auto stats = WritePerfettoJsonFile(traces, path);
  ASSERT_TRUE(stats.ok()) << stats.error().message;
  std::ifstream in(path);
  nlohmann::json doc = nlohmann::json::parse(in);
  std::map<int64_t, std::string> process_names;
  ThreadNames thread_names;
  Tracks slices;
  for (const auto& e : doc["traceEvents"]) {
    auto key = std::make_pair(e["pid"].get<int64_t>(), e["tid"].get<int64_t>());
    if (e["ph"] == "M" && e["name"] == "process_name") process_names[key.first] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[key] = e["args"]["name"];
    if (e["ph"] == "X") slices[key].emplace_back(Ns(e["ts"]), Ns(e["dur"]));
  }
  int64_t events = 0;
  for (const RankTrace& t : traces) events += static_cast<int64_t>(t.events.size());
  EXPECT_EQ(CheckNesting(slices, process_names, thread_names), events);
  EXPECT_EQ(stats->slices, events);
  std::printf("perfetto: %lld slices, %lld flows, %lld tracks (%lld extra lanes)\n",
              static_cast<long long>(stats->slices), static_cast<long long>(stats->flows),
              static_cast<long long>(stats->tracks), static_cast<long long>(stats->extra_lanes));
}

}  // namespace
}  // namespace stallscope::trace
