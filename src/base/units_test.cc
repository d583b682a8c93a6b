#include "base/units.h"

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include <gtest/gtest.h>

#include "base/json_writer.h"

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

// One trim for config values, /proc lines, environment variables and JSON tokens: the
// whitespace JSON allows, at both ends, nothing inside.
TEST(Trim, JsonWhitespaceAtBothEnds) {
  std::pair<std::string_view, std::string_view> cases[] = {
      {"  0,1\t\n", "0,1"}, {"\n x", "x"},      {"12\r\n", "12"}, {"\r\n\t 7 \t", "7"},
      {" \t ", ""},         {"", ""},           {"a b", "a b"},   {"\va\f", "\va\f"},
      {"\n", ""},           {" x\ny ", "x\ny"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(Trim(in), want) << EscapeControl(in);
}

TEST(ParseInt64, Table) {
  struct Case {
    std::string_view text;
    std::optional<int64_t> want;
  } cases[] = {
      {"0", 0},
      {"7", 7},
      {"-7", -7},
      {"007", 7},
      {"-0", 0},
      {"123456789012345678", 123456789012345678},    // 18 digits: the fast path
      {"1234567890123456789", 1234567890123456789},  // 19 digits: range-checked
      {"9223372036854775807", INT64_MAX},
      {"-9223372036854775808", INT64_MIN},
      {"9223372036854775808", std::nullopt},  // one past the top
      {"-9223372036854775809", std::nullopt},
      {"99999999999999999999999", std::nullopt},
      {"0000000000000000000000042", 42},  // long only in zeros
      {"", std::nullopt},
      {"-", std::nullopt},
      {"+5", std::nullopt},
      {" 5", std::nullopt},  // Trim first where blanks are allowed
      {"5 ", std::nullopt},
      {"5a", std::nullopt},
      {"1.0", std::nullopt},
      {"1e3", std::nullopt},
      {"--5", std::nullopt},
      {"0x10", std::nullopt},
  };
  for (const Case& c : cases) EXPECT_EQ(ParseInt64(c.text), c.want) << c.text;
}

TEST(NsToSeconds, Exact) {
  EXPECT_EQ(NsToSeconds(0), 0.0);
  EXPECT_EQ(NsToSeconds(kNsPerSec), 1.0);
  EXPECT_EQ(NsToSeconds(1'500'000'000), 1.5);
  EXPECT_EQ(NsToSeconds(-kNsPerMs), -0.001);
  EXPECT_EQ(kNsPerSec, 1000 * kNsPerMs);
  EXPECT_EQ(kNsPerMs, 1000 * kNsPerUs);
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

// Issue 27 B17: C1 controls (CSI U+009B, OSC U+009D, ST U+009C) reached the terminal: as UTF-8
// characters and as lone bytes (CSI on an 8-bit terminal). Characters that merely contain a byte
// 0x80..0x9f as a continuation (U+00DB "Û" is C3 9B, "€" is E2 82 AC) are untouched.
TEST(EscapeControl, C1ControlsAreEscaped) {
  struct Case {
    std::string in;
    std::string want;
  } cases[] = {
      {"data\u009b2J", "data\\u009b2J"},
      {"\u009d0;title\u009c", "\\u009d0;title\\u009c"},
      {"\u0080\u009f", "\\u0080\\u009f"},
      {"\u00a0\u00db\u20ac", "\u00a0\u00db\u20ac"},  // NBSP, Û, €: not controls
      {"lone \x9b"
       "2J",
       "lone \\x9b2J"},
      {"lone \x80", "lone \\x80"},
      {"cut \xc2", "cut \xc2"},                // a truncated sequence, no control
      {"latin \xe9t\xe9", "latin \xe9t\xe9"},  // Latin-1 bytes pass as before
      {"\x1b\xc2\x9b", "\\x1b\\u009b"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(EscapeControl(in), want) << EscapeControl(in);
}

// Issue 27 B21: the errno's own words, as the cause in a message.
TEST(ErrnoText, LowercasedStrerror) {
  EXPECT_EQ(ErrnoText(EACCES), "permission denied");
  EXPECT_EQ(ErrnoText(ELOOP), "too many levels of symbolic links");
  EXPECT_EQ(ErrnoText(ENOENT), "no such file or directory");
  EXPECT_EQ(ErrnoText(EIO), "input/output error");
}

TEST(FormatIsoUtc, KnownInstant) {
  EXPECT_EQ(FormatIsoUtc(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatIsoUtc(1'700'000'000'123'456'789), "2023-11-14T22:13:20.123Z");
}

TEST(AppendUtf8, OneToFourBytes) {
  std::string out;
  for (uint32_t c : {0x41u, 0xE9u, 0x20ACu, 0x1F600u}) AppendUtf8(out, c);
  EXPECT_EQ(out, "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
}

TEST(CutUtf8, CutsAtACharacterBoundary) {
  EXPECT_EQ(CutUtf8("short", 10), "short");
  EXPECT_EQ(CutUtf8("abcdef", 3), "abc...");
  EXPECT_EQ(CutUtf8("ab\xC3\xA9"
                    "cd",
                    3),
            "ab...");  // not inside the two bytes of é
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

// Issue 12, finding 6: counter and phase names from the job are JSON object keys in the run
// report; an escape or a quote in one must not break the JSON.
TEST(JsonWriter, KeysAreEscapedWhenTheyNeedIt) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject().Key(std::string("a\"\x1b[31m\r\0", 9)).Int(3).Field("b", 1);
  w.Key("back\\slash").Int(4).Key("caf\xc3\xa9").Int(5).Key("").Int(6).EndObject();
  EXPECT_EQ(out,
            "{\"a\\\"\\u001b[31m\\u000d\\u0000\":3,\"b\":1,\"back\\\\slash\":4,\"caf\xc3\xa9\":5,"
            "\"\":6}");
}

TEST(FormatBytes, Readable) {
  EXPECT_EQ(FormatBytes(999), "999 B");
  EXPECT_EQ(FormatBytes(12'300'000'000), "12.3 GB");
  EXPECT_EQ(FormatBytes(1500), "1.5 KB");
}

TEST(FormatDurationNs, Table) {
  std::pair<int64_t, std::string_view> cases[] = {
      {0, "0 us"},
      {850'000, "850 us"},
      {999'999, "1000 us"},  // rounded, not promoted: the unit is chosen before rounding
      {1'000'000, "1 ms"},
      {850'000'000, "850 ms"},
      {2'400'000'000, "2.40 s"},
      {59'999'000'000, "60.00 s"},
      {60'000'000'000, "1m00s"},
      {192'000'000'000, "3m12s"},
      {3'900'000'000'000, "1h05m"},
      {-5'000, "-5 us"},
  };
  for (const auto& [ns, want] : cases) EXPECT_EQ(FormatDurationNs(ns), want) << ns;
}

TEST(FormatDurationFineNs, Table) {
  std::pair<double, std::string_view> cases[] = {
      {0, "0 ns"},       {850, "850 ns"},         {999.4, "999 ns"},
      {1234, "1.2 µs"},  {76'100'000, "76.1 ms"}, {999'999'999, "1000.0 ms"},
      {2.5e9, "2.50 s"}, {3.6e12, "3600.00 s"},   {-5, "-5 ns"},
  };
  for (const auto& [ns, want] : cases) EXPECT_EQ(FormatDurationFineNs(ns), want) << ns;
}

TEST(FormatDurationSeconds, Table) {
  std::pair<double, std::string_view> cases[] = {
      {0, "0 us"},     {0.00085, "850 us"}, {0.0123, "12.3 ms"}, {0.5, "500.0 ms"},
      {1.0, "1.00 s"}, {2.5, "2.50 s"},     {125.0, "125.00 s"},
  };
  for (const auto& [s, want] : cases) EXPECT_EQ(FormatDurationSeconds(s), want) << s;
}

TEST(FormatDurationShortSeconds, Table) {
  std::pair<double, std::string_view> cases[] = {
      {0.0123, "12.3 ms"}, {0.0999, "99.9 ms"}, {0.1, "0.10 s"}, {1.42, "1.42 s"}, {0, "0.0 ms"},
  };
  for (const auto& [s, want] : cases) EXPECT_EQ(FormatDurationShortSeconds(s), want) << s;
}

TEST(FormatPercent, Table) {
  EXPECT_EQ(FormatPercent(0.1234, 1), "12.3%");
  EXPECT_EQ(FormatPercent(0.29, 0), "29%");
  EXPECT_EQ(FormatPercent(1.0, 0), "100%");
  EXPECT_EQ(FormatPercent(0.0, 1), "0.0%");
  EXPECT_EQ(FormatPercent(-0.05, 1), "-5.0%");
  EXPECT_EQ(FormatPercentShort(0.913), "91%");
  EXPECT_EQ(FormatPercentShort(0.046), "4.6%");
  EXPECT_EQ(FormatPercentShort(0.0994), "9.9%");
  EXPECT_EQ(FormatPercentShort(0.0996), "10%");
  EXPECT_EQ(FormatPercentShort(-0.046), "-4.6%");
}

}  // namespace
}  // namespace stallscope
