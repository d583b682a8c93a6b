#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "trace/byte_source.h"
#include "trace/trace_reader.h"

#include "hta_traces.h"

namespace stallscope::trace {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return std::string(STALLSCOPE_SOURCE_DIR) + "/tests/data/traces/" + name;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A scratch directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    // Prefer tmpfs: the cut tests write thousands of small files.
    std::error_code ec;
    fs::path base = fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0
                        ? fs::path("/dev/shm")
                        : fs::temp_directory_path();
    std::string tmpl = (base / "reader_test_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) != nullptr ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Write(const std::string& name, const std::string& bytes) const {
    std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Gzip(const std::string& data) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, data.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string Describe(const RankTrace& t, const Event& e) {
  return fmt::format("{} ts={} dur={} corr={} pid={} tid={} bytes={} kind={} flags={}", t.NameOf(e),
                     e.ts_ns, e.dur_ns, e.correlation, e.pid, e.tid, e.bytes,
                     static_cast<int>(e.kind), static_cast<int>(e.flags));
}

std::vector<std::string> DescribeAll(const RankTrace& t) {
  std::vector<std::string> out;
  for (const Event& e : t.events) out.push_back(Describe(t, e));
  return out;
}

RankTrace MustRead(const std::string& path, const ReadOptions& options = {}) {
  Result<RankTrace> r = ReadTrace(path, options);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(r).value() : RankTrace{};
}

const Event* FindEvent(const RankTrace& t, const std::string& name, size_t nth = 0) {
  for (const Event& e : t.events) {
    if (t.NameOf(e) == name && nth-- == 0) return &e;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Fixtures

TEST(ReadTrace, KinetoFixture) {
  RankTrace t = MustRead(Fixture("reader_kineto.json"));
  EXPECT_EQ(t.rank, 2);
  EXPECT_EQ(t.rank_source, RankSource::kDistributedInfo);
  EXPECT_EQ(t.world_size, 4);
  EXPECT_EQ(t.backend, "nccl");
  EXPECT_EQ(t.dialect, Dialect::kKineto);
  EXPECT_EQ(t.base_time_ns, 1711964646000000000);
  ASSERT_EQ(t.devices.size(), 1u);
  EXPECT_EQ(t.devices[0].name, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(t.devices[0].total_memory_bytes, 85198045184u);
  EXPECT_EQ(t.devices[0].compute_major, 8);
  EXPECT_EQ(t.devices[0].num_sms, 108);
  EXPECT_EQ(t.stats.events_total, 21u);
  EXPECT_EQ(t.stats.complete, 15u);
  EXPECT_EQ(t.stats.flows, 2u);
  EXPECT_EQ(t.stats.metadata, 2u);
  EXPECT_EQ(t.stats.instant, 1u);
  EXPECT_EQ(t.stats.counters, 1u);
  EXPECT_EQ(t.stats.malformed, 0u);
  EXPECT_FALSE(t.stats.truncated);
  EXPECT_TRUE(t.warnings.empty());
  EXPECT_EQ(t.process_names.at(2910249), "python3.10");
  EXPECT_EQ(t.thread_names.at(2919752), "thread 2919752 (python3)");

  const std::vector<std::string> expected = {
      "ProfilerStep#5 ts=4458676522600001 dur=5000500 corr=-1 pid=2910249 tid=2919752 bytes=0 "
      "kind=8 flags=0",
      "aten::\"odd\" [name], {with} \\ escapes\\ ts=4458676522690655 dur=156777 corr=-1 "
      "pid=2910249 tid=2919752 bytes=0 kind=7 flags=0",
      "cudaLaunchKernel ts=4458676522700000 dur=12000 corr=101 pid=2910249 tid=2919752 bytes=0 "
      "kind=5 flags=0",
      "void gemm_kernel<float, 128>(float*, float const*) ts=4458676522750123 dur=40250 corr=101 "
      "pid=0 tid=7 bytes=0 kind=0 flags=0",
      "Memcpy HtoD (Pageable -> Device) ts=4458676522800000 dur=3000 corr=102 pid=0 tid=20 "
      "bytes=4194304 kind=1 flags=0",
      "Memset (Device) ts=4458676522810000 dur=1000 corr=103 pid=0 tid=7 bytes=512 kind=2 flags=0",
      "Stream Sync ts=4458676522820000 dur=2000 corr=104 pid=0 tid=7 bytes=0 kind=3 flags=0",
      "cudaGraphLaunch ts=4458676522900000 dur=8000 corr=202 pid=2910249 tid=2919752 bytes=0 "
      "kind=5 flags=0",
      "graph_kernel ts=4458676522950000 dur=10000 corr=202 pid=0 tid=7 bytes=0 kind=0 flags=1",
      "record_param_comms ts=4458676523000000 dur=20000 corr=-1 pid=2910249 tid=2919752 bytes=0 "
      "kind=7 flags=0",
      "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*) "
      "ts=4458676523010000 dur=300000 corr=203 pid=0 tid=40 bytes=0 kind=0 flags=0",
      "train.py(12): step ts=4458676523100000 dur=50000 corr=-1 pid=2910249 tid=2919752 bytes=0 "
      "kind=9 flags=0",
      "cuLaunchKernel ts=4458676523200000 dur=4000 corr=204 pid=2910249 tid=2919752 bytes=0 "
      "kind=6 flags=0",
      "ProfilerStep#5 ts=4458676522750000 dur=700000 corr=-1 pid=0 tid=7 bytes=0 kind=4 flags=0",
      fmt::format("PyTorch Profiler (0) ts=4458676522000000 dur=2000000 corr=-1 pid=0 tid={} "
                  "bytes=0 kind=10 flags=0",
                  t.events.empty() ? 0 : t.events.back().tid),
  };
  std::vector<std::string> got = DescribeAll(t);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(got[i], expected[i]) << i;
  EXPECT_GT(t.events.back().tid, 0);  // string tid "PyTorch Profiler": a stable hash

  ASSERT_EQ(t.collectives.size(), 2u);
  EXPECT_EQ(t.collectives[0].collective, "allreduce");
  EXPECT_EQ(t.collectives[0].correlation, -1);
  EXPECT_EQ(t.collectives[0].process_group, "default_pg");
  EXPECT_EQ(t.collectives[0].group_size, 4);
  EXPECT_EQ(t.collectives[1].correlation, 203);
  EXPECT_EQ(t.collectives[1].in_msg_nelems, 2049000);
  EXPECT_EQ(t.collectives[1].out_msg_nelems, 2049000);
  EXPECT_EQ(t.collectives[1].dtype, "Float");
  EXPECT_EQ(t.collectives[1].process_group, "0");
}

TEST(ReadTrace, MinifiedEqualsPretty) {
  RankTrace pretty = MustRead(Fixture("reader_kineto.json"));
  RankTrace min = MustRead(Fixture("reader_kineto_min.json"));
  EXPECT_EQ(DescribeAll(min), DescribeAll(pretty));
  EXPECT_EQ(min.stats.events_total, pretty.stats.events_total);
  EXPECT_EQ(min.rank, pretty.rank);
  EXPECT_EQ(min.devices.size(), pretty.devices.size());
  EXPECT_EQ(min.collectives.size(), pretty.collectives.size());
  EXPECT_EQ(min.thread_names, pretty.thread_names);
}

TEST(ReadTrace, Dialect2021) {
  RankTrace t = MustRead(Fixture("reader_2021.json"));
  EXPECT_EQ(t.dialect, Dialect::kKineto2021);
  EXPECT_EQ(t.stats.complete, 8u);
  EXPECT_EQ(t.stats.flows, 2u);
  EXPECT_EQ(t.stats.metadata, 1u);
  const Event* step = FindEvent(t, "ProfilerStep#3");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->kind, EventKind::kCpuOp);  // "Operator"
  EXPECT_EQ(step->ts_ns, 1621401187223005000);
  const Event* sgemm = FindEvent(t, "volta_sgemm_32x32_sliced1x4_nn");
  ASSERT_NE(sgemm, nullptr);
  EXPECT_EQ(sgemm->kind, EventKind::kKernel);
  EXPECT_EQ(sgemm->tid, 7);
  EXPECT_EQ(sgemm->correlation, 31);
  const Event* ew = FindEvent(t, "elementwise_kernel");
  ASSERT_NE(ew, nullptr);
  EXPECT_EQ(ew->tid, 13);  // from "stream 13": no args.stream
  EXPECT_EQ(ew->pid, 1);   // no args.device: numeric pid
  EXPECT_EQ(FindEvent(t, "cudaLaunchKernel")->kind, EventKind::kRuntime);
  EXPECT_EQ(FindEvent(t, "Memcpy DtoH (Device -> Pageable)")->kind, EventKind::kMemcpy);
  EXPECT_EQ(FindEvent(t, "Memcpy DtoH (Device -> Pageable)")->bytes, 1024u);
  EXPECT_EQ(FindEvent(t, "Memset (Device)")->kind, EventKind::kMemset);
  EXPECT_EQ(FindEvent(t, "PyTorch Profiler (0)")->kind, EventKind::kOther);
  EXPECT_EQ(t.process_names.at(0), "GPU 0");
  // The "_N.json" file-name rule applies to this fixture's own name.
  EXPECT_EQ(t.rank, 2021);
  EXPECT_EQ(t.rank_source, RankSource::kFileName);
}

TEST(ReadTrace, LegacyBareArray) {
  RankTrace t = MustRead(Fixture("reader_legacy.json"));
  EXPECT_EQ(t.dialect, Dialect::kChromeNoCats);
  ASSERT_EQ(t.events.size(), 4u);
  EXPECT_EQ(t.events[0].kind, EventKind::kUserAnnotation);  // enumerate(DataLoader)...
  EXPECT_EQ(t.events[1].kind, EventKind::kUserAnnotation);  // ProfilerStep#1
  EXPECT_EQ(t.events[2].kind, EventKind::kCpuOp);
  EXPECT_EQ(t.events[1].ts_ns, 119000);
  EXPECT_EQ(t.events[1].dur_ns, 8000);
  EXPECT_EQ(t.events[2].pid, 0);  // "CPU functions"
  EXPECT_EQ(t.events[3].tid, 2);
  EXPECT_FALSE(t.stats.truncated);
  EXPECT_TRUE(t.warnings.empty());
}

TEST(ReadTrace, MetadataAfterTraceEvents) {
  RankTrace t = MustRead(Fixture("reader_meta_after.json"));
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.stats.events_total, 2u);
  EXPECT_EQ(t.events[0].ts_ns, 1000500);
  EXPECT_EQ(t.events[1].ts_ns, 1001250);
  EXPECT_EQ(t.events[1].dur_ns, 500);
  EXPECT_EQ(t.events[1].pid, 1);
  EXPECT_EQ(t.rank, 1);
  EXPECT_EQ(t.rank_source, RankSource::kDistributedInfo);
  EXPECT_EQ(t.world_size, 2);
  ASSERT_EQ(t.devices.size(), 1u);
  EXPECT_EQ(t.devices[0].id, 1);
  EXPECT_EQ(t.devices[0].num_sms, 80);
  EXPECT_EQ(t.base_time_ns, 5);
  EXPECT_TRUE(t.warnings.empty());
}

TEST(ReadTrace, MalformedEventsAreCounted) {
  RankTrace t = MustRead(Fixture("reader_malformed.json"));
  EXPECT_EQ(t.stats.events_total, 16u);
  EXPECT_EQ(t.stats.complete, 4u);
  EXPECT_EQ(t.stats.malformed, 13u);
  EXPECT_EQ(t.stats.negative_dur, 1u);
  std::vector<std::string> names;
  for (const Event& e : t.events) names.push_back(t.NameOf(e));
  EXPECT_EQ(names, (std::vector<std::string>{"first", "negative", "exponent", "last"}));
  EXPECT_EQ(t.events[1].dur_ns, 0);
  EXPECT_EQ(t.events[2].ts_ns, 1000000);
  EXPECT_EQ(t.events[2].dur_ns, 25000);
  const std::string path = Fixture("reader_malformed.json");
  EXPECT_EQ(t.warnings,
            (std::vector<std::string>{path + ": 12 malformed events skipped",
                                      path + ": 1 events with negative dur kept with dur 0"}));
}

// Issue 12 finding 3: ts or dur near 2^63 ns (µs × 1000) overflowed ts + dur in the analysis
// (idle -195%, compute 295%), and a kernel with dur 2^53 µs vanished uncounted. Times out of
// the sane range are malformed: counted, warned about, skipped.
TEST(ReadTrace, OutOfRangeTimesAreMalformed) {
  struct Case {
    const char* name;
    const char* ts;
    const char* dur;
    bool kept;
  };
  const Case cases[] = {
      {"plain", "0", "10", true},
      {"epoch_us", "1795291885180641.788", "12.5", true},
      {"ts_last_sane", "4611686018427387.903", "1", true},      // 2^62 ns - 1
      {"ts_first_insane", "4611686018427387.904", "1", false},  // 2^62 ns
      {"ts_issue", "9223372036854775", "1", false},
      {"ts_overflow", "9223372036854776", "1", false},
      {"ts_exponent", "9.3e15", "1", false},
      {"ts_most_negative", "-2305843009213693.952", "1", true},  // -2^61 ns
      {"ts_too_negative", "-2305843009213693.953", "1", false},
      {"ts_negative_issue", "-9223372036854775", "1", false},
      {"dur_max", "5", "140737488355.328", true},  // 2^47 ns
      {"dur_over_max", "5", "140737488355.329", false},
      {"dur_issue", "5", "9223372036854775", false},
      {"dur_2_53", "5", "9007199254740992", false},
  };
  std::string json = R"({"traceEvents": [)";
  for (const Case& c : cases) {
    json += fmt::format(R"({{"ph":"X","cat":"kernel","name":"{}","pid":0,"tid":7,"ts":{},"dur":{},)"
                        R"("args":{{"device":0,"stream":7}}}},)",
                        c.name, c.ts, c.dur);
  }
  json.back() = ']';
  json += "}";
  TempDir dir;
  const std::string path = dir.Write("times.json", json);
  RankTrace t = MustRead(path);
  std::vector<std::string> kept, want;
  size_t skipped = 0;
  for (const Event& e : t.events) {
    kept.push_back(t.NameOf(e));
    EXPECT_GE(e.dur_ns, 0) << t.NameOf(e);
  }
  for (const Case& c : cases) {
    if (c.kept) want.push_back(c.name);
    skipped += c.kept ? 0 : 1;
  }
  EXPECT_EQ(kept, want);
  EXPECT_EQ(t.stats.malformed, skipped);
  EXPECT_EQ(
      t.warnings,
      (std::vector<std::string>{fmt::format("{}: {} malformed events skipped", path, skipped)}));
}

// Issue 12, finding 10: a second traceEvents key or data after the top-level value were
// silently ignored. Still ignored (the first array is the trace), now with a warning.
TEST(ReadTrace, ASecondEventsArrayAndTrailingDataAreWarnedAbout) {
  const std::string event = R"({"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":2,)"
                            R"("args":{"device":0,"stream":7}})";
  TempDir dir;
  const std::string twice =
      dir.Write("twice.json", "{\"traceEvents\": [" + event + "], \"traceEvents\": [" + event +
                                  "," + event + "]}\n");
  RankTrace t = MustRead(twice);
  EXPECT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.warnings, (std::vector<std::string>{
                            twice + ": a second traceEvents array is ignored (only the first is "
                                    "read)"}));
  const std::string trailing =
      dir.Write("trailing.json", "{\"traceEvents\": [" + event + "]}\n{\"more\": 1}\n");
  t = MustRead(trailing);
  EXPECT_EQ(t.events.size(), 1u);
  EXPECT_EQ(
      t.warnings,
      (std::vector<std::string>{trailing + ": data after the end of the JSON value is ignored"}));
  const std::string clean = dir.Write("clean.json", "{\"traceEvents\": [" + event + "]}\n\n ");
  EXPECT_TRUE(MustRead(clean).warnings.empty());
}

TEST(ReadTrace, NotATraceOrUnreadable) {
  TempDir dir;
  struct Case {
    std::string name;
    std::string bytes;
    ErrorCode code;
    std::string message_tail;
  };
  const std::vector<Case> cases = {
      {"png.json", std::string("\x89PNG\r\n\x1a\n\0\0", 10), ErrorCode::kParse,
       "not a Chrome/Kineto trace (starts with byte 0x89)"},
      {"obj.json", R"({"a":1})", ErrorCode::kParse,
       "not a Chrome/Kineto trace (no traceEvents array)"},
      {"empty.json", "  \n", ErrorCode::kParse, "not a Chrome/Kineto trace (empty file)"},
      {"text.json", "hello", ErrorCode::kParse, "not a Chrome/Kineto trace (starts with 'h')"},
      {"numbers.json", "[1, 2, 3]", ErrorCode::kParse,
       "not a Chrome/Kineto trace (no array element is a trace event)"},
      {"events_object.json", R"({"traceEvents": {"ph": "X"}})", ErrorCode::kParse,
       "not a Chrome/Kineto trace (no traceEvents array)"},
  };
  for (const Case& c : cases) {
    std::string path = dir.Write(c.name, c.bytes);
    Result<RankTrace> r = ReadTrace(path);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.error().code, c.code) << c.name;
    EXPECT_EQ(r.error().message, path + ": " + c.message_tail);
  }
  Result<RankTrace> fixture = ReadTrace(Fixture("reader_not_trace.json"));
  ASSERT_FALSE(fixture.ok());
  EXPECT_EQ(fixture.error().code, ErrorCode::kParse);

  Result<RankTrace> missing = ReadTrace(dir.path() + "/missing.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("missing.json"), std::string::npos);
  Result<RankTrace> directory = ReadTrace(dir.path());
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().code, ErrorCode::kIo);
  if (::geteuid() != 0) {
    std::string locked = dir.Write("locked.json", "[]");
    fs::permissions(locked, fs::perms::none);
    Result<RankTrace> denied = ReadTrace(locked);
    ASSERT_FALSE(denied.ok());
    EXPECT_EQ(denied.error().code, ErrorCode::kPermission);
  }
  // Empty but well-formed traces are traces.
  for (const char* empty : {"[]", R"({"traceEvents": []})", R"({"traceEvents":[ ]})"}) {
    RankTrace t = MustRead(dir.Write("ok.json", empty));
    EXPECT_TRUE(t.events.empty());
    EXPECT_EQ(t.stats.events_total, 0u);
    EXPECT_EQ(t.stats.malformed, 0u) << empty;
  }
}

// ---------------------------------------------------------------------------------------------
// Truncation, gzip, chunking

/// Where the events array of `json` opens and closes (first '[' after "traceEvents", last ']').
std::pair<size_t, size_t> ArrayBounds(const std::string& json) {
  size_t key = json.find("traceEvents");
  size_t open = json.find('[', key == std::string::npos ? 0 : key);
  size_t close = json.rfind(']');
  return {open, close};
}

TEST(ReadTrace, CutAtEveryByteOffset) {
  TempDir dir;
  for (const char* name : {"reader_kineto.json", "reader_kineto_min.json", "reader_legacy.json"}) {
    const std::string json = Slurp(Fixture(name));
    const uint64_t full = MustRead(Fixture(name)).stats.complete;
    auto [open, close] = ArrayBounds(json);
    uint64_t previous = 0;
    for (size_t cut = 0; cut <= json.size(); ++cut) {
      std::string path = dir.Write("cut.json", json.substr(0, cut));
      ReadOptions options;
      options.chunk_bytes = 64 + cut % 200;
      Result<RankTrace> r = ReadTrace(path, options);
      if (cut <= open) {
        ASSERT_FALSE(r.ok()) << name << " cut " << cut;
        EXPECT_EQ(r.error().code, ErrorCode::kParse);
        continue;
      }
      ASSERT_TRUE(r.ok()) << name << " cut " << cut << ": " << r.error().message;
      EXPECT_GE(r->stats.complete, previous) << name << " cut " << cut;
      previous = r->stats.complete;
      EXPECT_EQ(r->stats.truncated, cut <= close) << name << " cut " << cut;
      EXPECT_EQ(r->stats.malformed, 0u) << name << " cut " << cut;
      if (cut <= close) {
        ASSERT_FALSE(r->warnings.empty());
        EXPECT_EQ(r->warnings.front(),
                  fmt::format("{}: truncated after {} events (file ends inside traceEvents)", path,
                              r->stats.events_total));
      }
    }
    EXPECT_EQ(previous, full) << name;
  }
}

TEST(ReadTrace, GzipEqualsPlainAndSurvivesEveryCut) {
  TempDir dir;
  const std::string json = Slurp(Fixture("reader_kineto.json"));
  const std::vector<std::string> plain = DescribeAll(MustRead(Fixture("reader_kineto.json")));
  const std::string gz = Gzip(json);
  for (bool threaded : {false, true}) {
    ReadOptions options;
    options.threaded_inflate = threaded;
    options.chunk_bytes = 100;
    // The name says nothing: gzip is detected by its magic bytes.
    EXPECT_EQ(DescribeAll(MustRead(dir.Write("trace.json", gz), options)), plain);
    // Concatenated members (gzip -c a >> f; gzip -c b >> f).
    std::string two = Gzip(json.substr(0, 1000)) + Gzip(json.substr(1000));
    EXPECT_EQ(DescribeAll(MustRead(dir.Write("two.json.gz", two), options)), plain);
  }
  uint64_t previous = 0;
  for (size_t cut = 0; cut < gz.size(); ++cut) {
    ReadOptions options;
    options.threaded_inflate = cut % 2 == 0;
    options.chunk_bytes = 64 + cut % 300;
    Result<RankTrace> r = ReadTrace(dir.Write("cut.json.gz", gz.substr(0, cut)), options);
    if (!r.ok()) {
      EXPECT_EQ(r.error().code, ErrorCode::kParse) << cut;
      EXPECT_EQ(previous, 0u) << cut;
      // Issue 12, finding 10: a gzip file cut before its first event said "empty file".
      if (cut >= 2) {
        EXPECT_NE(r.error().message.find("gzip stream truncated after "), std::string::npos)
            << cut << ": " << r.error().message;
      }
      continue;
    }
    EXPECT_GE(r->stats.complete, previous) << cut;
    previous = r->stats.complete;
    // Cuts in the last deflate block or the trailer may still yield the whole array.
    if (!r->stats.truncated) {
      EXPECT_EQ(r->stats.complete, plain.size()) << cut;
    }
    bool warned = false;
    for (const std::string& w : r->warnings) warned |= w.find("gzip stream truncated") != w.npos;
    EXPECT_TRUE(warned) << cut;
  }
  EXPECT_EQ(previous, plain.size());
  // Garbage in the middle of the deflate data: keep what came before, warn.
  std::string corrupt = gz;
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 40; ++i) corrupt[i] = '\x55';
  Result<RankTrace> r = ReadTrace(dir.Write("corrupt.json.gz", corrupt));
  ASSERT_TRUE(r.ok()) << r.error().message;
  bool warned = false;
  for (const std::string& w : r->warnings) {
    warned |= w.find("gzip stream corrupt") != w.npos;
  }
  EXPECT_TRUE(warned);
  EXPECT_LT(r->stats.complete, plain.size());
}

