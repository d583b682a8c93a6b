// The JSON scanner of the trace reader (json_scan.h): exact µs → ns numbers and the cutting of
// traceEvents into complete elements at any chunk boundary.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "trace/json_scan.h"

namespace stallscope::trace {
namespace {

// ---------------------------------------------------------------------------------------------
// Numbers

TEST(ParseMicrosToNs, Table) {
  struct Case {
    const char* text;
    std::optional<int64_t> ns;
  };
  const Case cases[] = {
      {"0", 0},
      {"158", 158000},
      {"1661203462598738", 1661203462598738000},  // Kineto integer µs
      {"4458676522690.655", 4458676522690655},    // Kineto 3 decimals
      {"4458676522690.6", 4458676522690600},
      {"156.777", 156777},
      {"0.0004", 0},  // sub-ns: rounds half up on the 4th decimal
      {"0.0005", 1},
      {"1.2345", 1235},
      {"-3", -3000},
      {"-0.5", -500},
      {" 12 ", 12000},
      {"1e3", 1000000},
      {"2.5E1", 25000},
      {"1.5e-3", 2},  // 1.5 ns rounds half up
      {"1e+2", 100000},
      {"9223372036854775", 9223372036854775000},
      {"9223372036854776", std::nullopt},  // overflows int64 ns
      {"", std::nullopt},
      {"-", std::nullopt},
      {"1.", std::nullopt},
      {".5", std::nullopt},
      {"12x", std::nullopt},
      {"\"12\"", std::nullopt},
      {"1e", std::nullopt},
      {"1e99", std::nullopt},
      {"null", std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ParseMicrosToNs(c.text), c.ns) << "text: '" << c.text << "'";
  }
}

// ---------------------------------------------------------------------------------------------
// Scanner

/// Scans `json` fed in two pieces split at `split`, with the buffer slid like the reader does;
/// returns the element texts.
std::vector<std::string> ScanElements(const std::string& json, size_t split, JsonScanner* s) {
  std::vector<std::string> elements;
  std::string buf;
  std::vector<ElementSpan> spans;
  size_t fed = 0;
  for (size_t end : {split, json.size()}) {
    buf.append(json, fed, end - fed);
    fed = end;
    bool eof = end == json.size();
    buf.reserve(buf.size() + 64);
    s->Scan(buf.data(), buf.size(), eof, &spans);
    for (const ElementSpan& sp : spans) {
      elements.push_back(buf.substr(sp.open + 1, sp.close - sp.open - 1));
    }
    spans.clear();
    uint64_t keep = s->keep_from();
    buf.erase(0, keep);
    s->Shift(keep);
  }
  return elements;
}

TEST(JsonScanner, CutsElementsAtEverySplit) {
  struct Case {
    std::string json;
    std::vector<std::string> elements;
    JsonLayout layout;
  };
  const std::string long_string(150, 'x');
  const std::vector<Case> cases = {
      {R"([{"a":1},{"b":[1,2]}])", {R"({"a":1})", R"({"b":[1,2]})"}, JsonLayout::kBareArray},
      {R"({"traceEvents":[ {"s":"],}{[\""} , 7 ,"x,y"]})",
       {R"( {"s":"],}{[\""} )", " 7 ", R"("x,y")"},
       JsonLayout::kObject},
      // Escaped backslashes before a closing quote: "\\" ends the string, "\\\"" does not.
      {R"({"k":"\\","traceEvents":[{"a":"\\"},{"b":"\\\"],"},{"c":"\\\\\\"}]})",
       {R"({"a":"\\"})", R"({"b":"\\\"],"})", R"({"c":"\\\\\\"})"},
       JsonLayout::kObject},
      {"{\"x\": {\"traceEvents\": [1]}, \"traceEvents\": [{\"n\":\"" + long_string + "\"}]}",
       {"{\"n\":\"" + long_string + "\"}"},
       JsonLayout::kObject},
      {"[]", {""}, JsonLayout::kBareArray},
  };
  for (const Case& c : cases) {
    for (size_t split = 0; split <= c.json.size(); ++split) {
      JsonScanner s({});
      std::vector<std::string> got = ScanElements(c.json, split, &s);
      EXPECT_EQ(got, c.elements) << c.json << " split at " << split;
      EXPECT_EQ(s.layout(), c.layout);
      EXPECT_TRUE(s.done());
      EXPECT_FALSE(s.in_events());
    }
  }
}

TEST(JsonScanner, CapturesTopLevelValuesBeforeAndAfter) {
  const std::string json =
      R"({"a": {"x": [1, "}"]}, "traceEvents": [{"e": 1}], "b" : "q\"uote" , "c": 3})";
  for (size_t split = 0; split <= json.size(); ++split) {
    JsonScanner s({"a", "b", "c"});
    ScanElements(json, split, &s);
    ASSERT_EQ(s.values().size(), 3u);
    EXPECT_EQ(s.values()[0].key, "a");
    EXPECT_EQ(s.values()[0].raw, R"({"x": [1, "}"]})");
    EXPECT_EQ(s.values()[1].raw, R"("q\"uote" )");
    EXPECT_EQ(s.values()[2].raw, "3");
  }
}

TEST(JsonScanner, ReportsLastCompleteObjectOfCutFile) {
  JsonScanner s({});
  std::vector<std::string> got = ScanElements(R"([{"a":1}, {"b":2} )", 5, &s);
  EXPECT_EQ(got, (std::vector<std::string>{R"({"a":1})", R"( {"b":2} )"}));
  EXPECT_TRUE(s.in_events());
  JsonScanner partial({});
  got = ScanElements(R"([{"a":1}, {"b":)", 3, &partial);
  EXPECT_EQ(got, (std::vector<std::string>{R"({"a":1})"}));
}

}  // namespace
}  // namespace stallscope::trace
