#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include "base/units.h"

namespace stallscope {

/// Appends JSON to a caller-owned string: keys in the order written (stable output), floats with
/// a fixed number of decimals (stable golden files), std::nullopt as null. No allocation beyond
/// the string's growth, so a reused buffer makes the per-sample path allocation-free.
/// Not validating: callers pair Begin/End themselves.
class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : out_(out) {}

  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }

  /// Writes `"key":` (the next value follows). Keys are our own ASCII names: not escaped.
  /// Writes `"key":`. A key from outside (a counter or phase name from the job) is escaped like
  /// a string value, so any name keeps the JSON valid; the fixed keys of the formats take the
  /// fast path (one scan, no escaping).
  JsonWriter& Key(std::string_view key) {
    Separate();
    if (PlainKey(key)) {
      out_.push_back('"');
      out_.append(key);
      out_.append("\":", 2);
    } else {
      AppendJsonString(out_, key);
      out_.push_back(':');
    }
    after_key_ = true;
    return *this;
  }

  JsonWriter& String(std::string_view v) {
    Separate();
    AppendJsonString(out_, v);
    return *this;
  }
  JsonWriter& Bool(bool v) {
    Separate();
    out_ += v ? "true" : "false";
    return *this;
  }
  JsonWriter& Null() {
    Separate();
    out_ += "null";
    return *this;
  }
  template <typename T>
  requires std::is_integral_v<T> JsonWriter& Int(T v) {
    Separate();
    if constexpr (std::is_same_v<T, bool>) {
      out_ += v ? "true" : "false";
    } else {
      fmt::format_int text(v);  // no format-string parsing: this runs per field per sample
      out_.append(text.data(), text.size());
    }
    return *this;
  }
  /// A float with `decimals` digits after the point; NaN/inf become null (JSON has neither).
  JsonWriter& Double(double v, int decimals = 3) {
    Separate();
    if (v != v || v > 1e300 || v < -1e300) {
      out_ += "null";
    } else {
      char buf[352];  // fixed notation of |v| <= 1e300 with up to 20 decimals fits
      auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed, decimals);
      if (ec == std::errc()) {
        out_.append(buf, static_cast<size_t>(end - buf));
      } else {
        out_ += "null";
      }
    }
    return *this;
  }

  // Key + value shorthands; optional values write null when empty.
  JsonWriter& Field(std::string_view key, std::string_view v) { return Key(key).String(v); }
  JsonWriter& Field(std::string_view key, const char* v) { return Key(key).String(v); }
  JsonWriter& FieldBool(std::string_view key, bool v) { return Key(key).Bool(v); }
  template <typename T>
  requires std::is_integral_v<T> JsonWriter& Field(std::string_view key, T v) {
    return Key(key).Int(v);
  }
  JsonWriter& Field(std::string_view key, double v, int decimals = 3) {
    return Key(key).Double(v, decimals);
  }
  template <typename T>
  requires std::is_integral_v<T> JsonWriter& Field(std::string_view key,
                                                   const std::optional<T>& v) {
    Key(key);
    return v ? Int(*v) : Null();
  }
  JsonWriter& Field(std::string_view key, const std::optional<double>& v, int decimals = 3) {
    Key(key);
    return v ? Double(*v, decimals) : Null();
  }
  JsonWriter& Field(std::string_view key, const std::optional<bool>& v) {
    Key(key);
    return v ? Bool(*v) : Null();
  }
  /// An optional string (a template, so that a plain std::string argument is not ambiguous).
  template <typename T>
  requires std::is_same_v<T, std::string> JsonWriter& Field(std::string_view key,
                                                            const std::optional<T>& v) {
    Key(key);
    return v ? String(*v) : Null();
  }
  /// key: [...] of a range of strings or integers.
  template <typename Range>
  JsonWriter& FieldArray(std::string_view key, const Range& values) {
    Key(key).BeginArray();
    for (const auto& v : values) {
      if constexpr (std::is_integral_v<std::decay_t<decltype(v)>>) {
        Int(v);
      } else {
        String(v);
      }
    }
    return EndArray();
  }

 private:
  /// Printable ASCII without '"' or '\\': written as is.
  static bool PlainKey(std::string_view key) {
    for (const char c : key) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u >= 0x7f || c == '"' || c == '\\') return false;
    }
    return true;
  }
  JsonWriter& Open(char c) {
    Separate();
    out_.push_back(c);
    first_ = true;
    return *this;
  }
  JsonWriter& Close(char c) {
    out_.push_back(c);
    first_ = false;
    return *this;
  }
  void Separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_) out_.push_back(',');
    first_ = false;
  }

  std::string& out_;
  bool first_ = true;
  bool after_key_ = false;
};

}  // namespace stallscope
