#pragma once
// The trace reader's whitespace squeezer (issue 27 B02): runs of JSON whitespace outside strings
// in the element being read shrink to one byte, so blanks between elements never grow the
// reader's buffer (a gzip bomb of whitespace once took 3 GB of RSS).

#include <cstdint>

namespace stallscope::trace {

/// JSON's whitespace (RFC 8259 section 2).
inline bool IsBlankByte(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/// Squeezes each run of JSON whitespace outside strings in the element being read to its first
/// byte (RFC 8259 section 2: insignificant there; one byte stays, so two tokens never join), in
/// place, resuming where it stopped: buf[0] is the element's separator, buf[1, done) is done.
struct BlankSqueeze {
  uint64_t done = 1;
  bool in_string = false;
  bool escape = false;
  bool off = false;  // a backslash outside a string: not JSON, nothing more is squeezed
  /// Squeezes buf[done, end) (scanned bytes); returns where the squeezed bytes end now.
  uint64_t Run(char* buf, uint64_t end);
};

}  // namespace stallscope::trace
