#include "base/thresholds.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stallscope {
namespace {

TEST(Thresholds, TableListsEveryEntryOnceWithASource) {
  static_assert(sizeof(ThresholdSet) == sizeof(Threshold) * kThresholdTable.size(),
                "every ThresholdSet member must be listed in kThresholdTable");
  std::set<std::string_view> names;
  for (const Threshold& t : ThresholdTable()) {
    EXPECT_TRUE(names.insert(t.name).second) << t.name;
    EXPECT_FALSE(t.source.empty()) << t.name;
    EXPECT_FALSE(t.unit.empty()) << t.name;
    EXPECT_LT(t.cite().size(), t.source.size()) << t.name << ": source must read \"cite: why\"";
  }
  EXPECT_EQ(kThresholds.data_bound_share.value, 0.30);  // seed 000
  EXPECT_EQ(kThresholds.low_util_warn.value, 30);       // seed 004
  EXPECT_EQ(kThresholds.oscillation_ratio.value, 0.5);  // seed 003
}

/// The text of every .h/.cc under src/ except this table and this test.
std::string SourcesReadingTheTable() {
  const std::filesystem::path src = std::filesystem::path(STALLSCOPE_SOURCE_DIR) / "src";
  std::string all;
  for (const auto& e : std::filesystem::recursive_directory_iterator(src)) {
    const auto& p = e.path();
    if (!e.is_regular_file() || (p.extension() != ".h" && p.extension() != ".cc")) continue;
    if (p.filename() == "thresholds.h" || p.filename() == "thresholds_test.cc") continue;
    std::ifstream in(p);
    std::stringstream text;
    text << in.rdbuf();
    all += text.str();
  }
  return all;
}

/// True when `code` reads `name` as a table entry: `.name.value`, `.name.cite()`, or the entry
/// passed on (`.name)`, `.name,`). Not a same-named field of some other struct (`g.name <`).
bool ReadsEntry(const std::string& code, std::string_view name) {
  const std::string use = "." + std::string(name);
  for (size_t at = code.find(use); at != std::string::npos; at = code.find(use, at + 1)) {
    const std::string_view rest = std::string_view(code).substr(at + use.size());
    if (rest.starts_with(".value") || rest.starts_with(".cite(") || rest.starts_with(")") ||
        rest.starts_with(",")) {
      return true;
    }
  }
  return false;
}

// A threshold no code reads is a number the README promises and nothing decides by: every
// entry must be read somewhere in src/ outside the table and this test.
TEST(Thresholds, EveryEntryIsReadByCode) {
  const std::string code = SourcesReadingTheTable();
  ASSERT_FALSE(code.empty()) << "no sources under " << STALLSCOPE_SOURCE_DIR << "/src";
  for (const Threshold& t : ThresholdTable()) {
    EXPECT_TRUE(ReadsEntry(code, t.name)) << t.name << " is read by no code in src/";
  }
}

TEST(Thresholds, ReadsEntryWantsTheEntryNotAFieldOfTheSameName) {
  EXPECT_TRUE(ReadsEntry("x < T.min_cost.value;", "min_cost"));
  EXPECT_TRUE(ReadsEntry("Ev(T.min_cost.cite())", "min_cost"));
  EXPECT_TRUE(ReadsEntry("ShareEvidence(c, kData, T.min_cost);", "min_cost"));
  EXPECT_FALSE(ReadsEntry("g.min_cost > 0", "min_cost"));
  EXPECT_FALSE(ReadsEntry("T.min_cost_share.value", "min_cost"));
}

}  // namespace
}  // namespace stallscope
