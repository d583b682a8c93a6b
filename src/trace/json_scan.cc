#include "trace/json_scan.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <utility>

#include "base/units.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace stallscope::trace {
namespace {

constexpr size_t kBlock = 64;

/// Per-byte classes of one 64-byte block, bit i = byte i.
struct BlockMasks {
  uint64_t quote = 0;
  uint64_t backslash = 0;
  uint64_t open = 0;   // '{' or '['
  uint64_t close = 0;  // '}' or ']'
  uint64_t comma = 0;
};

#if defined(__SSE2__)
/// 16-bit masks of one 16-byte lane, in the low bits of each field.
inline void ClassifyLane(__m128i v, int shift, BlockMasks* m) {
  // '{' 0x7b / '[' 0x5b and '}' 0x7d / ']' 0x5d differ only in bit 0x20.
  const __m128i folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
  auto bits = [shift](__m128i eq) {
    return static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(eq))) << shift;
  };
  m->quote |= bits(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')));
  m->backslash |= bits(_mm_cmpeq_epi8(v, _mm_set1_epi8('\\')));
  m->comma |= bits(_mm_cmpeq_epi8(v, _mm_set1_epi8(',')));
  m->open |= bits(_mm_cmpeq_epi8(folded, _mm_set1_epi8('{')));
  m->close |= bits(_mm_cmpeq_epi8(folded, _mm_set1_epi8('}')));
}

BlockMasks Classify(const char* p) {
  BlockMasks m;
  ClassifyLane(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), 0, &m);
  ClassifyLane(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)), 16, &m);
  ClassifyLane(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32)), 32, &m);
  ClassifyLane(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 48)), 48, &m);
  return m;
}
#endif

#if !defined(__SSE2__)
// Portable fallback for targets without SSE2 (x86-64 always has it).
BlockMasks Classify(const char* p) {
  BlockMasks m;
  for (size_t i = 0; i < kBlock; ++i) {
    uint64_t bit = uint64_t{1} << i;
    switch (p[i]) {
      case '"':
        m.quote |= bit;
        break;
      case '\\':
        m.backslash |= bit;
        break;
      case ',':
        m.comma |= bit;
        break;
      case '{':
      case '[':
        m.open |= bit;
        break;
      case '}':
      case ']':
        m.close |= bit;
        break;
      default:
        break;
    }
  }
  return m;
}
#endif

#if defined(__x86_64__)
#define STALLSCOPE_SCAN_AVX2 1
// The same classes as Classify, two 32-byte lanes: compiled for AVX2 whatever the build's
// -march, and only called after ResolveScanKernel saw the CPU support it. No lambdas here: a
// lambda would not inherit the target attribute.
__attribute__((target("avx2"))) inline uint64_t Avx2Bits(__m256i eq, int shift) {
  return static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(eq))) << shift;
}

__attribute__((target("avx2"))) inline BlockMasks ClassifyAvx2(const char* p) {
  BlockMasks m;
  for (int half = 0; half < 2; ++half) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * half));
    const __m256i folded = _mm256_or_si256(v, _mm256_set1_epi8(0x20));  // {[ and }] fold
    const int shift = 32 * half;
    m.quote |= Avx2Bits(_mm256_cmpeq_epi8(v, _mm256_set1_epi8('"')), shift);
    m.backslash |= Avx2Bits(_mm256_cmpeq_epi8(v, _mm256_set1_epi8('\\')), shift);
    m.comma |= Avx2Bits(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(',')), shift);
    m.open |= Avx2Bits(_mm256_cmpeq_epi8(folded, _mm256_set1_epi8('{')), shift);
    m.close |= Avx2Bits(_mm256_cmpeq_epi8(folded, _mm256_set1_epi8('}')), shift);
  }
  return m;
}
#endif

/// Bits of the characters escaped by a backslash (simdjson's odd-backslash-sequence trick:
/// a run of backslashes escapes the next character when the run has odd length).
/// `prev_escaped` carries whether the first byte of the next block is escaped.
uint64_t FindEscaped(uint64_t backslash, uint64_t* prev_escaped) {
  backslash &= ~*prev_escaped;
  uint64_t follows_escape = backslash << 1 | *prev_escaped;
  constexpr uint64_t kEvenBits = 0x5555555555555555ULL;
  uint64_t odd_sequence_starts = backslash & ~kEvenBits & ~follows_escape;
  uint64_t sequences_starting_on_even_bits = 0;
  *prev_escaped =
      __builtin_add_overflow(odd_sequence_starts, backslash, &sequences_starting_on_even_bits) ? 1
                                                                                               : 0;
  uint64_t invert_mask = sequences_starting_on_even_bits << 1;
  return (kEvenBits ^ invert_mask) & follows_escape;
}

