// The reader's memory bound for any input (issue 27 B02): gzip bombs of whitespace, elements
// longer than the limit, oversized top-level values. reader_test.cc has the format tests.

#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "temp_dir.h"
#include "trace/trace_reader.h"

namespace stallscope::trace {
namespace {

namespace fs = std::filesystem;

/// Writes `bytes` as `name` in `dir`; returns its path.
std::string Write(const stallscope::testing::TempDir& dir, const std::string& name,
                  const std::string& bytes) {
  const std::string path = dir.Sub(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

/// Pieces of a document: `text` repeated `times`.
struct Piece {
  std::string text;
  size_t times = 1;
};

/// The gzip of the pieces, deflated as they are generated: a 100 MiB bomb never exists
/// inflated in the test.
std::string GzipPieces(const std::vector<Piece>& pieces) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out;
  char buf[1 << 16];
  auto pump = [&](const std::string& in, int flush) {
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());
    do {
      zs.next_out = reinterpret_cast<Bytef*>(buf);
      zs.avail_out = sizeof(buf);
      deflate(&zs, flush);
      out.append(buf, sizeof(buf) - zs.avail_out);
    } while (zs.avail_out == 0);
  };
  for (const Piece& p : pieces) {
    for (size_t i = 0; i < p.times; ++i) pump(p.text, Z_NO_FLUSH);
  }
  pump("", Z_FINISH);
  deflateEnd(&zs);
  return out;
}

std::string Kernel(int ts, const std::string& name = "k") {
  return fmt::format(R"({{"ph":"X","cat":"kernel","name":"{}","pid":0,"tid":7,"ts":{},"dur":1,)"
                     R"("args":{{"stream":7,"correlation":{}}}}})",
                     name, ts, ts);
}

std::vector<std::string> Names(const RankTrace& t) {
  std::vector<std::string> out;
  for (const Event& e : t.events) {  // long names elided: a failure must stay readable
    const std::string& name = t.NameOf(e);
    out.push_back(
        fmt::format("{}@{}", name.size() > 20 ? name.substr(0, 20) + "~" : name, e.ts_ns));
  }
  return out;
}

bool HasWarning(const RankTrace& t, const std::string& text) {
  for (const std::string& w : t.warnings) {
    if (w.find(text) != std::string::npos) return true;
  }
  return false;
}

// Issue 27 B02: a 3 MB .json.gz of whitespace inside traceEvents took 3.19 GB of RSS (the
// buffer kept every byte after the last separator). Whitespace outside strings, wherever it is
// (before an element, after one, between an event's keys, inside a captured top-level value),
// now holds no buffer: the chunk buffer stays about two chunks for 100 MiB of it.
TEST(ReadTraceLimits, GzipBombOfWhitespaceHoldsNoBuffer) {
  stallscope::testing::TempDir dir("reader_limits");
  const std::string mib(size_t{1} << 20, ' ');
  const std::string lines(size_t{1} << 20, '\n');
  const std::vector<Piece> pieces = {
      {R"({"deviceProperties":[)"},
      {mib, 4},
      {R"({"id":0,"name":"GPU"}],"traceEvents":[)"},
      {mib, 48},
      {Kernel(1)},
      {lines, 16},
      {",{\"ph\":\"X\","},
      {mib, 16},
      {R"("cat":"kernel","name":"k2","pid":0,"tid":7,"ts":2,"dur":1})"},
      {mib, 16},
      {"]}"},
      {mib, 4},
  };
  const std::string path = Write(dir, "bomb.json.gz", GzipPieces(pieces));
  EXPECT_LT(fs::file_size(path), size_t{1} << 20);  // a bomb: over 100× smaller than inflated
  for (bool threaded : {false, true}) {
    ReadOptions options;
    options.threaded_inflate = threaded;
    Result<RankTrace> r = ReadTrace(path, options);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(Names(*r), (std::vector<std::string>{"k@1000", "k2@2000"}));
    EXPECT_EQ(r->stats.malformed, 0u);
    EXPECT_EQ(r->stats.oversized, 0u);
    EXPECT_GT(r->stats.bytes, uint64_t{100} << 20);
    EXPECT_LE(r->stats.buffer_bytes, 4 * options.chunk_bytes) << "threaded " << threaded;
    ASSERT_EQ(r->devices.size(), 1u);  // the blanks inside deviceProperties did not drop it
    EXPECT_TRUE(r->warnings.empty()) << r->warnings.front();
  }
}

// The same bound with tiny chunks and every layout: the cut blanks change no event.
TEST(ReadTraceLimits, BlanksCutAnywhereGiveTheSameEvents) {
  stallscope::testing::TempDir dir("reader_limits");
  const std::string pad(3000, ' ');
  const std::string json = "[" + pad + Kernel(1) + pad + "," + pad + R"({"ph" )" + pad + ":" + pad +
                           R"("X","cat":"kernel","name":"a  b","pid":0,"tid":7,"ts":)" + pad + "2" +
                           pad + R"(,"dur":1)" + pad + "}" + pad + ",[ ]," + pad + "1 ]";
  const std::string path = Write(dir, "pad.json", json);
  for (size_t chunk = 64; chunk <= 600; chunk += 37) {
    ReadOptions options;
    options.chunk_bytes = chunk;
    RankTrace t = ReadTrace(path, options).value();
    EXPECT_EQ(Names(t), (std::vector<std::string>{"k@1000", "a  b@2000"})) << chunk;
    EXPECT_EQ(t.stats.events_total, 4u) << chunk;
    EXPECT_EQ(t.stats.malformed, 2u) << chunk;  // `[ ]` and `1`: not objects
    EXPECT_LE(t.stats.buffer_bytes, 4 * chunk + 1024) << chunk;
  }
}

// An element longer than max_element_bytes (a string that cannot be cut, junk, nesting) is
// skipped as it streams past: counted (oversized, malformed), warned once, its neighbours kept,
// the buffer bounded by the limit.
TEST(ReadTraceLimits, ElementLongerThanTheLimitIsSkippedAndCounted) {
  stallscope::testing::TempDir dir("reader_limits");
  constexpr size_t kLimit = size_t{64} << 10;
  const std::string long_name(200 << 10, 'n');
  const std::string junk(300 << 10, '7');
  const std::string nested = std::string(100 << 10, '[') + std::string(100 << 10, ']');
  const std::string json = R"({"traceEvents":[)" + Kernel(1) + "," + Kernel(2, long_name) + "," +
                           Kernel(3) + "," + junk + "," + nested + "," + Kernel(4) + "," +
                           Kernel(5, long_name) + "]}";
  const std::string plain = Write(dir, "long.json", json);
  const std::string gz = Write(dir, "long.json.gz", GzipPieces({{json}}));
  for (const std::string& path : {plain, gz}) {
    for (size_t chunk : {size_t{64}, size_t{1000}, size_t{1} << 20}) {
      ReadOptions options;
      options.chunk_bytes = chunk;
      options.max_element_bytes = kLimit;
      Result<RankTrace> r = ReadTrace(path, options);
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_EQ(Names(*r), (std::vector<std::string>{"k@1000", "k@3000", "k@4000"})) << chunk;
      EXPECT_EQ(r->stats.events_total, 7u);
      EXPECT_EQ(r->stats.oversized, 4u);
      EXPECT_EQ(r->stats.malformed, 4u);
      EXPECT_FALSE(r->stats.truncated);
      EXPECT_LE(r->stats.buffer_bytes, 2 * (kLimit + chunk) + 4096) << chunk;
      ASSERT_EQ(r->warnings.size(), 1u) << r->warnings.front();
      EXPECT_EQ(r->warnings[0], path + ": 4 trace events longer than 64 KiB skipped");
    }
  }
  // The file ends inside an oversized element: lost with the truncation, as any cut element.
  const std::string cut = json.substr(0, json.find(junk) + junk.size() / 2);
  for (size_t chunk : {size_t{1000}, size_t{1} << 20}) {
    ReadOptions options;
    options.chunk_bytes = chunk;
    options.max_element_bytes = kLimit;
    Result<RankTrace> r = ReadTrace(Write(dir, "cut.json", cut), options);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(Names(*r), (std::vector<std::string>{"k@1000", "k@3000"}));
    EXPECT_EQ(r->stats.oversized, 1u) << chunk;
    EXPECT_TRUE(r->stats.truncated);
    EXPECT_TRUE(HasWarning(*r, "1 trace events longer than 64 KiB skipped"));
  }
}

// A captured top-level value (deviceProperties) longer than 1 MiB of content is dropped with a
// warning; the trace is still read.
TEST(ReadTraceLimits, OversizedTopLevelValueIsDroppedWithAWarning) {
  stallscope::testing::TempDir dir("reader_limits");
  const std::string json = R"({"deviceProperties":[{"name":")" +
                           std::string((size_t{1} << 20) + 10, 'g') + R"("}],"traceEvents":[)" +
                           Kernel(1) + "]}";
  const std::string path = Write(dir, "props.json", json);
  Result<RankTrace> r = ReadTrace(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(Names(*r), (std::vector<std::string>{"k@1000"}));
  EXPECT_TRUE(r->devices.empty());
  EXPECT_TRUE(HasWarning(*r, path + ": top-level \"deviceProperties\" longer than 1 MiB ignored"));
}

}  // namespace
}  // namespace stallscope::trace
