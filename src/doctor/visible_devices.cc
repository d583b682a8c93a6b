#include "doctor/visible_devices.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "base/units.h"

namespace stallscope::doctor {
namespace {

/// The NVML index an entry names, or why it names none.
std::optional<uint32_t> Resolve(std::string_view entry, const std::vector<std::string>& uuids,
                                std::string& why) {
  if (entry.starts_with("GPU-")) {
    std::optional<uint32_t> found;
    for (uint32_t i = 0; i < uuids.size(); ++i) {
      if (!uuids[i].starts_with(entry)) continue;
      if (found) {
        why = fmt::format("'{}' matches more than one GPU's UUID", entry);
        return std::nullopt;
      }
      found = i;
    }
    if (!found) why = fmt::format("no GPU's UUID starts with '{}'", entry);
    return found;
  }
  uint32_t index = 0;
  const char* end = entry.data() + entry.size();
  const auto [ptr, ec] = std::from_chars(entry.data(), end, index);
  if (entry.empty() || ec != std::errc() || ptr != end) {
    why = entry == "-1" ? "-1 hides every GPU after it" : fmt::format("'{}' is no GPU", entry);
    return std::nullopt;
  }
  if (index >= uuids.size()) {
    why = fmt::format("there is no GPU {} ({} GPU{})", index, uuids.size(),
                      uuids.size() == 1 ? "" : "s");
    return std::nullopt;
  }
  return index;
}

}  // namespace

Visibility ResolveVisibleDevices(std::optional<std::string_view> value,
                                 const std::vector<std::string>& uuids) {
  Visibility v;
  if (!value) {
    for (uint32_t i = 0; i < uuids.size(); ++i) v.gpus.push_back(i);
    return v;
  }
  v.set = true;
  const std::string_view text = Trim(*value);
  if (text.empty()) return v;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view entry = Trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    if (entry.empty()) continue;  // "0,1," : a stray comma names nothing
    if (entry.starts_with("MIG-")) {
      v.mig_instances.emplace_back(entry);
      continue;
    }
    std::string why;
    const std::optional<uint32_t> index = Resolve(entry, uuids, why);
    if (index && std::find(v.gpus.begin(), v.gpus.end(), *index) != v.gpus.end()) {
      why = fmt::format("GPU {} is listed again", *index);
    }
    if (!why.empty()) {
      v.stopped_at = std::string(entry);
      v.stop_reason = std::move(why);
      break;
    }
    v.gpus.push_back(*index);
  }
  return v;
}

}  // namespace stallscope::doctor
