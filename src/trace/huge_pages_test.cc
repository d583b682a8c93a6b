#include "trace/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

namespace stallscope::trace {
namespace {

// Advice changes no contents and accepts any range: null, tiny, unaligned, huge.
TEST(HugePagesTest, AdviceIsHarmlessOnAnyRange) {
  AdviseHugePages(nullptr, 0);
  AdviseHugePages(nullptr, size_t{64} << 20);
  std::vector<char> small(100, 'x');
  AdviseHugePages(small.data(), small.size());
  AdviseHugePages(small.data() + 1, small.size() - 1);
  EXPECT_EQ(small, std::vector<char>(100, 'x'));
}

TEST(HugePagesTest, ReserveHugeReservesAndKeepsContents) {
  std::vector<int64_t> v = {1, 2, 3};
  ReserveHuge(v, kHugePageMinBytes);  // 8× the threshold in bytes: advised
  EXPECT_GE(v.capacity(), kHugePageMinBytes);
  EXPECT_EQ(v, (std::vector<int64_t>{1, 2, 3}));
  v.resize(kHugePageMinBytes);
  std::iota(v.begin(), v.end(), 0);
  EXPECT_EQ(v.back(), static_cast<int64_t>(kHugePageMinBytes) - 1);
  const size_t cap = v.capacity();
  ReserveHuge(v, 10);  // smaller than the capacity: nothing happens
  EXPECT_EQ(v.capacity(), cap);
}

}  // namespace
}  // namespace stallscope::trace
