#include "pystack/line_table.h"

#include <gtest/gtest.h>

#include <climits>

namespace stallscope::pystack {
namespace {

TEST(LineTable, HostileTablesEndSafely) {
  // A truncated long-form entry, a byte that is not an entry start, and an empty table.
  EXPECT_EQ(LineForInstruction(LineTable::kLocations311, std::string_view("\xf0\xff", 2), 1, 0),
            std::nullopt);
  EXPECT_EQ(LineForInstruction(LineTable::kLocations311, std::string_view("\x01", 1), 1, 0),
            std::nullopt);
  EXPECT_EQ(LineForInstruction(LineTable::kLinetable310, "", 1, 0), std::nullopt);
  EXPECT_EQ(LineForInstruction(LineTable::kLnotab, "", 5, 3), 5);
}

TEST(LineTable, EachFormat) {
  // lnotab: +2 lines at byte 4 (unit 2).
  EXPECT_EQ(LineForInstruction(LineTable::kLnotab, std::string_view("\x04\x02", 2), 10, 1), 10);
  EXPECT_EQ(LineForInstruction(LineTable::kLnotab, std::string_view("\x04\x02", 2), 10, 2), 12);
  // 3.10: 4 bytes at +1, then 4 bytes with no line.
  std::string_view t310("\x04\x01\x04\x80", 4);
  EXPECT_EQ(LineForInstruction(LineTable::kLinetable310, t310, 10, 1), 11);
  EXPECT_EQ(LineForInstruction(LineTable::kLinetable310, t310, 10, 2), std::nullopt);
  // 3.11+: code 13 (+3, 2 units), code 15 (no line, 1 unit), code 10 (+0 with columns, 1 unit).
  std::string_view t311("\xe9\x06\xf8\xd0\x01\x02", 6);
  EXPECT_EQ(LineForInstruction(LineTable::kLocations311, t311, 10, 1), 13);
  EXPECT_EQ(LineForInstruction(LineTable::kLocations311, t311, 10, 2), std::nullopt);
  EXPECT_EQ(LineForInstruction(LineTable::kLocations311, t311, 10, 3), 13);
}

// Fuzz crash 2ea227c8 (pystack_fuzz): a line delta past int's range was signed overflow (UBSan);
// such a table is corrupt: no line.
TEST(LineTable, LineLeavingIntRangeIsNoLineNotOverflow) {
  // Code 13 (one unit), svarint +2^26 (6-bit chunks, 0x40 continues; 8 << 24 = 2 * 2^26).
  std::string_view t311("\xe8\x40\x40\x40\x40\x08", 6);
  EXPECT_EQ(LineForInstruction(LineTable::kLocations311, t311, INT_MAX - 5, 0), std::nullopt);
  EXPECT_EQ(LineForInstruction(LineTable::kLocations311, t311, 1, 0), 1 + (1 << 26));
  EXPECT_EQ(LineForInstruction(LineTable::kLnotab, std::string_view("\x00\x7f", 2), INT_MAX, 0),
            std::nullopt);
  EXPECT_EQ(
      LineForInstruction(LineTable::kLinetable310, std::string_view("\x02\x7f", 2), INT_MAX - 1, 0),
      std::nullopt);
}

}  // namespace
}  // namespace stallscope::pystack
