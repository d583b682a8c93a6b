#include "base/units.h"

#include <gtest/gtest.h>

namespace stallscope {
namespace {

TEST(ParseDurationNs, Table) {
  struct Case {
    const char* text;
    int64_t ns;
  };
  const Case cases[] = {{"500ms", 500'000'000},    {"1s", 1'000'000'000}, {"2.5s", 2'500'000'000},
                        {"10", 10'000'000'000},    {"50ms", 50'000'000},  {"1m", 60'000'000'000},
                        {"1h", 3'600'000'000'000}, {"250us", 250'000},    {" 3s ", 3'000'000'000}};
  for (const auto& c : cases) {
    auto r = ParseDurationNs(c.text);
    ASSERT_TRUE(r.ok()) << c.text;
    EXPECT_EQ(*r, c.ns) << c.text;
  }
}

TEST(ParseDurationNs, RejectsGarbage) {
  for (const char* text : {"", "ms", "5parsecs", "-1s", "1e400s", "1.2.3s", "abc"}) {
    auto r = ParseDurationNs(text);
    EXPECT_FALSE(r.ok()) << text;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
      EXPECT_NE(r.error().message.find("invalid duration"), std::string::npos);
    }
  }
}

TEST(Trim, BlanksAtBothEndsAndTrailingNewlines) {
  EXPECT_EQ(Trim("  0,1\t\n"), "0,1");
  EXPECT_EQ(Trim("\n x"), "\n x") << "a leading newline is content";
  EXPECT_EQ(Trim(" \t "), "");
  EXPECT_EQ(Trim(""), "");
}

TEST(Elide, CutsWithATildeOnlyWhenTooLong) {
  EXPECT_EQ(Elide("python3", 8), "python3");
  EXPECT_EQ(Elide("python3", 7), "python3");
  EXPECT_EQ(Elide("python3", 6), "pytho~");
  EXPECT_EQ(Elide("python3", 1), "~");
  EXPECT_EQ(Elide("python3", 0), "");
  EXPECT_EQ(Elide("", 3), "");
}

TEST(EscapeControl, Table) {
  EXPECT_EQ(EscapeControl("plain text, ünïcode"), "plain text, ünïcode");
  EXPECT_EQ(EscapeControl("a\nb\tc\rd"), "a\\nb\\tc\\rd");
  EXPECT_EQ(EscapeControl("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(EscapeControl(std::string("nul\0del\x7f", 8)), "nul\\x00del\\x7f");
  EXPECT_EQ(EscapeControl(""), "");
}

TEST(FormatIsoUtc, KnownInstant) {
  EXPECT_EQ(FormatIsoUtc(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatIsoUtc(1'700'000'000'123'456'789), "2023-11-14T22:13:20.123Z");
}

TEST(AppendJsonString, EscapesHostileNames) {
  struct Case {
    std::string in;
    std::string out;
  };
  const Case cases[] = {
      {"python", "\"python\""},
      {"a\"b", "\"a\\\"b\""},
      {"back\\slash", "\"back\\\\slash\""},
      {"tab\there", "\"tab\\there\""},
      {std::string("nul\0x", 5), "\"nul\\u0000x\""},
      {"(sd-pam) ) (", "\"(sd-pam) ) (\""},
      {"caf\xc3\xa9", "\"caf\xc3\xa9\""},        // valid UTF-8 kept
      {"lat\xe9n", "\"lat\\u00e9n\""},           // lone Latin-1 byte escaped
      {"cut\xe2\x82", "\"cut\\u00e2\\u0082\""},  // truncated sequence escaped
  };
  for (const auto& c : cases) {
    std::string out;
    AppendJsonString(out, c.in);
    EXPECT_EQ(out, c.out);
  }
}

TEST(FormatBytes, Readable) {
  EXPECT_EQ(FormatBytes(999), "999 B");
  EXPECT_EQ(FormatBytes(12'300'000'000), "12.3 GB");
  EXPECT_EQ(FormatBytes(1500), "1.5 KB");
}

TEST(FormatDurationNs, Readable) {
  EXPECT_EQ(FormatDurationNs(850'000'000), "850 ms");
  EXPECT_EQ(FormatDurationNs(2'400'000'000), "2.40 s");
  EXPECT_EQ(FormatDurationNs(192'000'000'000), "3m12s");
}

}  // namespace
}  // namespace stallscope
