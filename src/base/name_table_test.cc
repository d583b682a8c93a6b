#include "base/name_table.h"

#include <gtest/gtest.h>

namespace stallscope {
namespace {

enum class Colour : uint8_t { kRed, kGreen, kBlue };
inline constexpr NameTableEntry<Colour> kColourNames[] = {
    {Colour::kRed, "red"},
    {Colour::kGreen, "green"},
    {Colour::kBlue, "blue"},
};

TEST(NameTable, BothWays) {
  static_assert(NameIn(kColourNames, Colour::kGreen) == "green");
  for (const auto& [c, name] : kColourNames) {
    EXPECT_EQ(NameIn(kColourNames, c), name);
    EXPECT_EQ(ValueNamed(kColourNames, name), c);
  }
  EXPECT_EQ(ValueNamed(kColourNames, "Green"), std::nullopt);
  EXPECT_EQ(ValueNamed(kColourNames, ""), std::nullopt);
}

TEST(NameTable, AValueOutsideTheTableGetsTheFirstName) {
  EXPECT_EQ(NameIn(kColourNames, static_cast<Colour>(7)), "red");
}

}  // namespace
}  // namespace stallscope
