#include "doctor/visible_devices.h"

#include <gtest/gtest.h>

namespace stallscope::doctor {
namespace {

const std::vector<std::string> kUuids = {"GPU-aaaa1111-0000", "GPU-aaaa2222-0000",
                                         "GPU-bbbb0000-0000", "GPU-cccc0000-0000"};

TEST(ResolveVisibleDevices, Table) {
  struct Case {
    std::optional<std::string_view> value;
    std::vector<uint32_t> gpus;
    std::string stopped_at = "";
    std::string reason = "";
    size_t mig = 0;
  };
  const Case cases[] = {
      {std::nullopt, {0, 1, 2, 3}},
      {"", {}},
      {"  ", {}},
      {"2,0", {2, 0}},
      {" 1 , 3 ", {1, 3}},
      // CUDA C++ Programming Guide: "0,2,-1,1" shows 0 and 2.
      {"0,2,-1,1", {0, 2}, "-1", "-1 hides every GPU after it"},
      {"0,9,1", {0}, "9", "there is no GPU 9 (4 GPUs)"},
      {"GPU-bbbb,GPU-cc", {2, 3}},
      {"GPU-aaaa", {}, "GPU-aaaa", "'GPU-aaaa' matches more than one GPU's UUID"},
      {"GPU-ffff", {}, "GPU-ffff", "no GPU's UUID starts with 'GPU-ffff'"},
      {"0,0", {0}, "0", "GPU 0 is listed again"},
      {"1,GPU-aaaa2222", {1}, "GPU-aaaa2222", "GPU 1 is listed again"},
      {"cuda:0", {}, "cuda:0", "'cuda:0' is no GPU"},
      {"0,,1,", {0, 1}},
      {"MIG-1234abcd,MIG-5678", {}, "", "", 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.value ? std::string(*c.value) : "<unset>");
    const Visibility v = ResolveVisibleDevices(c.value, kUuids);
    EXPECT_EQ(v.set, c.value.has_value());
    EXPECT_EQ(v.gpus, c.gpus);
    EXPECT_EQ(v.stopped_at, c.stopped_at);
    EXPECT_EQ(v.stop_reason, c.reason);
    EXPECT_EQ(v.mig_instances.size(), c.mig);
  }
}

TEST(ResolveVisibleDevices, NoGpus) {
  EXPECT_TRUE(ResolveVisibleDevices(std::nullopt, {}).gpus.empty());
  const Visibility v = ResolveVisibleDevices("0", {});
  EXPECT_EQ(v.stop_reason, "there is no GPU 0 (0 GPUs)");
}

}  // namespace
}  // namespace stallscope::doctor