TEST(ReadTrace, TinyChunksGiveTheSameEvents) {
  for (const char* name :
       {"reader_kineto.json", "reader_kineto_min.json", "reader_2021.json", "reader_legacy.json",
        "reader_meta_after.json", "reader_malformed.json"}) {
    RankTrace big = MustRead(Fixture(name));
    for (size_t chunk = 64; chunk <= 300; chunk += 7) {
      ReadOptions options;
      options.chunk_bytes = chunk;
      RankTrace small = MustRead(Fixture(name), options);
      EXPECT_EQ(DescribeAll(small), DescribeAll(big)) << name << " chunk " << chunk;
      EXPECT_EQ(small.stats.malformed, big.stats.malformed) << name << " chunk " << chunk;
      EXPECT_EQ(small.stats.events_total, big.stats.events_total) << name << " chunk " << chunk;
      EXPECT_EQ(small.rank, big.rank);
      EXPECT_EQ(small.devices.size(), big.devices.size());
    }
  }
}

// Issue 12, finding 10: `trace /dev/stdin` failed with "Illegal seek". A pipe, plain or gzip,
// reads as the same file would.
TEST(ReadTrace, FromAPipe) {
  const std::string text = Slurp(Fixture("reader_kineto.json"));
  const auto want = DescribeAll(MustRead(Fixture("reader_kineto.json")));
  for (const std::string& bytes : {text, Gzip(text)}) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    std::thread writer([&] {
      for (size_t done = 0; done < bytes.size();) {
        ssize_t n = write(fds[1], bytes.data() + done, bytes.size() - done);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      close(fds[1]);
    });
    Result<RankTrace> t = ReadTrace("/proc/self/fd/" + std::to_string(fds[0]));
    writer.join();
    close(fds[0]);
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(DescribeAll(*t), want);
  }
}