/// Bit i = XOR of bits 0..i: 1 from an opening quote up to (not including) its closing quote.
uint64_t PrefixXor(uint64_t x) {
  x ^= x << 1;
  x ^= x << 2;
  x ^= x << 4;
  x ^= x << 8;
  x ^= x << 16;
  x ^= x << 32;
  return x;
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

__extension__ typedef __int128 Int128;  // NOLINT: GNU extension, used for exact scaling

// Exponent forms ("1.5e3"): exact decimal scaling in 128-bit integers. Rare, so not tuned.
std::optional<int64_t> ParseMicrosSlow(std::string_view s) {
  size_t i = 0;
  bool negative = s[0] == '-';
  if (negative) ++i;
  Int128 mantissa = 0;
  int exp10 = 3;  // µs → ns
  int digits = 0;
  bool seen_dot = false;
  for (; i < s.size() && s[i] != 'e' && s[i] != 'E'; ++i) {
    if (s[i] == '.' && !seen_dot) {
      seen_dot = true;
      continue;
    }
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    if (digits < 36) {
      mantissa = mantissa * 10 + (s[i] - '0');
      ++digits;
      if (seen_dot) --exp10;
    } else if (!seen_dot) {
      ++exp10;
    }
  }
  if (digits == 0 || i + 1 >= s.size()) return std::nullopt;
  auto e = ParseInt64(s[i + 1] == '+' ? s.substr(i + 2) : s.substr(i + 1));
  if (!e || *e > 40 || *e < -80) return std::nullopt;
  exp10 += static_cast<int>(*e);
  for (; exp10 > 0; --exp10) {
    mantissa *= 10;
    if (mantissa > std::numeric_limits<int64_t>::max()) return std::nullopt;
  }
  for (; exp10 < 0 && mantissa != 0; ++exp10) {
    mantissa = exp10 == -1 ? (mantissa + 5) / 10 : mantissa / 10;
  }
  if (mantissa > std::numeric_limits<int64_t>::max()) return std::nullopt;
  auto v = static_cast<int64_t>(mantissa);
  return negative ? -v : v;
}

}  // namespace

// Fast path: Kineto writes integer µs or µs with 3 decimals.
std::optional<int64_t> ParseMicrosToNs(std::string_view s) {
  s = Trim(s);
  if (s.empty()) return std::nullopt;
  size_t i = s[0] == '-' ? 1 : 0;
  bool negative = i == 1;
  constexpr uint64_t kMaxMicros = static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 1000;
  uint64_t micros = 0;
  size_t int_start = i;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    micros = micros * 10 + static_cast<uint64_t>(s[i] - '0');
    if (micros > kMaxMicros) return std::nullopt;
  }
  if (i == int_start) return std::nullopt;
  uint64_t frac_ns = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    size_t frac_start = i;
    uint64_t scale = 100;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
      auto d = static_cast<uint64_t>(s[i] - '0');
      if (i - frac_start < 3) {
        frac_ns += d * scale;
        scale /= 10;
      } else if (i - frac_start == 3 && d >= 5) {
        frac_ns += 1;  // round half up on the first sub-ns digit
      }
    }
    if (i == frac_start) return std::nullopt;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) return ParseMicrosSlow(s);
  if (i != s.size()) return std::nullopt;
  uint64_t ns = micros * 1000 + frac_ns;
  if (ns > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return negative ? -static_cast<int64_t>(ns) : static_cast<int64_t>(ns);
}

ScanKernel ResolveScanKernel(ScanKernel kernel) {
#if defined(STALLSCOPE_SCAN_AVX2)
  static const bool kHasAvx2 = __builtin_cpu_supports("avx2") != 0;  // probed once
  if (kernel == ScanKernel::kAuto) return kHasAvx2 ? ScanKernel::kAvx2 : ScanKernel::kBaseline;
  if (kernel == ScanKernel::kAvx2 && !kHasAvx2) return ScanKernel::kBaseline;
  return kernel;
#else
  static_cast<void>(kernel);
  return ScanKernel::kBaseline;
#endif
}

/// The array scan: one 64-byte block at a time, with the baseline or the AVX2 classifier.
struct ArrayScan {
  /// Advances over the elements in one classified block; returns the bytes consumed (64, or
  /// fewer when the array closes inside the block).
  __attribute__((always_inline)) static inline uint64_t Block(JsonScanner& s, const BlockMasks& m,
                                                              const char* block, uint64_t base,
                                                              std::vector<ElementSpan>* out);

