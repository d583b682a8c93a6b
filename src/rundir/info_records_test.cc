#include "rundir/job_info.h"

#include <string>

#include <gtest/gtest.h>

namespace stallscope::rundir {
namespace {

phase::MetaItem Info(const std::string& name, const std::string& json, int32_t pid = 7) {
  phase::MetaItem m;
  m.pid = pid;
  m.rank = 1;
  m.kind = "info";
  m.name = name;
  m.data_json = json;
  return m;
}

TEST(ReadJobInfo, EveryKindAutoPyWrites) {
  phase::EventLog log;
  log.meta = {
      Info("cuda_init", R"({"begin_ns": 1000000000, "end_ns": 1400000000})"),
      Info("compile", R"({"begin_ns": 2000000000, "end_ns": 5000000000, "frame": "m.py:3 fwd"})"),
      Info("compile_totals", R"({"count": 70, "total_ns": 9000000000})"),
      Info("backends", R"({"cudnn_benchmark": true, "cudnn_deterministic": false,
                           "float32_matmul_precision": "high", "cuda_initialized": true})"),
      Info("dataloader", R"({"num_workers": 2})"),  // not ours: ignored, not malformed
  };
  const JobInfo info = ReadJobInfo(log);
  ASSERT_EQ(info.cuda_init.size(), 1u);
  EXPECT_EQ(info.cuda_init[0].pid, 7);
  EXPECT_EQ(info.cuda_init[0].rank, 1);
  EXPECT_DOUBLE_EQ(info.cuda_init[0].seconds(), 0.4);
  ASSERT_EQ(info.compiles.size(), 1u);
  EXPECT_EQ(info.compiles[0].what, "m.py:3 fwd");
  EXPECT_DOUBLE_EQ(info.compiles[0].seconds(), 3.0);
  ASSERT_EQ(info.compile_totals.size(), 1u);
  EXPECT_EQ(info.compile_totals[0].count, 70);
  EXPECT_DOUBLE_EQ(info.compile_totals[0].total_s, 9.0);
  ASSERT_EQ(info.backends.size(), 1u);
  EXPECT_EQ(info.backends[0].cudnn_benchmark, true);
  EXPECT_EQ(info.backends[0].cudnn_deterministic, false);
  EXPECT_EQ(info.backends[0].float32_matmul_precision, "high");
  EXPECT_EQ(info.backends[0].cuda_initialized, true);
  EXPECT_EQ(info.malformed, 0);
}

TEST(ReadJobInfo, BadRecordsAreCountedAndSkipped) {
  phase::EventLog log;
  log.meta = {
      Info("cuda_init", "not json"),
      Info("cuda_init", R"([1, 2])"),
      Info("cuda_init", R"({"begin_ns": 5, "end_ns": 4})"),       // ends before it begins
      Info("compile", R"({"begin_ns": "x", "end_ns": 4})"),       // a field of the wrong type
      Info("compile_totals", R"({"count": -1, "total_ns": 3})"),  // negative
      Info("backends", R"({"cudnn_benchmark": "yes"})"),          // a wrong type reads as unknown
  };
  const JobInfo info = ReadJobInfo(log);
  EXPECT_TRUE(info.cuda_init.empty());
  EXPECT_TRUE(info.compiles.empty());
  EXPECT_TRUE(info.compile_totals.empty());
  ASSERT_EQ(info.backends.size(), 1u);
  EXPECT_FALSE(info.backends[0].cudnn_benchmark.has_value());
  EXPECT_EQ(info.malformed, 5);
}

}  // namespace
}  // namespace stallscope::rundir
