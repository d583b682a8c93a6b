#include "rundir/job_info.h"

#include <nlohmann/json.hpp>

#include "base/json_fields.h"

namespace stallscope::rundir {
namespace {

using nlohmann::json;

/// {"begin_ns", "end_ns"[, "frame"]} as a TimedInfo; nullopt when malformed.
std::optional<TimedInfo> Timed(const phase::MetaItem& m, const json& j) {
  auto begin = JsonOpt<int64_t>(j, "begin_ns");
  auto end = JsonOpt<int64_t>(j, "end_ns");
  if (!begin || !end || *end < *begin) return std::nullopt;
  return TimedInfo{m.pid, m.rank, *begin, *end, JsonOpt<std::string>(j, "frame").value_or("")};
}

}  // namespace

JobInfo ReadJobInfo(const phase::EventLog& events) {
  JobInfo out;
  for (const auto& m : events.meta) {
    if (m.kind != "info") continue;
    const bool timed = m.name == "cuda_init" || m.name == "compile";
    if (!timed && m.name != "backends" && m.name != "compile_totals") continue;
    const json j = json::parse(m.data_json, nullptr, false);
    if (!j.is_object()) {
      ++out.malformed;
      continue;
    }
    if (timed) {
      auto t = Timed(m, j);
      if (!t) {
        ++out.malformed;
      } else {
        (m.name == "cuda_init" ? out.cuda_init : out.compiles).push_back(std::move(*t));
      }
    } else if (m.name == "compile_totals") {
      auto count = JsonOpt<int64_t>(j, "count");
      auto total = JsonOpt<int64_t>(j, "total_ns");
      if (!count || !total || *count < 0 || *total < 0) {
        ++out.malformed;
      } else {
        out.compile_totals.push_back({m.pid, *count, static_cast<double>(*total) / 1e9});
      }
    } else {
      BackendsInfo b;
      b.pid = m.pid;
      b.rank = m.rank;
      b.cudnn_benchmark = JsonOpt<bool>(j, "cudnn_benchmark");
      b.cudnn_deterministic = JsonOpt<bool>(j, "cudnn_deterministic");
      b.float32_matmul_precision = JsonOpt<std::string>(j, "float32_matmul_precision");
      b.cuda_initialized = JsonOpt<bool>(j, "cuda_initialized");
      out.backends.push_back(std::move(b));
    }
  }
  return out;
}

}  // namespace stallscope::rundir
