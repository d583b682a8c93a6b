#include "trace/blank_squeeze.h"

namespace stallscope::trace {

uint64_t BlankSqueeze::Run(char* buf, uint64_t end) {
  uint64_t w = done;
  for (uint64_t r = done; r < end; ++r) {
    const char c = buf[r];
    if (off) {
      // Not JSON (a backslash outside a string): left as it is; the parser will say so.
    } else if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (IsBlankByte(c)) {
      // buf[w - 1] is outside a string here (a string ends with '"'); buf[0] is no blank.
      if (IsBlankByte(buf[w - 1])) continue;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '\\') {
      off = true;
    }
    buf[w++] = c;
  }
  done = w;
  return w;
}

}  // namespace stallscope::trace
