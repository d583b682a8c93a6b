#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stallscope::trace {

/// Microseconds as JSON number text ("1661203462598738", "4458676522690.655", "1.5e3") →
/// integer nanoseconds, exactly: never through double (1.66e15 µs × 1000 does not survive a
/// double round trip). Trace Event Format: ts and dur are µs (Kineto too, whatever
/// displayTimeUnit says). Digits past the 3rd decimal round half up. Surrounding whitespace is
/// ignored; anything else that is not a JSON number, or overflows int64 ns, gives nullopt.
[[nodiscard]] std::optional<int64_t> ParseMicrosToNs(std::string_view text);

/// One element of the trace-event array, by the offsets (in the scanned buffer) of the
/// separators around it: buf[open] is '[' or ',', buf[close] is ',' or ']'. At the end of a
/// truncated file the last complete object ends at `close` == the data length (no separator
/// there; the buffer has padding, so the byte may be written).
struct ElementSpan {
  uint64_t open = 0;
  uint64_t close = 0;
};

/// A top-level key whose raw JSON value was captured while scanning.
struct TopLevelValue {
  std::string key;
  std::string raw;  ///< the value's JSON text, from its first byte (trailing whitespace kept)
};

/// What the top level of the document looks like so far.
enum class JsonLayout : uint8_t {
  kUnknown,    ///< nothing but whitespace yet
  kObject,     ///< `{ ..., "traceEvents": [ ... ], ... }` (Kineto, Chrome JSON object format)
  kBareArray,  ///< `[ e1, e2, ... ]` (Chrome JSON array format, legacy autograd profiler)
  kNotJson,    ///< starts with something other than '{' or '['
};

/// Which block classifier the array scan uses. kAvx2 is compiled into every x86-64 build and
/// chosen at run time (`__builtin_cpu_supports`), so the baseline x86-64 binary runs anywhere.
enum class ScanKernel : uint8_t {
  kAuto,      ///< the best one this CPU supports (probed once per process)
  kBaseline,  ///< SSE2 on x86-64 (every x86-64 CPU), portable C++ elsewhere
  kAvx2,      ///< AVX2 on x86-64; falls back to kBaseline where the CPU lacks it
};

/// The kernel `kernel` resolves to on this CPU (never kAuto).
[[nodiscard]] ScanKernel ResolveScanKernel(ScanKernel kernel);

/// String-aware structural scanner over a growing/sliding chunk buffer. It finds the top-level
/// layout, captures the raw values of selected top-level keys, and cuts the trace-event array
/// into complete elements across chunk boundaries, without parsing the elements.
///
/// Usage: append data to the buffer, call Scan, use the spans, then drop the first
/// `keep_from()` bytes of the buffer and call Shift(keep_from()). Scanning is incremental: each
/// byte is examined once. Inside the array, 64-byte blocks are classified with SSE2 (quotes,
/// backslashes, brackets, commas) and string interiors are masked with a prefix-XOR, so the cost
/// does not depend on how long strings are. Not thread-safe.
class JsonScanner {
 public:
  /// Longest top-level value captured (deviceProperties of 8 GPUs is ~4 KB): a longer one is
  /// dropped and its key listed in dropped_values(), so no input grows the capture without bound.
  static constexpr size_t kMaxCaptureBytes = size_t{1} << 20;
  /// Longest top-level key kept while reading it (longer keys match no key we look for).
  static constexpr size_t kMaxKeyBytes = 256;

  /// `capture_keys`: top-level keys whose values to capture (small metadata values).
  /// `kernel`: which block classifier to use (tests run both; both give identical results).
  explicit JsonScanner(std::vector<std::string> capture_keys,
                       ScanKernel kernel = ScanKernel::kAuto);

  /// Scans buf[0, len) from where the last call stopped; appends complete elements to `out`.
  /// Without `eof`, up to 63 bytes inside the array may be left for the next call.
  /// With `eof`, everything is scanned and an object left complete but unterminated at the end of
  /// a cut file is reported as a final span.
  void Scan(const char* buf, uint64_t len, bool eof, std::vector<ElementSpan>* out);

  /// Bytes before this offset are no longer needed.
  [[nodiscard]] uint64_t keep_from() const { return in_events_ ? last_sep_ : pos_; }
  /// The caller dropped the first `n` (≤ keep_from()) bytes of the buffer.
  void Shift(uint64_t n);
  /// Bytes of the buffer examined so far (buf[0, scanned())).
  [[nodiscard]] uint64_t scanned() const { return pos_; }
  /// The caller cut the scanned bytes buf[from, to) out of its buffer (keep_from() < from ≤ to ≤
  /// scanned()): blank padding between tokens, or the middle of an element it skips. The scan
  /// state carries over; the bytes after `to` move down by to - from.
  void Cut(uint64_t from, uint64_t to);

  [[nodiscard]] JsonLayout layout() const { return layout_; }
  /// The first non-whitespace byte, for the "not a trace" message.
  [[nodiscard]] unsigned char first_byte() const { return first_byte_; }
  /// True once the trace-event array has been entered.
  [[nodiscard]] bool events_found() const { return events_found_; }
  /// True while inside the array (after Scan with eof: the data ended inside it).
  [[nodiscard]] bool in_events() const { return in_events_; }
  /// True once the top-level value has been closed completely.
  [[nodiscard]] bool done() const { return done_; }
  /// A second "traceEvents" key in the top-level object (its array is not read).
  [[nodiscard]] bool second_events_key() const { return second_events_key_; }
  /// Something other than whitespace after the top-level value, in the bytes scanned with it.
  [[nodiscard]] bool trailing_data() const { return trailing_data_; }
  [[nodiscard]] const std::vector<TopLevelValue>& values() const { return values_; }
  /// Keys of captured values longer than kMaxCaptureBytes: dropped, not in values().
  [[nodiscard]] const std::vector<std::string>& dropped_values() const { return dropped_values_; }
  /// The kernel in use (kBaseline or kAvx2).
  [[nodiscard]] ScanKernel kernel() const { return kernel_; }

 private:
  friend struct ArrayScan;  // the array-scan kernels (json_scan.cc)

  uint64_t ScanTop(const char* buf, uint64_t len);
  void TopByteOutsideString(char c, uint64_t at);
  void EnterEvents(uint64_t at, int64_t depth);
  void Capture(char c);

  std::vector<std::string> capture_keys_;
  ScanKernel kernel_ = ScanKernel::kBaseline;
  std::vector<TopLevelValue> values_;
  std::vector<std::string> dropped_values_;
  JsonLayout layout_ = JsonLayout::kUnknown;
  unsigned char first_byte_ = 0;
  uint64_t pos_ = 0;       // next byte to scan
  uint64_t last_sep_ = 0;  // inside the array: the separator before the current element
  int64_t depth_ = 0;      // nesting depth at pos_ (top-level object/array = 1)
  int64_t events_depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  bool in_events_ = false;
  bool events_found_ = false;
  bool done_ = false;
  bool second_events_key_ = false;
  bool trailing_data_ = false;
  // Top-level object state.
  bool expect_key_ = false;
  bool reading_key_ = false;
  bool after_colon_ = false;  // between ':' and the first byte of the value
  bool capturing_ = false;
  bool events_key_ = false;
  std::string key_;
  std::string capture_;
  // Array state (block scanner carries).
  uint64_t prev_escaped_ = 0;
  uint64_t prev_in_string_ = 0;
  bool object_closed_ = false;  // the current element is an object that has been closed
};

}  // namespace stallscope::trace