TEST(ByteSource, MemoryPlainAndGzip) {
  const std::string text(300000, 'a');
  for (bool threaded : {false, true}) {
    ByteSourceOptions options;
    options.threaded_inflate = threaded;
    options.block_bytes = 4096;
    for (const std::string& bytes : {text, Gzip(text)}) {
      auto src = MemoryByteSource(bytes, options);
      std::string out;
      char buf[1000];
      while (true) {
        Result<size_t> n = src->Read(buf, sizeof(buf));
        ASSERT_TRUE(n.ok());
        if (*n == 0) break;
        out.append(buf, *n);
      }
      EXPECT_EQ(out, text);
      EXPECT_TRUE(src->warning().empty());
    }
  }
}

// A name or args string longer than kMaxStringBytes keeps its first kMaxStringBytes bytes (cut
// at a UTF-8 boundary) and the marker, once, with a warning (issue: a 64 MB name cost 290 MB).
TEST(ReadTrace, LongStringsAreTruncatedWithAWarning) {
  TempDir dir;
  const std::string limit(kMaxStringBytes, 'a');
  const std::string cut = std::string(kMaxStringBytes - 1, 'b') + "\u00e9";  // é straddles it
  const std::string escaped = "\\n" + std::string(kMaxStringBytes, 'c');     // unescaped copy
  auto x = [](const std::string& name, const std::string& args) {
    return R"({"ph":"X","cat":"kernel","pid":0,"tid":7,"ts":1,"dur":1,"name":")" + name +
           R"(","args":{"stream":7,"correlation":1)" + args + "}}";
  };
  const std::string json = R"({"traceEvents":[)" + x(limit, "") + "," + x(limit + "a", "") + "," +
                           x(cut, "") + "," + x(escaped, "") + "," +
                           x("nccl", R"(,"Collective name":")" + limit + R"(z")") + "]}";
  RankTrace t = MustRead(dir.Write("long.json", json));
  ASSERT_EQ(t.events.size(), 5u);
  EXPECT_EQ(t.NameOf(t.events[0]), limit);  // at the limit: kept whole
  EXPECT_EQ(t.NameOf(t.events[1]), limit + std::string(kTruncatedMarker));
  EXPECT_EQ(t.NameOf(t.events[2]),
            std::string(kMaxStringBytes - 1, 'b') + std::string(kTruncatedMarker));
  const std::string& e = t.NameOf(t.events[3]);
  EXPECT_EQ(e.size(), kMaxStringBytes + kTruncatedMarker.size());
  EXPECT_EQ(e.substr(0, 2), "\nc");
  ASSERT_EQ(t.collectives.size(), 1u);
  EXPECT_EQ(t.collectives[0].collective, limit + std::string(kTruncatedMarker));
  EXPECT_EQ(t.stats.long_strings, 4u);
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_NE(t.warnings[0].find("4 names or args strings longer than 64 KiB truncated"),
            std::string::npos)
      << t.warnings[0];
}

