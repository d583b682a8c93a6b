#include "base/json_fields.h"

#include <gtest/gtest.h>

namespace stallscope {
namespace {

TEST(JsonOpt, WrongTypesNullAndOutOfRangeReadAsEmpty) {
  const auto j = nlohmann::json::parse(
      R"({"n": 4, "neg": -3, "big": 18446744073709551615, "f": 2.5, "s": "x", "b": true,)"
      R"( "null": null, "nstr": "4"})");
  EXPECT_EQ(JsonOpt<int64_t>(j, "n"), 4);
  EXPECT_EQ(JsonOpt<int32_t>(j, "neg"), -3);
  EXPECT_EQ(JsonOpt<uint32_t>(j, "neg"), std::nullopt);
  EXPECT_EQ(JsonOpt<int64_t>(j, "big"), std::nullopt);
  EXPECT_EQ(JsonOpt<uint64_t>(j, "big"), UINT64_MAX);
  EXPECT_EQ(JsonOpt<int64_t>(j, "f"), std::nullopt) << "2.5 workers is no count";
  EXPECT_EQ(JsonOpt<int64_t>(j, "nstr"), std::nullopt);
  EXPECT_EQ(JsonOpt<int64_t>(j, "null"), std::nullopt);
  EXPECT_EQ(JsonOpt<int64_t>(j, "missing"), std::nullopt);
  EXPECT_EQ(JsonOpt<std::string>(j, "s"), "x");
  EXPECT_EQ(JsonOpt<std::string>(j, "n"), std::nullopt);
  EXPECT_EQ(JsonOpt<bool>(j, "b"), true);
  EXPECT_EQ(JsonOpt<bool>(j, "n"), std::nullopt);
  EXPECT_EQ(JsonOpt<int64_t>(nlohmann::json::array({1}), "n"), std::nullopt);
}

}  // namespace
}  // namespace stallscope
