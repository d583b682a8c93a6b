#include "base/vocabulary.h"

#include <gtest/gtest.h>

namespace stallscope {
namespace {

TEST(ProcessRole, ToStringAndBackTable) {
  struct Case {
    ProcessRole role;
    std::string_view text;
  };
  const Case cases[] = {
      {{ProcessRoleKind::kMain, 0}, "main"},
      {{ProcessRoleKind::kRank, 0}, "rank 0"},
      {{ProcessRoleKind::kRank, 17}, "rank 17"},
      {{ProcessRoleKind::kDataLoaderWorker, 0}, "dataloader worker"},
      {{ProcessRoleKind::kLauncher, 0}, "launcher"},
      {{ProcessRoleKind::kChild, 0}, "child"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ToString(c.role), c.text);
    auto back = ProcessRoleFromString(c.text);
    ASSERT_TRUE(back.has_value()) << c.text;
    EXPECT_EQ(*back, c.role) << c.text;
  }
}

TEST(ProcessRole, FromStringRejectsOtherText) {
  for (std::string_view bad : {"", "rank", "rank ", "rank -1", "rank +1", "rank 1x", "rank x",
                               "Main", "worker", "rank 99999999999", " main"}) {
    EXPECT_FALSE(ProcessRoleFromString(bad).has_value()) << bad;
  }
}

TEST(PhaseName, ComputePhasesAreTheModelsWork) {
  for (std::string_view n :
       {"forward_pass", "backward_pass", "optimizer_step", "gpu_compute", "cpu_exec"}) {
    EXPECT_TRUE(IsComputePhase(n)) << n;
  }
  for (std::string_view n : {"data_loading", "comm_wait", "other", "communication",
                             "launch_overhead", "cpu_ops", "forward", ""}) {
    EXPECT_FALSE(IsComputePhase(n)) << n;
  }
  static_assert(IsComputePhase(phase_name::kForward));
  static_assert(!IsComputePhase(phase_name::kCommWait));
}

TEST(PhaseName, NamesAreTheOnesTheHooksWrite) {
  // python/stallscope/_hooks.py writes these; recordings and reports carry them: never rename.
  EXPECT_EQ(phase_name::kDataLoading, "data_loading");
  EXPECT_EQ(phase_name::kForward, "forward_pass");
  EXPECT_EQ(phase_name::kBackward, "backward_pass");
  EXPECT_EQ(phase_name::kOptimizer, "optimizer_step");
  EXPECT_EQ(phase_name::kCommWait, "comm_wait");
  EXPECT_EQ(phase_name::kOther, "other");
}

}  // namespace
}  // namespace stallscope
