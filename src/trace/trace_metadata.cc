#include "trace/trace_metadata.h"

#include <string_view>

#include <fmt/format.h>

#include "base/name_table.h"
#include "base/units.h"
#include "trace/json_values.h"

namespace stallscope::trace {
namespace {

namespace od = simdjson::ondemand;
using json_values::GetString;
using json_values::KeyText;
using json_values::ParseJsonInt;
using json_values::ReadOptInt;

/// distributedInfo: {"backend": "nccl", "rank": 3, "world_size": 8, ...}.
Status ApplyDistributedInfo(od::parser& parser, std::string_view raw, RankTrace* out) {
  simdjson::padded_string json(Trim(raw));
  od::document doc;
  od::object obj;
  if (parser.iterate(json).get(doc) || doc.get_object().get(obj)) {
    return MakeError(ErrorCode::kParse, "not an object");
  }
  for (auto field_result : obj) {
    od::field field;
    if (std::move(field_result).get(field)) return MakeError(ErrorCode::kParse, "malformed");
    std::string_view key = KeyText(field.key());
    od::value& v = field.value();
    if (key == "rank") {
      if (auto r = ReadOptInt(v)) {
        out->rank = static_cast<int32_t>(*r);
        out->rank_source = RankSource::kDistributedInfo;
      }
    } else if (key == "world_size") {
      if (auto w = ReadOptInt(v)) out->world_size = static_cast<int32_t>(*w);
    } else if (key == "backend") {
      std::string_view backend;
      if (!GetString(v, &backend)) out->backend = backend;
    }
  }
  return OkStatus();
}

/// deviceProperties: [{"id": 0, "name": "...", "totalGlobalMem": ..., "computeMajor": 8, ...}].
Status ApplyDeviceProperties(od::parser& parser, std::string_view raw, RankTrace* out) {
  simdjson::padded_string json(Trim(raw));
  od::document doc;
  od::array array;
  if (parser.iterate(json).get(doc) || doc.get_array().get(array)) {
    return MakeError(ErrorCode::kParse, "not an array");
  }
  for (auto element : array) {
    od::object obj;
    if (element.get_object().get(obj)) return MakeError(ErrorCode::kParse, "not an object");
    DeviceProps d;
    for (auto field_result : obj) {
      od::field field;
      if (std::move(field_result).get(field)) return MakeError(ErrorCode::kParse, "malformed");
      std::string_view key = KeyText(field.key());
      od::value& v = field.value();
      if (key == "id") {
        d.id = static_cast<int32_t>(ReadOptInt(v).value_or(0));
      } else if (key == "name") {
        std::string_view name;
        if (!GetString(v, &name)) d.name = name;
      } else if (key == "totalGlobalMem") {
        if (auto m = ReadOptInt(v)) d.total_memory_bytes = static_cast<uint64_t>(*m);
      } else if (key == "computeMajor") {
        if (auto m = ReadOptInt(v)) d.compute_major = static_cast<int32_t>(*m);
      } else if (key == "computeMinor") {
        if (auto m = ReadOptInt(v)) d.compute_minor = static_cast<int32_t>(*m);
      } else if (key == "numSms") {
        if (auto m = ReadOptInt(v)) d.num_sms = static_cast<int32_t>(*m);
      }
    }
    out->devices.push_back(std::move(d));
  }
  return OkStatus();
}

}  // namespace

std::string_view RankSourceName(RankSource source) { return NameIn(kRankSourceNames, source); }

void ApplyTopLevelValues(od::parser& parser, const std::vector<TopLevelValue>& values,
                         RankTrace* out) {
  for (const TopLevelValue& v : values) {
    Status s = OkStatus();
    if (v.key == "distributedInfo") {
      s = ApplyDistributedInfo(parser, v.raw, out);
    } else if (v.key == "deviceProperties") {
      s = ApplyDeviceProperties(parser, v.raw, out);
    } else if (v.key == "baseTimeNanoseconds") {
      out->base_time_ns = ParseJsonInt(v.raw);
      if (!out->base_time_ns) s = MakeError(ErrorCode::kParse, "not an integer");
    }
    if (!s.ok()) {
      out->warnings.push_back(
          fmt::format("{}: {} unreadable ({})", out->path, v.key, s.error().message));
    }
  }
}

}  // namespace stallscope::trace
