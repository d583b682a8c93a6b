#include "doctor/space.h"

#include <gtest/gtest.h>

#include "temp_dir.h"

namespace stallscope::doctor {
namespace {

TEST(ExamineSpace, ARealDirectory) {
  stallscope::testing::TempDir dir;
  const SpaceFacts s = ExamineSpace(dir.path().string());
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.path, dir.path().string());
  EXPECT_GT(s.total_bytes, 0U);
  EXPECT_LE(s.free_bytes, s.total_bytes);
  EXPECT_FALSE(s.fs_type.empty());
}

TEST(ExamineSpace, MissingPathSaysWhy) {
  const SpaceFacts s = ExamineSpace("/nonexistent/stallscope/dir");
  EXPECT_EQ(s.error, "No such file or directory");
  EXPECT_EQ(s.total_bytes, 0U);
}

TEST(ExamineSpace, DevShmIsTmpfsWhereItExists) {
  const SpaceFacts s = ExamineSpace("/dev/shm");
  if (!s.error.empty()) GTEST_SKIP() << "no /dev/shm here";
  EXPECT_EQ(s.fs_type, "tmpfs");
}

TEST(FsTypeName, KnownAndUnknown) {
  EXPECT_EQ(FsTypeName(0xEF53), "ext4");
  EXPECT_EQ(FsTypeName(0x794C7630), "overlay");
  EXPECT_EQ(FsTypeName(0x6969), "nfs");
  EXPECT_EQ(FsTypeName(0x12345), "0x12345");
  EXPECT_TRUE(IsNetworkFs("nfs"));
  EXPECT_TRUE(IsNetworkFs("fuse"));
  EXPECT_TRUE(IsNetworkFs("lustre"));
  EXPECT_FALSE(IsNetworkFs("ext4"));
  EXPECT_FALSE(IsNetworkFs("overlay"));
}

}  // namespace
}  // namespace stallscope::doctor
