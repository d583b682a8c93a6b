// The JSON scanner of the trace reader (json_scan.h): exact µs → ns numbers and the cutting of
// traceEvents into complete elements at any chunk boundary.
#include <random>
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

// ---------------------------------------------------------------------------------------------
// The two kernels (baseline SSE2 and runtime-dispatched AVX2) must agree byte for byte.

/// Everything a scan shows from the outside: the elements and the final state.
struct ScanOutcome {
  std::vector<std::string> elements;
  bool done = false;
  bool in_events = false;
  bool events_found = false;
  JsonLayout layout = JsonLayout::kUnknown;
  bool operator==(const ScanOutcome&) const = default;
};

ScanOutcome ScanWith(ScanKernel kernel, const std::string& json, size_t split) {
  JsonScanner s({}, kernel);
  ScanOutcome o;
  o.elements = ScanElements(json, split, &s);
  o.done = s.done();
  o.in_events = s.in_events();
  o.events_found = s.events_found();
  o.layout = s.layout();
  return o;
}

/// Compares both kernels on `json` cut at `split`; skipped where the CPU has no AVX2.
void ExpectKernelsAgree(const std::string& json, size_t split) {
  ScanOutcome base = ScanWith(ScanKernel::kBaseline, json, split);
  ScanOutcome avx2 = ScanWith(ScanKernel::kAvx2, json, split);
  EXPECT_EQ(base, avx2) << json << " split at " << split;
}

TEST(JsonScannerKernels, ResolveNeverAuto) {
  EXPECT_EQ(ResolveScanKernel(ScanKernel::kBaseline), ScanKernel::kBaseline);
  EXPECT_NE(ResolveScanKernel(ScanKernel::kAuto), ScanKernel::kAuto);
  EXPECT_NE(ResolveScanKernel(ScanKernel::kAvx2), ScanKernel::kAuto);
  EXPECT_EQ(JsonScanner({}, ScanKernel::kBaseline).kernel(), ScanKernel::kBaseline);
  EXPECT_EQ(JsonScanner({}).kernel(), ResolveScanKernel(ScanKernel::kAuto));
}

// Quotes, backslash runs and brackets at every position around the 32- and 64-byte lane
// boundaries, every split point, and every truncation (a cut file).
TEST(JsonScannerKernels, AgreeAcrossLaneBoundaries) {
  if (ResolveScanKernel(ScanKernel::kAvx2) != ScanKernel::kAvx2) {
    GTEST_SKIP() << "no AVX2 on this CPU: only the baseline kernel runs";
  }
  const std::string specials[] = {"\"", "\\\"", "\\\\\"", "\\\\", "],}{[", "\\u0022"};
  for (const std::string& special : specials) {
    for (size_t pad = 0; pad < 70; ++pad) {
      // The element is padded so that `special` lands at offset pad of the array's bytes.
      std::string name = std::string(pad, 'p') + special + "q";
      if (special == "\\\\") name += "\\\\";  // keep the string's backslashes paired
      std::string json = R"({"traceEvents":[{"name":")" + name + R"(","ts":1},[1,{"a":"]"}],2]})";
      for (size_t split : {size_t{0}, json.size() / 2, json.size()})
        ExpectKernelsAgree(json, split);
      for (size_t cut = 0; cut < json.size(); cut += 7) {
        ExpectKernelsAgree(json.substr(0, cut), cut / 2);
      }
    }
  }
}

// Random trace-like documents: strings full of quotes, escapes and brackets, nested objects,
// long and short elements; every prefix length up to 600 bytes (truncated inputs).
TEST(JsonScannerKernels, AgreeOnRandomDocuments) {
  if (ResolveScanKernel(ScanKernel::kAvx2) != ScanKernel::kAvx2) {
    GTEST_SKIP() << "no AVX2 on this CPU: only the baseline kernel runs";
  }
  std::mt19937 rng(16);
  const char kStringChars[] = "ab ,:{}[]\"\\\\";  // escaped quote, escaped backslash, ...
  auto random_string = [&] {
    std::string out = "\"";
    const size_t n = rng() % 90;
    for (size_t i = 0; i < n; ++i) {
      char c = kStringChars[rng() % (sizeof(kStringChars) - 1)];
      if (c == '"' || c == '\\') out += '\\';  // keep the JSON valid
      out += c;
    }
    return out + "\"";
  };
  for (int doc = 0; doc < 40; ++doc) {
    std::string json = R"({"k":)" + random_string() + R"(,"traceEvents":[)";
    const int elements = 1 + static_cast<int>(rng() % 12);
    for (int e = 0; e < elements; ++e) {
      if (e > 0) json += ",";
      json += R"({"name":)" + random_string() + R"(,"args":{"x":[1,)" + random_string() + "]}}";
    }
    json += R"(],"b":)" + random_string() + "}";
    for (size_t split = 0; split <= json.size(); split += 13) ExpectKernelsAgree(json, split);
    for (size_t cut = 0; cut <= std::min<size_t>(json.size(), 600); ++cut) {
      ExpectKernelsAgree(json.substr(0, cut), cut / 3);
    }
  }
}

}  // namespace
}  // namespace stallscope::trace
