#pragma once
// Seed 002's GPU monitor files, read as recordings: the legacy single-GPU object
// (timestamp, gpu_index, gpu_name, utilization, memory_used, memory_total, power) and the
// multi-GPU object (timestamp, multi_gpu_data[], aggregate_stats{}), one object per line or one
// JSON array. StreamRecording detects them; this is the conversion.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "sample/sample.h"

namespace simdjson::dom {
class object;
}  // namespace simdjson::dom

namespace stallscope::sample {

enum class SeedForm : uint8_t {
  kLegacy,    ///< one GPU per object: gpu_index, gpu_name, utilization, ...
  kMultiGpu,  ///< multi_gpu_data: [one such object per GPU], aggregate_stats
};

/// "seed 002 legacy single-GPU objects", "seed 002 multi-GPU objects".
[[nodiscard]] std::string_view SeedFormName(SeedForm form);

/// The form of `o` when it is one of seed 002's monitor objects (a "timestamp" and either
/// "multi_gpu_data" or "gpu_index"), else nullopt.
[[nodiscard]] std::optional<SeedForm> SeedFormOf(const simdjson::dom::object& o);

/// "2025-01-15T10:30:00", with optional fractional seconds and "Z" / "±HH:MM" (Python's
/// datetime.isoformat()); without a zone it is taken as UTC. ns since the Unix epoch.
[[nodiscard]] std::optional<int64_t> ParseIsoTimestampNs(std::string_view text);

/// The header a seed file implies, from its first object: its GPUs (index, name, memory total).
[[nodiscard]] RecordingHeader SeedHeader(const simdjson::dom::object& first, SeedForm form);

/// One seed object as a sample of `header`'s GPUs (matched by gpu_index; others ignored): GPU
/// utilization, memory used/total (MiB), power (W), temperature when present. False when the
/// object has no valid timestamp. Absent keys leave the metric absent.
[[nodiscard]] bool SeedSample(const simdjson::dom::object& o, SeedForm form,
                              const RecordingHeader& header, Sample& out);

/// A cheap sniff for commands that otherwise take a .json file for a profiler trace: the first
/// 64 KiB name seed 002's keys ("timestamp" with "multi_gpu_data" or "gpu_index") and no trace
/// keys ("traceEvents", "ph"). Reading it (StreamRecording) decides for good.
[[nodiscard]] bool LooksLikeSeedMonitorFile(const std::string& path);

}  // namespace stallscope::sample
