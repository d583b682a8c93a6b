#pragma once
// Reading optional fields of JSON written by other programs (the job's meta lines and
// python.jsonl, doctor's Python probe): bad data is data, so a missing key, null or a value of
// the wrong type reads as empty instead of throwing. Header-only; users link
// nlohmann_json::nlohmann_json themselves.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace stallscope {

/// j[key] as T (bool, std::string, or an integer type: an integer JSON number within T's range);
/// empty when absent, null, of another type or out of range.
template <typename T>
std::optional<T> JsonOpt(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if constexpr (std::is_same_v<T, bool>) {
    if (it->is_boolean()) return it->template get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (it->is_string()) return it->template get<std::string>();
  } else {
    static_assert(std::is_integral_v<T>, "JsonOpt reads bool, std::string or integers");
    if (it->is_number_unsigned()) {
      const auto v = it->template get<uint64_t>();
      if (v <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(v);
    } else if (it->is_number_integer()) {
      const auto v = it->template get<int64_t>();
      if (v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
          (v < 0 ||
           static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max())))
        return static_cast<T>(v);
    }
  }
  return std::nullopt;
}

}  // namespace stallscope
