#include "pystack/elf_symbols.h"

#include <gtest/gtest.h>

namespace stallscope::pystack {
namespace {

TEST(ParseMaps, LinesAndJunk) {
  auto maps = ParseMaps(
      "00400000-00420000 r--p 00000000 08:01 123  /usr/bin/python3.11\n"
      "garbage\n"
      "7f00-7f10 rw-p 00001000 00:00 0\n");
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_EQ(maps[0].start, 0x400000u);
  EXPECT_EQ(maps[0].path, "/usr/bin/python3.11");
  EXPECT_EQ(maps[1].offset, 0x1000u);
  EXPECT_EQ(maps[1].path, "");
}

TEST(ElfSymbols, FindsOurOwnMainAndRefusesNonElf) {
  auto elf = ElfSymbols::Open("/proc/self/exe");
  ASSERT_TRUE(elf.ok()) << elf.error().message;
  EXPECT_TRUE(elf->Find("main"));
  EXPECT_FALSE(elf->Find("no_such_symbol_anywhere"));
  auto text = ElfSymbols::Open("/proc/self/status");
  EXPECT_FALSE(text.ok());
}

}  // namespace
}  // namespace stallscope::pystack
