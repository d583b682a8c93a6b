#include "fake_cost.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>

namespace stallscope::fake_nvml {
namespace {

TEST(CostTableTest, H100RowsAreTheMeasuredOnes) {
  const CostTable t = CostTable::H100();
  EXPECT_FALSE(t.empty());
  struct Case {
    std::string_view fn;
    double cpu_us;
    double wall_us;
  };
  // shared/gpu/h100-2026-11-26/README.md section 2 and issue 28.
  const Case cases[] = {
      {"nvmlInit_v2", 9054, 9059},
      {"nvmlDeviceGetSamples", 2391, 2404},
      {"nvmlDeviceGetProcessUtilization", 2209, 2221},
      {"nvmlDeviceGetTotalEnergyConsumption", 3892, 3920},
      {"nvmlDeviceGetPcieThroughput", 665, 20743},
      {"nvmlDeviceGetUtilizationRates", 19.6, 19.6},
      {"nvmlDeviceGetMigMode", 148, 148},
      {"nvmlGpmSampleGet", 85, 85},
      {"nvmlGpmMetricsGet", 1650, 1650},
      {kGpmMetricsGetFirst, 8000, 8000},
      {"nvmlDeviceGetName", 1, 1},
      {"nvmlShutdown", 0, 0},
  };
  for (const Case& c : cases) {
    const std::optional<CallCost> cost = t.Of(c.fn);
    ASSERT_TRUE(cost) << c.fn;
    EXPECT_EQ(cost->cpu_us, c.cpu_us) << c.fn;
    EXPECT_EQ(cost->wall_us, c.wall_us) << c.fn;
  }
  for (const std::string_view fn : CostEntryPoints()) {
    ASSERT_TRUE(t.Of(fn)) << fn;
    EXPECT_LE(t.Of(fn)->cpu_us, t.Of(fn)->wall_us) << fn;
  }
  EXPECT_FALSE(t.Of("nvmlDeviceGetFanSpeed"));
}

TEST(CostTableTest, ParseKeepsOnlyTheGivenRows) {
  Result<CostTable> t = CostTable::Parse(
      R"({"nvmlDeviceGetSamples": {"cpu_us": 2391, "wall_us": 2404},
          "nvmlGpmMetricsGet/first": {"wall_us": 1, "cpu_us": 0.5}})");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->Of("nvmlDeviceGetSamples")->cpu_us, 2391);
  EXPECT_EQ(t->Of("nvmlDeviceGetSamples")->wall_us, 2404);
  EXPECT_EQ(t->Of(kGpmMetricsGetFirst)->cpu_us, 0.5);
  EXPECT_FALSE(t->Of("nvmlDeviceGetMemoryInfo"));
  EXPECT_FALSE(t->empty());
  EXPECT_TRUE(CostTable::Parse("{}")->empty());
  EXPECT_TRUE(CostTable::Parse(R"({"nvmlInit": {"cpu_us": 0, "wall_us": 0}})")->empty());
}

TEST(CostTableTest, MalformedFiles) {
  struct Case {
    const char* json;
    const char* error;
  };
  const Case cases[] = {
      {"", "not valid JSON"},
      {"[]", "top level: expected an object"},
      {R"({"nvmlDeviceGetSampels": {"cpu_us": 1, "wall_us": 2}})",
       "unknown entry point 'nvmlDeviceGetSampels'"},
      {R"({"nvmlDeviceGetSamples": 5})",
       R"(nvmlDeviceGetSamples: expected {"cpu_us": N, "wall_us": N})"},
      {R"({"nvmlDeviceGetSamples": {"cpu_us": 1}})",
       "nvmlDeviceGetSamples.wall_us: expected a number >= 0"},
      {R"({"nvmlDeviceGetSamples": {"cpu_us": -1, "wall_us": 1}})",
       "nvmlDeviceGetSamples.cpu_us: expected a number >= 0"},
      {R"({"nvmlDeviceGetSamples": {"cpu_us": "1", "wall_us": 1}})",
       "nvmlDeviceGetSamples.cpu_us: expected a number >= 0"},
      {R"({"nvmlDeviceGetSamples": {"cpu_us": 2, "wall_us": 1}})",
       "nvmlDeviceGetSamples: cpu_us 2 above wall_us 1"},
      {R"({"nvmlDeviceGetSamples": {"cpu": 1, "wall_us": 1}})",
       "nvmlDeviceGetSamples: unknown key 'cpu'"},
  };
  for (const Case& c : cases) {
    Result<CostTable> t = CostTable::Parse(c.json);
    ASSERT_FALSE(t.ok()) << c.json;
    EXPECT_EQ(t.error().code, ErrorCode::kParse);
    EXPECT_EQ(t.error().message, c.error) << c.json;
  }
}

TEST(CostTableTest, LoadSpecs) {
  EXPECT_TRUE(CostTable::Load("")->empty());
  EXPECT_FALSE(CostTable::Load("h100")->empty());
  Result<CostTable> missing = CostTable::Load("/nonexistent/cost.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "/nonexistent/cost.json: cannot open");
}

// The table is the one list of entry points: each one the full fake exports has a row, and each
// row but the first-GPM-metrics pseudo entry is exported.
TEST(CostTableTest, CoversEveryExportOfTheFake) {
  const std::string command =
      std::string(STALLSCOPE_NM) + " -D --defined-only '" + STALLSCOPE_FAKE_NVML + "'";
  std::FILE* nm = popen(command.c_str(), "r");
  ASSERT_NE(nm, nullptr);
  std::set<std::string> exported;
  char line[512];
  while (std::fgets(line, sizeof line, nm) != nullptr) {
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    exported.insert(text.substr(text.rfind(' ') + 1));
  }
  ASSERT_EQ(pclose(nm), 0) << command;
  ASSERT_GE(exported.size(), 20U);
  const auto rows = CostEntryPoints();
  for (const std::string& name : exported) {
    EXPECT_NE(std::find(rows.begin(), rows.end(), name), rows.end()) << name << " has no cost row";
  }
  for (const std::string_view row : rows) {
    if (row == kGpmMetricsGetFirst) continue;
    EXPECT_EQ(exported.count(std::string(row)), 1U) << row << " is not exported";
  }
}

}  // namespace
}  // namespace stallscope::fake_nvml
