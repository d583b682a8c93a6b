#pragma once
// A closed set's one name table (`enum class` + `kXNames[] = {{X::kA, "a"}, ...}`, in enum
// order, as diagnose::FindingClass's), read both ways: the name of a value, the value of a name.

#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

namespace stallscope {

template <typename E>
using NameTableEntry = std::pair<E, std::string_view>;

/// `value`'s name in `table`; the first entry's name for a value the table lacks (a table holds
/// every value of its enum: the fallback is for a corrupted value only).
template <typename E, size_t N>
[[nodiscard]] constexpr std::string_view NameIn(const NameTableEntry<E> (&table)[N], E value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return table[0].second;
}

/// The value named `name` in `table`; empty for any other string.
template <typename E, size_t N>
[[nodiscard]] constexpr std::optional<E> ValueNamed(const NameTableEntry<E> (&table)[N],
                                                    std::string_view name) {
  for (const auto& [v, n] : table) {
    if (n == name) return v;
  }
  return std::nullopt;
}

}  // namespace stallscope