TEST(StringTable, CopiesAndMovesKeepLookupsValid) {
  StringTable a;
  const std::string long_name(100, 'x');  // heap-allocated, unlike "k" (SSO)
  EXPECT_EQ(a.Intern("k"), 1u);
  EXPECT_EQ(a.Intern(long_name), 2u);
  StringTable b = a;  // the copy's index must view its own strings
  a = StringTable();
  EXPECT_EQ(b.Intern("k"), 1u);
  EXPECT_EQ(b.Intern(long_name), 2u);
  StringTable c = std::move(b);
  EXPECT_EQ(c.Intern("k"), 1u);
  EXPECT_EQ(c.Intern("new"), 3u);
  EXPECT_EQ(c.Get(2), long_name);
  EXPECT_EQ(a.size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Rank, paths, several files

TEST(ReadTrace, RankFromFileNameThenOptionThenDefault) {
  TempDir dir;
  const std::string legacy = Slurp(Fixture("reader_legacy.json"));
  struct Case {
    std::string name;
    std::optional<int32_t> option;
    int32_t rank;
    RankSource source;
  };
  const std::vector<Case> cases = {
      {"rank-3.json", std::nullopt, 3, RankSource::kFileName},
      {"job_rank_12.json.gz", 7, 12, RankSource::kFileName},
      {"Rank5.pt.trace.json", std::nullopt, 5, RankSource::kFileName},
      {"worker_4.json", std::nullopt, 4, RankSource::kFileName},
      {"host_1234.1699.pt.trace.json", 9, 9, RankSource::kOption},
      {"trace.json", std::nullopt, 0, RankSource::kDefault},
  };
  for (const Case& c : cases) {
    ReadOptions options;
    options.rank = c.option;
    RankTrace t = MustRead(dir.Write(c.name, legacy), options);
    EXPECT_EQ(t.rank, c.rank) << c.name;
    EXPECT_EQ(t.rank_source, c.source) << c.name;
  }
  // distributedInfo wins over the file name.
  RankTrace t = MustRead(dir.Write("rank-7.json", Slurp(Fixture("reader_kineto.json"))));
  EXPECT_EQ(t.rank, 2);
}

// ---------------------------------------------------------------------------------------------
// Real traces (HTA test data; skipped when absent)

/// One HTA trace's counts, from `zcat F | grep -o '"cat": "kernel"' | wc -l` etc., and
/// '"ph": "s"' ...
struct HtaCountCase {
  std::string file;
  int32_t rank;
  std::map<EventKind, uint64_t> kinds;
  uint64_t flows;
  uint64_t metadata;
};

std::vector<HtaCountCase> HtaCountCases() {
  using K = EventKind;
  return {
      {"trace_diff/control/control.json.gz",
       3,
       {{K::kKernel, 8568},
        {K::kMemcpy, 228},
        {K::kMemset, 654},
        {K::kRuntime, 24692},
        {K::kCpuOp, 40506},
        {K::kUserAnnotation, 288},
        {K::kOther, 1}},
       24692 + 9450,
       42},
      {"trace_diff/test/test.json.gz",
       1,
       {{K::kKernel, 9876},
        {K::kMemcpy, 4856},
        {K::kMemset, 900},
        {K::kRuntime, 21167},
        {K::kCpuOp, 31236},
        {K::kUserAnnotation, 288},
        {K::kOther, 1}},
       26815 + 9984,
       42},
      {"negative_queue_length_values_check/rank0.json.gz",
       0,
       {{K::kKernel, 6080},
        {K::kMemcpy, 1390},
        {K::kMemset, 277},
        {K::kRuntime, 33924},
        {K::kCpuOp, 25185},
        {K::kUserAnnotation, 360},
        {K::kOther, 1}},
       35071 + 6600,
       46},
      {"nccl_parser_config/nccl_data.json.gz",
       0,
       {{K::kKernel, 2700},
        {K::kMemcpy, 960},
        {K::kMemset, 114},
        {K::kRuntime, 8740},
        {K::kCpuOp, 14346},
        {K::kUserAnnotation, 42},
        {K::kGpuUserAnnotation, 30},
        {K::kOther, 1}},
       9195 + 4405,
       38},
      {"trace_filter/sampled_rank-0.json.gz",
       0,
       {{K::kKernel, 1154},
        {K::kMemcpy, 40},
        {K::kMemset, 10},
        {K::kRuntime, 1204},
        {K::kCpuOp, 2329},
        {K::kUserAnnotation, 73},
        {K::kOther, 1}},
       0,
       44},
      {"trace_filter/sampled_rank-1.json.gz",
       1,
       {{K::kKernel, 1104},
        {K::kMemcpy, 40},
        {K::kMemset, 10},
        {K::kRuntime, 1154},
        {K::kCpuOp, 2302},
        {K::kUserAnnotation, 65},
        {K::kOther, 1}},
       0,
       44},
  };
}

TEST(ReadTraceScale, HtaTracesMatchIndependentCounts) {
  const std::string root = testing::HtaTracesDir().string();
  if (!fs::exists(root)) GTEST_SKIP() << root << " not present";
  for (const HtaCountCase& c : HtaCountCases()) {
    RankTrace t = MustRead(root + "/" + c.file);
    std::map<EventKind, uint64_t> kinds;
    for (const Event& e : t.events) ++kinds[e.kind];
    EXPECT_EQ(kinds, c.kinds) << c.file;
    EXPECT_EQ(t.stats.flows, c.flows) << c.file;
    EXPECT_EQ(t.stats.metadata, c.metadata) << c.file;
    EXPECT_EQ(t.stats.instant, c.file.find("sampled") == std::string::npos ? 2u : 0u) << c.file;
    EXPECT_EQ(t.stats.malformed, 0u) << c.file;
    EXPECT_FALSE(t.stats.truncated) << c.file;
    EXPECT_TRUE(t.warnings.empty()) << c.file;
    EXPECT_EQ(t.rank, c.rank) << c.file;
    EXPECT_EQ(t.rank_source, RankSource::kDistributedInfo) << c.file;
    EXPECT_EQ(t.dialect, Dialect::kKineto) << c.file;
  }
  RankTrace control = MustRead(root + "/trace_diff/control/control.json.gz");
  EXPECT_EQ(control.stats.events_total, 109123u);
  EXPECT_EQ(control.world_size, 8);
  EXPECT_EQ(control.backend, "nccl");
  ASSERT_EQ(control.devices.size(), 8u);
  EXPECT_EQ(control.devices[3].name, "NVIDIA A100-PG509-200");
  for (const Event& e : control.events) {
    if (IsGpuKind(e.kind)) {
      EXPECT_EQ(e.pid, 3);
    }
  }
  RankTrace nccl = MustRead(root + "/nccl_parser_config/nccl_data.json.gz");
  EXPECT_EQ(nccl.base_time_ns, 1711964646000000000);
  const Event* first = FindEvent(nccl, "autograd::engine::evaluate_function: DivBackward1");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->ts_ns, 4458676522690655);
  EXPECT_EQ(first->dur_ns, 156777);
  EXPECT_FALSE(nccl.collectives.empty());
  for (const CollectiveInfo& c : nccl.collectives) {
    EXPECT_FALSE(c.collective.empty());
    EXPECT_TRUE(c.group_size == 1 || c.group_size == 2);  // 6× 1, 42× 2 in the file
  }
}

}  // namespace
}  // namespace stallscope::trace
