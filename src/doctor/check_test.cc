#include "doctor/check.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "doctor_facts_test_util.h"

namespace stallscope::doctor {
namespace {

using testing::HealthyFacts;

TEST(CheckStatus, NamesAndSeverityOrder) {
  EXPECT_EQ(StatusName(CheckStatus::kOk), "ok");
  EXPECT_EQ(StatusName(CheckStatus::kSkip), "skip");
  EXPECT_EQ(StatusName(CheckStatus::kWarn), "warn");
  EXPECT_EQ(StatusName(CheckStatus::kFail), "fail");
  EXPECT_LT(CheckStatus::kOk, CheckStatus::kSkip);
  EXPECT_LT(CheckStatus::kSkip, CheckStatus::kWarn);
  EXPECT_LT(CheckStatus::kWarn, CheckStatus::kFail);
}

TEST(ExitCode, OneWhenAnyCheckFails) {
  std::vector<Check> checks = {MakeCheck("a.b", "B", CheckStatus::kOk, "fine"),
                               MakeCheck("a.c", "C", CheckStatus::kWarn, "hm", "do x"),
                               MakeCheck("a.d", "D", CheckStatus::kSkip, "n/a")};
  EXPECT_EQ(ExitCode(checks), 0);
  const CheckCounts n = CountChecks(checks);
  EXPECT_EQ(n.ok, 1);
  EXPECT_EQ(n.warn, 1);
  EXPECT_EQ(n.skip, 1);
  EXPECT_EQ(n.fail, 0);
  checks.push_back(MakeCheck("a.e", "E", CheckStatus::kFail, "broken", "fix it"));
  EXPECT_EQ(ExitCode(checks), 1);
  EXPECT_EQ(ExitCode({}), 0);
}

TEST(RunChecks, HealthyMachineHasNothingToFix) {
  const std::vector<Check> checks = RunChecks(HealthyFacts(2));
  for (const Check& c : checks) {
    EXPECT_LE(c.status, CheckStatus::kOk) << c.id << ": " << c.detail;
    EXPECT_EQ(c.fix, "") << c.id;
    EXPECT_FALSE(c.title.empty()) << c.id;
    EXPECT_FALSE(c.detail.empty()) << c.id;
  }
  EXPECT_EQ(ExitCode(checks), 0);
}

TEST(RunChecks, GroupsInReportOrderAndIdsUniquePerGpu) {
  const std::vector<Check> checks = RunChecks(HealthyFacts(2));
  const std::vector<std::string> order = {"gpu", "host", "storage", "python", "env"};
  size_t group = 0;
  std::set<std::pair<std::string, int64_t>> seen;
  for (const Check& c : checks) {
    const std::string prefix = c.id.substr(0, c.id.find('.'));
    while (group < order.size() && order[group] != prefix) ++group;
    ASSERT_LT(group, order.size()) << c.id << " out of order";
    EXPECT_TRUE(seen.insert({c.id, c.gpu ? int64_t{*c.gpu} : -1}).second) << c.id;
  }
  EXPECT_EQ(testing::WithId(checks, "gpu.pcie_link").size(), 2U);
  EXPECT_EQ(testing::One(checks, "gpu.driver").gpu, std::nullopt);
}

}  // namespace
}  // namespace stallscope::doctor
