#include "trace/trace_reader.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>

#include <simdjson.h>

#include "base/units.h"
#include "trace/blank_squeeze.h"
#include "trace/byte_source.h"
#include "trace/huge_pages.h"
#include "trace/json_scan.h"
#include "trace/json_values.h"
#include "trace/trace_metadata.h"

namespace stallscope::trace {
namespace {

namespace od = simdjson::ondemand;
using json_values::GetString;
using json_values::GetStringFast;
using json_values::KeyText;
using json_values::ParseJsonInt;
using json_values::ReadOptInt;

// One parse batch (a run of complete elements parsed as one `[e1,e2,...]` document) is at most
// this long, so the simdjson parser's buffers stay small whatever chunk_bytes is.
constexpr size_t kMaxBatchBytes = size_t{512} << 10;
// Slack after the data in the chunk buffer: simdjson reads up to SIMDJSON_PADDING past a
// document's end, and the scanner may write a closing ']' at the data's end.
constexpr size_t kSlack = simdjson::SIMDJSON_PADDING + 64;

bool EqualsIgnoreCase(std::string_view a, std::string_view lower) {
  if (a.size() != lower.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != lower[i]) return false;
  }
  return true;
}

/// Kineto `cat` → kind (case-insensitive; 2021 capitalised names and "Operator" included).
/// README "Trace": the category table.
EventKind KindFromCat(std::string_view cat) {
  struct Entry {
    std::string_view cat;
    EventKind kind;
  };
  static constexpr Entry kTable[] = {
      {"kernel", EventKind::kKernel},
      {"cuda_runtime", EventKind::kRuntime},
      {"cpu_op", EventKind::kCpuOp},
      {"gpu_memcpy", EventKind::kMemcpy},
      {"gpu_memset", EventKind::kMemset},
      {"cuda_driver", EventKind::kDriver},
      {"user_annotation", EventKind::kUserAnnotation},
      {"gpu_user_annotation", EventKind::kGpuUserAnnotation},
      {"python_function", EventKind::kPythonFunction},
      {"cuda_sync", EventKind::kCudaSync},
      {"memcpy", EventKind::kMemcpy},
      {"memset", EventKind::kMemset},
      {"runtime", EventKind::kRuntime},
      {"driver", EventKind::kDriver},
      {"operator", EventKind::kCpuOp},
      {"python", EventKind::kPythonFunction},
  };
  for (const Entry& e : kTable) {
    if (cat == e.cat) return e.kind;  // Kineto's own spelling: the common case
  }
  for (const Entry& e : kTable) {
    if (EqualsIgnoreCase(cat, e.cat)) return e.kind;
  }
  return EventKind::kOther;
}

/// Category-less (legacy autograd profiler) events: cpu ops, except the step/dataloader ranges.
EventKind KindWithoutCat(std::string_view name) {
  if (name.starts_with("ProfilerStep#") || name.starts_with("enumerate(DataLoader)")) {
    return EventKind::kUserAnnotation;
  }
  return EventKind::kCpuOp;
}

/// Stable (FNV-1a) id for string tids such as "CPU functions"; non-negative.
int64_t HashTid(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return static_cast<int64_t>(h & static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

/// `s` itself, or (longer than kMaxStringBytes) its first kMaxStringBytes bytes, cut back to a
/// UTF-8 character boundary, followed by kTruncatedMarker, built in `scratch`.
std::string_view CapString(std::string_view s, std::string* scratch, uint64_t* long_strings) {
  if (s.size() <= kMaxStringBytes) return s;
  ++*long_strings;
  size_t cut = kMaxStringBytes;
  // Back off continuation bytes (10xxxxxx) so no character is split.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  scratch->assign(s.substr(0, cut));
  scratch->append(kTruncatedMarker);
  return *scratch;
}

/// A JSON scalar that may be a number or a string (pid, tid).
struct IdValue {
  enum Type : uint8_t { kAbsent, kNumber, kString, kBad } type = kAbsent;
  int64_t number = 0;
  std::string_view text;
};

/// What one element holds, before it is validated and committed. Views point into the chunk
/// buffer or the parser's string buffer, valid until the next document.
struct RawEvent {
  char ph = 0;  // 0: absent, '?': not a one-letter string
  bool has_cat = false;
  bool has_ts = false;
  bool has_dur = false;
  bool has_collective = false;
  bool has_name = false;
  std::string_view name, cat, ts, dur;
  IdValue pid, tid;
  std::optional<int64_t> device, stream, correlation, bytes;
  std::string_view meta_name;  // args.name of "M" events
  std::string_view coll_name, dtype, pg_name, pg_desc;
  std::optional<int64_t> in_nelems, out_nelems, group_size;
};

/// Totals that a failed batch must roll back.
struct Tally {
  ReadStats stats;
  uint64_t with_cat = 0;     // complete events that had a cat
  uint64_t capitalised = 0;  // ... whose cat started upper-case (2021 dialect)
};

simdjson::error_code ReadId(od::value& v, IdValue* out) {
  od::json_type type;
  if (auto err = v.type().get(type)) return err;
  if (type == od::json_type::number) {
    auto n = ParseJsonInt(v.raw_json_token());
    out->type = n ? IdValue::kNumber : IdValue::kBad;
    out->number = n.value_or(0);
  } else if (type == od::json_type::string) {
    out->type = IdValue::kString;
    return v.get_string().get(out->text);
  } else {
    out->type = IdValue::kBad;
  }
  return simdjson::SUCCESS;
}

simdjson::error_code ReadArgs(od::value& args_value, RawEvent* ev) {
  od::object args;
  if (args_value.get_object().get(args)) return simdjson::SUCCESS;  // not an object: ignored
  for (auto field_result : args) {
    od::field field;
    if (auto err = std::move(field_result).get(field)) return err;
    std::string_view key = KeyText(field.key());
    od::value& v = field.value();
    simdjson::error_code err = simdjson::SUCCESS;
    // Kineto args keys (kernel: ~12 of them); dispatch on length first.
    switch (key.size()) {
      case 4:
        if (key == "name") err = GetString(v, &ev->meta_name);
        break;
      case 5:
        if (key == "bytes") {
          ev->bytes = ReadOptInt(v);
        } else if (key == "dtype") {
          err = GetString(v, &ev->dtype);
        }
        break;
      case 6:
        if (key == "device") {
          ev->device = ReadOptInt(v);
        } else if (key == "stream") {
          ev->stream = ReadOptInt(v);
        }
        break;
      case 10:
        if (key == "Group size") ev->group_size = ReadOptInt(v);
        break;
      case 11:
        if (key == "correlation") ev->correlation = ReadOptInt(v);
        break;
      case 13:
        if (key == "In msg nelems") ev->in_nelems = ReadOptInt(v);
        break;
      case 14:
        if (key == "Out msg nelems") ev->out_nelems = ReadOptInt(v);
        break;
      case 15:
        if (key == "Collective name") {
          ev->has_collective = true;
          err = GetString(v, &ev->coll_name);
        }
        break;
      case 18:
        if (key == "Process Group Name") err = GetString(v, &ev->pg_name);
        break;
      case 25:
        if (key == "Process Group Description") err = GetString(v, &ev->pg_desc);
        break;
      default:
        break;
    }
    if (err) return err;
  }
  return simdjson::SUCCESS;
}

/// Whether a complete event of this category needs its args (device/stream/correlation/bytes/
/// collective fields). cpu_op args ("Input Dims", ...) are most of a Kineto trace's bytes.
bool NeedsArgs(const RawEvent& ev) {
  if (ev.ph != 'X' || !ev.has_cat || !ev.has_name) return true;
  EventKind kind = KindFromCat(ev.cat);
  if (kind == EventKind::kCpuOp) return ev.name == "record_param_comms";
  return kind != EventKind::kUserAnnotation && kind != EventKind::kPythonFunction &&
         kind != EventKind::kOther;
}

/// Reads the fields of one trace-event object. Errors are simdjson's (malformed JSON);
/// missing or ill-typed fields are left for Commit to judge.
simdjson::error_code ReadObject(od::object& obj, RawEvent* ev) {
  for (auto field_result : obj) {
    od::field field;
    if (auto err = std::move(field_result).get(field)) return err;
    std::string_view key = KeyText(field.key());
    od::value& v = field.value();
    simdjson::error_code err = simdjson::SUCCESS;
    if (key.size() == 2) {
      if (key == "ph") {
        std::string_view t = Trim(v.raw_json_token());
        ev->ph = t.size() == 3 && t[0] == '"' && t[2] == '"' ? t[1] : '?';
      } else if (key == "ts") {
        ev->has_ts = true;
        ev->ts = v.raw_json_token();
      }
    } else if (key.size() == 3) {
      if (key == "dur") {
        ev->has_dur = true;
        ev->dur = v.raw_json_token();
      } else if (key == "cat") {
        ev->has_cat = true;
        err = GetStringFast(v, &ev->cat);
      } else if (key == "pid") {
        err = ReadId(v, &ev->pid);
      } else if (key == "tid") {
        err = ReadId(v, &ev->tid);
      }
    } else if (key.size() == 4) {
      if (key == "name") {
        ev->has_name = true;
        err = GetStringFast(v, &ev->name);
      } else if (key == "args" && NeedsArgs(*ev)) {
        err = ReadArgs(v, ev);
      }
    }
    if (err) return err;
  }
  return simdjson::SUCCESS;
}

/// 2021 dialect GPU rows: "stream 7" → 7.
std::optional<int64_t> StreamFromText(std::string_view s) {
  constexpr std::string_view kPrefix = "stream ";
  if (s.size() <= kPrefix.size() || !EqualsIgnoreCase(s.substr(0, kPrefix.size()), kPrefix)) {
    return std::nullopt;
  }
  return ParseJsonInt(s.substr(kPrefix.size()));
}

/// Reads one file: chunk loop, batches, per-event commit.
class TraceReader {
 public:
  /// `json_bytes`: the size of the JSON when known (0 = unknown), a hint for the parser's buffers.
  TraceReader(const ReadOptions& options, RankTrace* out, uint64_t json_bytes)
      : options_(options),
        out_(out),
        scanner_({"deviceProperties", "distributedInfo", "baseTimeNanoseconds"}) {
    // Sized once for a full batch, or the whole file when smaller (simdjson takes several bytes
    // per byte of capacity: a small file need not allocate megabytes); a single larger element
    // grows it (iterate allocates).
    size_t capacity = json_bytes == 0
                          ? kMaxBatchBytes
                          : static_cast<size_t>(std::min<uint64_t>(kMaxBatchBytes, json_bytes));
    if (parser_.allocate(capacity + 4096) != simdjson::SUCCESS) {
      // Out of memory here resurfaces as a parse failure on the first batch.
    }
  }

  Status ReadAll(ByteSource& src);
  const JsonScanner& scanner() const { return scanner_; }
  const Tally& tally() const { return tally_; }
  od::parser& parser() { return parser_; }

 private:
  void Reserve(size_t needed);
  void Compact();
  void Cut(uint64_t from, uint64_t to);
  void ProcessSpans();
  bool IsBlank(const ElementSpan& span) const;
  void ParseBatch(size_t first, size_t last);
  bool ParseBatchDocument(size_t first, size_t last);
  void ParseSingle(const ElementSpan& span);
  void Commit(const RawEvent& ev);
  void CommitComplete(const RawEvent& ev);
  void CommitMetadata(const RawEvent& ev);
  /// CapString: the view is valid until the next call.
  std::string_view Cap(std::string_view s) {
    return CapString(s, &scratch_, &tally_.stats.long_strings);
  }

  const ReadOptions& options_;
  RankTrace* out_;
  JsonScanner scanner_;
  od::parser parser_;
  std::vector<ElementSpan> spans_;
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> buf_;
  size_t cap_ = 0;
  size_t len_ = 0;
  Tally tally_;
  std::string scratch_;  // a capped string, until the next Cap
  // The element being read is over max_element_bytes: its bytes are dropped as they come, and
  // the next span the scanner gives is it (spans come in order), counted, not parsed.
  bool skipping_ = false;
  BlankSqueeze squeeze_;
};

void TraceReader::Reserve(size_t needed) {
  if (needed <= cap_) return;
  size_t cap = std::max(needed, cap_ + cap_ / 2);
  // realloc: a buffer grown for one huge element (a 64 MB name) is remapped in place by glibc
  // (mremap) instead of being held twice while it is copied.
  void* bigger = std::realloc(buf_.get(), cap);
  if (bigger == nullptr) throw std::bad_alloc();  // as new[] did; caught at the thread entry
  static_cast<void>(buf_.release());
  buf_.reset(static_cast<char*>(bigger));
  cap_ = cap;
}

Status TraceReader::ReadAll(ByteSource& src) {
  const size_t chunk = std::max<size_t>(options_.chunk_bytes, 64);
  while (true) {
    Reserve(len_ + chunk + kSlack);
    size_t got = 0;
    bool eof = false;
    while (got < chunk) {
      TRY(size_t n, src.Read(buf_.get() + len_ + got, chunk - got));
      if (n == 0) {
        eof = true;
        break;
      }
      got += n;
    }
    len_ += got;
    tally_.stats.bytes += got;
    std::memset(buf_.get() + len_, ' ', kSlack);
    scanner_.Scan(buf_.get(), len_, eof, &spans_);
    ProcessSpans();
    spans_.clear();
    if (eof || scanner_.done()) break;
    size_t keep = scanner_.keep_from();
    if (keep > 0) squeeze_ = BlankSqueeze{};  // a new element (or gap) starts at buf[keep]
    std::memmove(buf_.get(), buf_.get() + keep, len_ - keep);
    len_ -= keep;
    scanner_.Shift(keep);
    if (len_ > chunk) Compact();
  }
  // Ended inside a skipped element: lost with the truncation, as any element cut by it.
  skipping_ = false;
  tally_.stats.buffer_bytes = cap_;
  return OkStatus();
}

// Issue 27 B02: a gzip bomb of whitespace between (or inside) elements grew the buffer to the
// inflated size (3 GB of RSS for a 3 MB file). Called once the kept bytes (buf[0] is the
// separator before the element being read) exceed a chunk, which no element of a real trace
// does: runs of whitespace outside strings are squeezed to one byte, each byte once; an element
// still longer than max_element_bytes is skipped.
void TraceReader::Compact() {
  if (!scanner_.in_events()) return;  // outside the array nothing is kept (keep_from = scanned)
  const uint64_t end = scanner_.scanned();
  if (!skipping_ && squeeze_.done < end) {
    const uint64_t w = squeeze_.Run(buf_.get(), end);
    if (w < end) Cut(w, end);
  }
  if (skipping_ || len_ > options_.max_element_bytes) {
    skipping_ = true;
    Cut(1, scanner_.scanned());
    squeeze_ = BlankSqueeze{};
  }
}

void TraceReader::Cut(uint64_t from, uint64_t to) {
  std::memmove(buf_.get() + from, buf_.get() + to, len_ - to);
  len_ -= to - from;
  scanner_.Cut(from, to);
}

bool TraceReader::IsBlank(const ElementSpan& span) const {
  for (uint64_t i = span.open + 1; i < span.close; ++i) {
    if (!IsBlankByte(buf_.get()[i])) return false;
  }
  return true;
}

void TraceReader::ProcessSpans() {
  size_t i = 0;
  auto oversized = [this] {
    ++tally_.stats.events_total;
    ++tally_.stats.malformed;
    ++tally_.stats.oversized;
  };
  if (skipping_ && !spans_.empty()) {  // the skipped element: its bytes are gone
    skipping_ = false;
    oversized();
    i = 1;
  }
  while (i < spans_.size()) {
    const ElementSpan& s = spans_[i];
    if (s.close - s.open > options_.max_element_bytes) {  // whole in one chunk, but as long
      oversized();
      ++i;
      continue;
    }
    if (IsBlank(s)) {
      // `[ ]` is an empty array; any other blank element (`[1,,2]`, `[1,]`) is malformed.
      if (!(buf_.get()[s.open] == '[' && buf_.get()[s.close] == ']')) {
        ++tally_.stats.events_total;
        ++tally_.stats.malformed;
      }
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < spans_.size() && spans_[j].close - s.open < kMaxBatchBytes &&
           spans_[j].close - spans_[j].open <= options_.max_element_bytes && !IsBlank(spans_[j])) {
      ++j;
    }
    ParseBatch(i, j);
    i = j;
  }
}

void TraceReader::ParseBatch(size_t first, size_t last) {
  size_t events_mark = out_->events.size();
  size_t collectives_mark = out_->collectives.size();
  Tally saved = tally_;
  if (ParseBatchDocument(first, last)) return;
  // Some element is not valid JSON: undo the batch and find exactly which, one by one.
  out_->events.resize(events_mark);
  out_->collectives.resize(collectives_mark);
  tally_ = saved;
  for (size_t k = first; k < last; ++k) ParseSingle(spans_[k]);
}

bool TraceReader::ParseBatchDocument(size_t first, size_t last) {
  uint64_t open = spans_[first].open;
  uint64_t close = spans_[last - 1].close;
  char saved_open = buf_.get()[open];
  char saved_close = buf_.get()[close];
  buf_.get()[open] = '[';
  buf_.get()[close] = ']';
  size_t length = close - open + 1;
  bool ok = true;
  size_t count = 0;
  od::document doc;
  od::array array;
  if (parser_.iterate(buf_.get() + open, length, cap_ - open).get(doc) ||
      doc.get_array().get(array)) {
    ok = false;
  }
  if (ok) {
    for (auto element : array) {
      od::object obj;
      RawEvent ev;
      if (element.get_object().get(obj) || ReadObject(obj, &ev)) {
        ok = false;
        break;
      }
      Commit(ev);
      ++count;
    }
  }
  buf_.get()[open] = saved_open;
  buf_.get()[close] = saved_close;
  return ok && count == last - first;
}

void TraceReader::ParseSingle(const ElementSpan& span) {
  od::document doc;
  od::object obj;
  RawEvent ev;
  uint64_t begin = span.open + 1;
  if (parser_.iterate(buf_.get() + begin, span.close - begin, cap_ - begin).get(doc) ||
      doc.get_object().get(obj) || ReadObject(obj, &ev) ||
      doc.current_location().error() != simdjson::OUT_OF_BOUNDS) {
    ++tally_.stats.events_total;
    ++tally_.stats.malformed;
    return;
  }
  Commit(ev);
}

void TraceReader::Commit(const RawEvent& ev) {
  ReadStats& st = tally_.stats;
  ++st.events_total;
  // Trace Event Format: every event has ph; ts is required except on metadata ("M") events.
  if (ev.ph == 0 || ev.ph == '?' || (!ev.has_ts && ev.ph != 'M') || ev.pid.type == IdValue::kBad ||
      ev.tid.type == IdValue::kBad) {
    ++st.malformed;
    return;
  }
  switch (ev.ph) {
    case 'X':
      CommitComplete(ev);
      break;
    case 'M':
      CommitMetadata(ev);
      break;
    case 's':
    case 'f':
    case 't':
      ++st.flows;
      break;
    case 'i':
    case 'I':
      ++st.instant;
      break;
    case 'C':
      ++st.counters;
      break;
    default:
      ++st.other_phase;
      break;
  }
}

// The times an event may have (issue 12 finding 3: ts or dur near 2^63 ns overflowed ts + dur
// downstream: idle -195%, compute 295%, kernels gone). ts: Kineto writes µs since the Unix epoch
// (~1.8e18 ns in 2026) or since the trace start; [-2^61, 2^62) ns reaches the year 2116 and keeps
// every difference of two events' ends within int64. dur: at most 2^47 ns (~39 h), longer than
// any profiler session (seconds to minutes), so 65,536 summed durations still fit in int64.
constexpr int64_t kMinTsNs = -(int64_t{1} << 61);
constexpr int64_t kMaxTsNs = int64_t{1} << 62;
constexpr int64_t kMaxDurNs = int64_t{1} << 47;

void TraceReader::CommitComplete(const RawEvent& ev) {
  ReadStats& st = tally_.stats;
  std::optional<int64_t> ts = ParseMicrosToNs(ev.ts);
  std::optional<int64_t> dur = ev.has_dur ? ParseMicrosToNs(ev.dur) : std::optional<int64_t>(0);
  // Unparsable, overflowing int64 ns (ParseMicrosToNs) or out of the sane range: malformed.
  if (!ts || !dur || *ts < kMinTsNs || *ts >= kMaxTsNs || *dur > kMaxDurNs) {
    ++st.malformed;
    return;
  }
  Event e;
  e.ts_ns = *ts;
  e.set_dur_ns(*dur);
  if (e.dur_ns < 0) {
    ++st.negative_dur;
    ++st.malformed;
    e.set_dur_ns(0);
  }
  if (ev.has_cat) {
    e.kind = KindFromCat(ev.cat);
    ++tally_.with_cat;
    if (!ev.cat.empty() && std::isupper(static_cast<unsigned char>(ev.cat[0])) &&
        e.kind != EventKind::kOther) {
      ++tally_.capitalised;
    }
  } else {
    e.kind = KindWithoutCat(ev.name);
  }
  bool gpu = IsGpuKind(e.kind);
  int64_t pid = ev.pid.type == IdValue::kNumber ? ev.pid.number : 0;
  e.pid = static_cast<int32_t>(gpu && ev.device ? *ev.device : pid);
  if (gpu && ev.stream) {
    e.tid = *ev.stream;
  } else if (ev.tid.type == IdValue::kNumber) {
    e.tid = ev.tid.number;
  } else if (ev.tid.type == IdValue::kString) {
    e.tid = StreamFromText(ev.tid.text).value_or(HashTid(ev.tid.text));
  }
  e.correlation = ev.correlation.value_or(-1);
  e.bytes = static_cast<uint64_t>(std::max<int64_t>(ev.bytes.value_or(0), 0));
  e.name_id = out_->names.Intern(Cap(ev.name));
  out_->events.push_back(e);
  ++st.complete;
  if (ev.has_collective && (e.kind == EventKind::kKernel ||
                            (e.kind == EventKind::kCpuOp && ev.name == "record_param_comms"))) {
    CollectiveInfo c;
    c.correlation = e.correlation;
    c.collective = Cap(ev.coll_name);
    c.in_msg_nelems = ev.in_nelems;
    c.out_msg_nelems = ev.out_nelems;
    c.group_size = ev.group_size;
    c.dtype = Cap(ev.dtype);
    c.process_group = Cap(ev.pg_desc.empty() ? ev.pg_name : ev.pg_desc);
    out_->collectives.push_back(std::move(c));
  }
}

void TraceReader::CommitMetadata(const RawEvent& ev) {
  ++tally_.stats.metadata;
  if (ev.meta_name.empty()) return;
  if (ev.name == "process_name") {
    int64_t pid = ev.pid.type == IdValue::kNumber ? ev.pid.number : 0;
    out_->process_names[static_cast<int32_t>(pid)] = std::string(Cap(ev.meta_name));
  } else if (ev.name == "thread_name") {
    int64_t tid = ev.tid.type == IdValue::kNumber   ? ev.tid.number
                  : ev.tid.type == IdValue::kString ? HashTid(ev.tid.text)
                                                    : 0;
    out_->thread_names[tid] = std::string(Cap(ev.meta_name));
  }
}

}  // namespace

namespace {

/// Reserves the events vector from the file size so it never reallocates (a reallocation
/// briefly holds old + new, 3× the events). Untouched capacity is address space, not RSS.
void ReserveEvents(const ByteSource& src, RankTrace* out) {
  // ~160 bytes of JSON per complete event is a low estimate for Kineto output (HTA traces:
  // 320-470); gzip of trace JSON compresses ~15-20×.
  uint64_t json_bytes = src.file_bytes() * (src.compressed() ? 20 : 1);
  uint64_t events = json_bytes / 160;
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    uint64_t limit = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) / 4;
    events = std::min<uint64_t>(events, limit / sizeof(Event));
  }
  ReserveHuge(out->events, static_cast<size_t>(events));
}

std::string ByteText(unsigned char c) {
  if (c >= 0x20 && c < 0x7f) return fmt::format("'{}'", static_cast<char>(c));
  return fmt::format("byte 0x{:02x}", c);
}

/// "4 MiB", "64 KiB", "100 B".
std::string BinarySize(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0)
    return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

/// Checks that the file was a trace and writes the stats and warnings.
Status Finish(const TraceReader& reader, const ByteSource& src, size_t max_element_bytes,
              RankTrace* out) {
  const JsonScanner& scanner = reader.scanner();
  const Tally& tally = reader.tally();
  const std::string& path = out->path;
  // A gzip stream that breaks before the trace starts: say that, not "empty" or "no traceEvents".
  const bool before_events = scanner.layout() == JsonLayout::kUnknown || !scanner.events_found();
  if (!src.warning().empty() && before_events && scanner.layout() != JsonLayout::kNotJson) {
    return MakeError(ErrorCode::kParse, "{}: {} after {} bytes of JSON, before any trace event",
                     path, src.warning(), tally.stats.bytes);
  }
  if (scanner.layout() == JsonLayout::kUnknown) {
    return MakeError(ErrorCode::kParse, "{}: not a Chrome/Kineto trace (empty file)", path);
  }
  if (scanner.layout() == JsonLayout::kNotJson) {
    return MakeError(ErrorCode::kParse, "{}: not a Chrome/Kineto trace (starts with {})", path,
                     ByteText(scanner.first_byte()));
  }
  if (!scanner.events_found()) {
    return MakeError(ErrorCode::kParse, "{}: not a Chrome/Kineto trace (no traceEvents array)",
                     path);
  }
  const ReadStats& st = tally.stats;
  if (scanner.layout() == JsonLayout::kBareArray && st.events_total > 0 &&
      st.malformed == st.events_total) {
    return MakeError(ErrorCode::kParse,
                     "{}: not a Chrome/Kineto trace (no array element is a trace event)", path);
  }
  out->stats = st;
  if (tally.capitalised > 0) {
    out->dialect = Dialect::kKineto2021;
  } else if (tally.with_cat == 0 && st.complete > 0) {
    out->dialect = Dialect::kChromeNoCats;
  }
  if (!src.warning().empty()) {
    out->warnings.push_back(fmt::format("{}: {} after {} bytes; keeping the events before it", path,
                                        src.warning(), st.bytes));
  }
  if (scanner.in_events()) {
    out->stats.truncated = true;
    out->warnings.push_back(fmt::format(
        "{}: truncated after {} events (file ends inside traceEvents)", path, st.events_total));
  } else if (!scanner.done()) {
    out->warnings.push_back(
        fmt::format("{}: file ends after traceEvents, before the top-level object closes", path));
  }
  if (scanner.second_events_key()) {
    out->warnings.push_back(
        fmt::format("{}: a second traceEvents array is ignored (only the first is read)", path));
  }
  if (scanner.trailing_data()) {
    out->warnings.push_back(
        fmt::format("{}: data after the end of the JSON value is ignored", path));
  }
  if (uint64_t skipped = st.malformed - st.negative_dur - st.oversized; skipped > 0) {
    out->warnings.push_back(fmt::format("{}: {} malformed events skipped", path, skipped));
  }
  if (st.oversized > 0) {
    out->warnings.push_back(fmt::format("{}: {} trace events longer than {} skipped", path,
                                        st.oversized, BinarySize(max_element_bytes)));
  }
  for (const std::string& key : scanner.dropped_values()) {
    out->warnings.push_back(fmt::format("{}: top-level \"{}\" longer than {} ignored", path, key,
                                        BinarySize(JsonScanner::kMaxCaptureBytes)));
  }
  if (st.long_strings > 0) {
    out->warnings.push_back(
        fmt::format("{}: {} names or args strings longer than {} KiB truncated (ending \"{}\")",
                    path, st.long_strings, kMaxStringBytes >> 10, kTruncatedMarker));
  }
  if (st.negative_dur > 0) {
    out->warnings.push_back(
        fmt::format("{}: {} events with negative dur kept with dur 0", path, st.negative_dur));
  }
  return OkStatus();
}

}  // namespace

Result<RankTrace> ReadTrace(const std::string& path, const ReadOptions& options) {
  ByteSourceOptions source_options;
  source_options.threaded_inflate = options.threaded_inflate;
  source_options.block_bytes = std::clamp<size_t>(options.chunk_bytes, 4096, size_t{1} << 20);
  TRY(std::unique_ptr<ByteSource> src, OpenByteSource(path, source_options));
  RankTrace out;
  out.path = path;
  ReserveEvents(*src, &out);
  TraceReader reader(options, &out, src->file_bytes() * (src->compressed() ? 20 : 1));
  TRY_STATUS(reader.ReadAll(*src));
  TRY_STATUS(Finish(reader, *src, options.max_element_bytes, &out));
  ApplyTopLevelValues(reader.parser(), reader.scanner().values(), &out);
  if (out.rank_source != RankSource::kDistributedInfo) {
    if (auto r = RankFromFileName(path)) {
      out.rank = *r;
      out.rank_source = RankSource::kFileName;
    } else if (options.rank) {
      out.rank = *options.rank;
      out.rank_source = RankSource::kOption;
    }
  }
  MarkCudaGraphKernels(out);
  return out;
}

}  // namespace stallscope::trace
