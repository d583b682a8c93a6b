#pragma once
// Reading simdjson on-demand values the trace reader's way: without copies where the JSON has no
// escapes, and without treating a value of another type as an error. Private to src/trace (the
// event parser in trace_reader.cc and the top-level values in trace_metadata.cc); inline, as they
// run per field of every event.

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include <simdjson.h>

#include "base/units.h"

namespace stallscope::trace::json_values {

namespace od = simdjson::ondemand;

/// A JSON integer (pid, tid, stream, correlation, ...); whitespace around it is ignored.
/// Raw tokens carry the whitespace up to the next structural character.
inline std::optional<int64_t> ParseJsonInt(std::string_view s) { return ParseInt64(Trim(s)); }

/// The key text of a field without unescaping or copying (keys with escapes: empty, unmatched).
/// simdjson's stage 1 validated the string, so the closing quote exists.
inline std::string_view KeyText(const od::raw_json_string& key) {
  const char* s = key.raw();
  size_t n = 0;
  while (s[n] != '"') {
    if (s[n] == '\\') return {};
    ++n;
  }
  return {s, n};
}

/// A string value as a view, without copying when it has no escapes (the common case): the
/// raw token runs from the opening quote to the next structural character.
inline simdjson::error_code GetStringFast(od::value& v, std::string_view* out) {
  // simdjson's stage 1 validated the string; its closing quote is the token's last non-space.
  std::string_view t = Trim(v.raw_json_token());
  if (t.size() >= 2 && t.front() == '"' && t.back() == '"' &&
      std::memchr(t.data() + 1, '\\', t.size() - 2) == nullptr) {
    *out = t.substr(1, t.size() - 2);
    return simdjson::SUCCESS;
  }
  return v.get_string().get(*out);
}

/// Reads a string value (without a copy when it has no escapes); other types leave `out`
/// untouched (not an error).
inline simdjson::error_code GetString(od::value& v, std::string_view* out) {
  od::json_type type;
  if (auto err = v.type().get(type)) return err;
  if (type != od::json_type::string) return simdjson::SUCCESS;
  return GetStringFast(v, out);
}

inline std::optional<int64_t> ReadOptInt(od::value& v) {
  od::json_type type;
  if (v.type().get(type) || type != od::json_type::number) return std::nullopt;
  return ParseJsonInt(v.raw_json_token());
}

}  // namespace stallscope::trace::json_values
