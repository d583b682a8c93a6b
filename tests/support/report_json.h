#pragma once
// Reading a run's report.json in the end-to-end tests (live jobs and the recorded run
// directories alike): its phases, shares, findings and process roles by name.

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace stallscope::testing::report_json {

using nlohmann::json;

/// The phase `name` of `rank` in report.json's phase table, or nullptr.
inline const json* Phase(const json& report, const std::string& name, int rank = 0) {
  for (const auto& p : report["phases"]) {
    if (p["name"] == name && p["rank"] == rank) return &p;
  }
  return nullptr;
}

/// The phase's share of the steps; 0 when the rank did not record it.
inline double Share(const json& report, const std::string& phase, int rank = 0) {
  const json* p = Phase(report, phase, rank);
  return p == nullptr ? 0.0 : (*p)["share"].get<double>();
}

/// The principal finding's class, "none" without one.
inline std::string Principal(const json& report) {
  const auto& p = report["verdict"]["principal"];
  return p.is_null() ? "none" : p["class"].get<std::string>();
}

/// The finding of class `cls`, principal or secondary, or nullptr.
inline const json* Finding(const json& report, const std::string& cls) {
  const auto& v = report["verdict"];
  if (!v["principal"].is_null() && v["principal"]["class"] == cls) return &v["principal"];
  for (const auto& f : v["secondary"]) {
    if (f["class"] == cls) return &f;
  }
  return nullptr;
}

/// The role of the first process whose command line contains `cmdline_part`.
inline std::string Role(const json& report, const std::string& cmdline_part) {
  for (const auto& p : report["processes"]) {
    if (p["cmdline"].get<std::string>().find(cmdline_part) != std::string::npos) return p["role"];
  }
  return "(not seen)";
}

/// A 2-rank job of examples/launch.py: both ranks' `steps` steps and their phases, the launcher
/// and both ranks named in the process table.
inline void ExpectTwoRanks(const json& report, int steps) {
  ASSERT_EQ(report["steps"]["ranks"].size(), 2u) << report["steps"].dump();
  for (int rank = 0; rank < 2; ++rank) {
    const json& k = report["steps"]["ranks"][rank];
    EXPECT_EQ(k["count"].get<int>() + k["warmup_steps"].get<int>(), steps) << k.dump();
    for (const char* name :
         {"data_loading", "forward_pass", "backward_pass", "comm_wait", "optimizer_step"}) {
      EXPECT_NE(Phase(report, name, rank), nullptr) << name << " rank " << rank;
    }
  }
  EXPECT_EQ(Role(report, "examples/launch.py"), "launcher");
  int ranks_seen = 0;
  for (const auto& p : report["processes"]) {
    ranks_seen += p["role"] == "rank 0" || p["role"] == "rank 1";
  }
  EXPECT_EQ(ranks_seen, 2) << report["processes"].dump();
}

}  // namespace stallscope::testing::report_json