  /// Scans whole blocks of buf[s.pos_, len) while inside the array.
  static void RunBaseline(JsonScanner& s, const char* buf, uint64_t len,
                          std::vector<ElementSpan>* out) {
    while (s.in_events_ && len - s.pos_ >= kBlock) {
      s.pos_ += Block(s, Classify(buf + s.pos_), buf + s.pos_, s.pos_, out);
    }
  }
#if defined(STALLSCOPE_SCAN_AVX2)
  __attribute__((target("avx2"))) static void RunAvx2(JsonScanner& s, const char* buf, uint64_t len,
                                                      std::vector<ElementSpan>* out) {
    while (s.in_events_ && len - s.pos_ >= kBlock) {
      s.pos_ += Block(s, ClassifyAvx2(buf + s.pos_), buf + s.pos_, s.pos_, out);
    }
  }
#endif
  static void Run(JsonScanner& s, const char* buf, uint64_t len, std::vector<ElementSpan>* out) {
#if defined(STALLSCOPE_SCAN_AVX2)
    if (s.kernel_ == ScanKernel::kAvx2) return RunAvx2(s, buf, len, out);
#endif
    RunBaseline(s, buf, len, out);
  }
};

JsonScanner::JsonScanner(std::vector<std::string> capture_keys, ScanKernel kernel)
    : capture_keys_(std::move(capture_keys)), kernel_(ResolveScanKernel(kernel)) {}

void JsonScanner::Shift(uint64_t n) {
  pos_ -= n;
  last_sep_ = last_sep_ >= n ? last_sep_ - n : 0;
}

void JsonScanner::Cut(uint64_t from, uint64_t to) {
  if (to <= from || from <= keep_from() || to > pos_) return;  // outside the contract: no-op
  pos_ -= to - from;
}

void JsonScanner::Scan(const char* buf, uint64_t len, bool eof, std::vector<ElementSpan>* out) {
  while (pos_ < len && !done_) {
    if (!in_events_) {
      pos_ = ScanTop(buf, len);
    } else if (len - pos_ >= kBlock) {
      ArrayScan::Run(*this, buf, len, out);
    } else if (eof) {
      // Last partial block: pad with spaces, which change no state.
      char block[kBlock];
      std::memset(block, ' ', kBlock);
      std::memcpy(block, buf + pos_, len - pos_);
      pos_ = std::min(len, pos_ + ArrayScan::Block(*this, Classify(block), block, pos_, out));
    } else {
      break;
    }
  }
  if (eof && in_events_ && object_closed_) {
    // A cut file: the last element is a complete object with no separator after it.
    out->push_back({last_sep_, len});
    last_sep_ = len;
    object_closed_ = false;
  }
}

uint64_t ArrayScan::Block(JsonScanner& s, const BlockMasks& m, const char* block, uint64_t base,
                          std::vector<ElementSpan>* out) {
  // Backslashes are rare in traces: skip the escape arithmetic when there are none.
  uint64_t escaped =
      (m.backslash | s.prev_escaped_) != 0 ? FindEscaped(m.backslash, &s.prev_escaped_) : 0;
  uint64_t in_string = PrefixXor(m.quote & ~escaped) ^ s.prev_in_string_;
  s.prev_in_string_ = static_cast<uint64_t>(static_cast<int64_t>(in_string) >> 63);
  uint64_t opens = m.open & ~in_string;
  uint64_t closes = m.close & ~in_string;
  // Inside an element with no closing bracket in the block, the depth only grows: no
  // separator or array end can be here.
  if (s.depth_ > s.events_depth_ && closes == 0) {
    for (; opens != 0; opens &= opens - 1) ++s.depth_;  // few bits: cheaper than soft popcount
    return kBlock;
  }
  uint64_t brackets = opens | closes;
  uint64_t with_commas = brackets | (m.comma & ~in_string);
  uint64_t seen = 0;
  // Commas matter only directly inside the array; elsewhere only brackets move the depth.
  while (true) {
    uint64_t candidates = (s.depth_ == s.events_depth_ ? with_commas : brackets) & ~seen;
    if (candidates == 0) return kBlock;
    int i = __builtin_ctzll(candidates);
    seen = i == 63 ? ~uint64_t{0} : (uint64_t{2} << i) - 1;
    char c = block[i];
    uint64_t at = base + static_cast<uint64_t>(i);
    if (c == ',') {
      out->push_back({s.last_sep_, at});
      s.last_sep_ = at;
      s.object_closed_ = false;
    } else if (c == '{' || c == '[') {
      ++s.depth_;
    } else if (s.depth_ == s.events_depth_) {
      // The array's closing bracket.
      out->push_back({s.last_sep_, at});
      s.in_events_ = false;
      s.object_closed_ = false;
      s.prev_escaped_ = 0;
      s.prev_in_string_ = 0;
      --s.depth_;
      s.done_ = s.depth_ == 0;
      return static_cast<uint64_t>(i) + 1;
    } else {
      --s.depth_;
      if (s.depth_ == s.events_depth_) s.object_closed_ = c == '}';
    }
  }
}

void JsonScanner::EnterEvents(uint64_t at, int64_t depth) {
  in_events_ = true;
  events_found_ = true;
  events_key_ = false;
  events_depth_ = depth;
  depth_ = depth;
  last_sep_ = at;
  prev_escaped_ = 0;
  prev_in_string_ = 0;
  object_closed_ = false;
}

uint64_t JsonScanner::ScanTop(const char* buf, uint64_t len) {
  uint64_t p = pos_;
  while (p < len && !in_events_ && !done_) {
    char c = buf[p];
    uint64_t at = p++;
    if (layout_ == JsonLayout::kUnknown) {
      auto u = static_cast<unsigned char>(c);
      if (IsSpace(c) || (at < 3 && (u == 0xef || u == 0xbb || u == 0xbf))) continue;  // BOM
      first_byte_ = u;
      if (c == '{') {
        layout_ = JsonLayout::kObject;
        depth_ = 1;
        expect_key_ = true;
      } else if (c == '[') {
        layout_ = JsonLayout::kBareArray;
        EnterEvents(at, 1);
      } else {
        layout_ = JsonLayout::kNotJson;
        done_ = true;
      }
      continue;
    }
    if (in_string_) {
      bool closing = false;
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
        closing = true;
      }
      if (reading_key_) {
        if (closing) {
          reading_key_ = false;
        } else if (key_.size() < kMaxKeyBytes) {
          key_.push_back(c);
        }
      }
      if (capturing_) Capture(c);
      continue;
    }
    TopByteOutsideString(c, at);
  }
  if (done_ && layout_ != JsonLayout::kNotJson) {
    for (uint64_t q = p; q < len && !trailing_data_; ++q) trailing_data_ = !IsSpace(buf[q]);
  }
  return p;
}

void JsonScanner::TopByteOutsideString(char c, uint64_t at) {
  if (after_colon_) {
    if (IsSpace(c)) return;
    after_colon_ = false;
    if (events_key_ && c == '[') {
      EnterEvents(at, 2);
      return;
    }
    events_key_ = false;
  }
  auto finish_capture = [this] {
    if (!capturing_) return;
    values_.push_back({key_, std::move(capture_)});
    capture_.clear();
    capturing_ = false;
  };
  switch (c) {
    case '"':
      in_string_ = true;
      if (depth_ == 1 && expect_key_) {
        reading_key_ = true;
        expect_key_ = false;
        key_.clear();
      }
      break;
    case ':':
      if (depth_ == 1 && !capturing_) {
        after_colon_ = true;
        events_key_ = key_ == "traceEvents" && !events_found_;
        second_events_key_ |= key_ == "traceEvents" && events_found_;
        capturing_ =
            std::find(capture_keys_.begin(), capture_keys_.end(), key_) != capture_keys_.end();
        capture_.clear();
        return;
      }
      break;
    case '{':
    case '[':
      ++depth_;
      break;
    case '}':
    case ']':
      if (depth_ == 1) finish_capture();
      --depth_;
      if (depth_ <= 0) done_ = true;
      break;
    case ',':
      if (depth_ == 1) {
        finish_capture();
        expect_key_ = true;
        return;
      }
      break;
    default:
      break;
  }
  // A run of whitespace outside strings keeps its first byte: JSON means the same (RFC 8259
  // section 2), and a run of it never grows the capture.
  if (capturing_ && !(IsSpace(c) && !capture_.empty() && IsSpace(capture_.back()))) Capture(c);
}

void JsonScanner::Capture(char c) {
  if (capture_.size() < kMaxCaptureBytes) {
    capture_.push_back(c);
    return;
  }
  // A hostile or broken file (a gzip bomb of whitespace inside deviceProperties): drop the
  // value rather than hold it.
  capturing_ = false;
  dropped_values_.push_back(key_);
  capture_ = std::string();
}

}  // namespace stallscope::trace
