#include "rundir/info_records.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/vocabulary.h"

namespace stallscope::rundir {
namespace {

phase::MetaItem Info(const std::string& name, const std::string& json, int32_t pid = 7) {
  phase::MetaItem m;
  m.pid = pid;
  m.rank = 1;
  m.kind = "info";
  m.name = name;
  m.data_json = json;
  return m;
}

TEST(DecodeInfoRecords, EveryStartupKindAutoPyWrites) {
  phase::EventLog log;
  log.meta = {
      Info("cuda_init", R"({"begin_ns": 1000000000, "end_ns": 1400000000})"),
      Info("compile", R"({"begin_ns": 2000000000, "end_ns": 5000000000, "frame": "m.py:3 fwd"})"),
      Info("compile_totals", R"({"count": 70, "total_ns": 9000000000})"),
      Info("backends", R"({"cudnn_benchmark": true, "cudnn_deterministic": false,
                           "float32_matmul_precision": "high", "cuda_initialized": true})"),
      Info("dataloader", R"({"num_workers": 2})"),  // not ours: ignored, not malformed
  };
  const InfoRecords records = DecodeInfoRecords(log);
  const JobInfo& info = records.job;
  ASSERT_EQ(info.cuda_init.size(), 1u);
  EXPECT_EQ(info.cuda_init[0].pid, 7);
  EXPECT_EQ(info.cuda_init[0].rank, 1);
  EXPECT_DOUBLE_EQ(info.cuda_init[0].seconds(), 0.4);
  ASSERT_EQ(info.compiles.size(), 1u);
  EXPECT_EQ(info.compiles[0].what, "m.py:3 fwd");
  EXPECT_DOUBLE_EQ(info.compiles[0].seconds(), 3.0);
  ASSERT_EQ(info.compile_totals.size(), 1u);
  EXPECT_EQ(info.compile_totals[0].count, 70);
  EXPECT_DOUBLE_EQ(info.compile_totals[0].total_s, 9.0);
  ASSERT_EQ(info.backends.size(), 1u);
  EXPECT_EQ(info.backends[0].cudnn_benchmark, true);
  EXPECT_EQ(info.backends[0].cudnn_deterministic, false);
  EXPECT_EQ(info.backends[0].float32_matmul_precision, "high");
  EXPECT_EQ(info.backends[0].cuda_initialized, true);
  EXPECT_EQ(records.malformed, 0);
}

TEST(DecodeInfoRecords, BadStartupRecordsAreCountedAndSkipped) {
  phase::EventLog log;
  log.meta = {
      Info("cuda_init", "not json"),
      Info("cuda_init", R"([1, 2])"),
      Info("cuda_init", R"({"begin_ns": 5, "end_ns": 4})"),       // ends before it begins
      Info("compile", R"({"begin_ns": "x", "end_ns": 4})"),       // a field of the wrong type
      Info("compile_totals", R"({"count": -1, "total_ns": 3})"),  // negative
      Info("backends", R"({"cudnn_benchmark": "yes"})"),          // a wrong type reads as unknown
  };
  const InfoRecords records = DecodeInfoRecords(log);
  const JobInfo& info = records.job;
  EXPECT_TRUE(info.cuda_init.empty());
  EXPECT_TRUE(info.compiles.empty());
  EXPECT_TRUE(info.compile_totals.empty());
  ASSERT_EQ(info.backends.size(), 1u);
  EXPECT_FALSE(info.backends[0].cudnn_benchmark.has_value());
  EXPECT_EQ(records.malformed, 5);
}

TEST(DecodeInfoRecords, LoadersSyncSitesTorchAndExperimentDecodedOnceAndBadOnesCounted) {
  phase::EventLog log;
  log.meta = {
      Info("torch", R"({"intra_op_threads": 4, "cpu_count": 8, "omp_num_threads_env": "2"})"),
      Info("torch", R"({"intra_op_threads": 9})"),  // a second from the same process: the first
      Info("dataloader", R"({"loader": 1, "num_workers": 2, "batch_size": 64})"),
      Info("dataloader_workers", R"({"loader": 1, "worker_pids": [11, 12, 11]})"),
      Info("dataloader_workers", R"({"loader": 2, "worker_pids": [13]})"),  // no such loader
      Info("sync_site", R"({"kind": "item", "file": "train.py", "line": 5, "function": "f"})"),
      Info("sync_site", R"({"kind": "item", "file": "train.py", "line": 9, "function": "g"})"),
      Info("sync_sites", R"({"sites": [{"kind": "item", "file": "train.py", "line": 9,
                                        "count": 40}]})"),
      Info("experiment", R"({"saves_skipped": 2, "synthetic_not_applied": "no loader"})"),
      Info("experiment", R"({"saves_skipped": 3, "synthetic_not_applied": "no loader"})"),
      Info("sync_site", R"({"kind": "", "file": "train.py"})"),  // no kind: malformed
      Info("dataloader", "{torn"),                               // malformed
      Info("a_newer_kind", R"({"x": 1})"),                       // unknown: skipped
  };
  const InfoRecords r = DecodeInfoRecords(log);
  ASSERT_EQ(r.torch.size(), 1u);
  EXPECT_EQ(r.torch[0].intra_op_threads, 4);
  EXPECT_EQ(r.torch[0].omp_num_threads_env, "2");
  ASSERT_EQ(r.loaders.size(), 1u);
  EXPECT_EQ(r.loaders[0].batch_size, 64);
  EXPECT_EQ(r.loaders[0].worker_pids, (std::vector<int32_t>{11, 12}));
  ASSERT_EQ(r.sync_sites.size(), 2u);
  EXPECT_EQ(r.sync_sites[0].line, 9);  // counted first
  EXPECT_EQ(r.sync_sites[0].count, 40);
  EXPECT_FALSE(r.sync_sites[1].count.has_value());
  EXPECT_TRUE(r.experiment.present);
  EXPECT_EQ(r.experiment.saves_skipped, 5);
  EXPECT_EQ(r.experiment.synthetic_not_applied, "no loader");
  EXPECT_EQ(r.malformed, 2);
  EXPECT_EQ(r.unknown, 1);
}

TEST(InfoKinds, EveryKindInEnumOrderWithItsKeysOnce) {
  for (size_t i = 0; i < std::size(kInfoKinds); ++i) {
    EXPECT_EQ(static_cast<size_t>(kInfoKinds[i].kind), i);
    EXPECT_EQ(InfoKindOf(kInfoKinds[i].name), kInfoKinds[i].kind);
    std::set<std::string_view> keys(kInfoKinds[i].keys.begin(), kInfoKinds[i].keys.end());
    EXPECT_EQ(keys.size(), kInfoKinds[i].keys.size()) << kInfoKinds[i].name;
  }
  EXPECT_FALSE(InfoKindOf("mark").has_value());
}

// The contract between the two sides: python/stallscope/_protocol.py declares the kinds and keys
// the Python side writes (INFO_KINDS, INFO_KEYS) and the phases it records (PHASES); the C++
// side's declarations must be the same sets. Read with regular expressions, in the format the
// file's header promises.
std::string ReadProtocol() {
  std::ifstream in(std::filesystem::path(STALLSCOPE_SOURCE_DIR) / "python/stallscope/_protocol.py");
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  text = std::regex_replace(text, std::regex("#[^\n]*"), "");  // comments
  return text;
}

/// The string literals of the value assigned to NAME (a tuple or a dict), up to its closing
/// bracket.
std::string ValueOf(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\\n" + name + " = ([\\(\\{])"))) return "";
  const char close = m[1].str() == "(" ? ')' : '}';
  const size_t begin = static_cast<size_t>(m.position(0) + m.length(0));
  int depth = 1;
  size_t i = begin;
  for (; i < text.size() && depth > 0; ++i) {
    if (text[i] == m[1].str()[0]) ++depth;
    if (text[i] == close) --depth;
  }
  return text.substr(begin, i - begin);
}

std::vector<std::string> Literals(const std::string& text) {
  std::vector<std::string> out;
  std::regex lit("\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), lit); it != std::sregex_iterator();
       ++it)
    out.push_back((*it)[1]);
  return out;
}

TEST(PythonContract, InfoKindsAndKeysAreTheOnesThePythonSideWrites) {
  const std::string text = ReadProtocol();
  std::set<std::string> py_kinds;
  for (const auto& k : Literals(ValueOf(text, "INFO_KINDS"))) py_kinds.insert(k);
  ASSERT_FALSE(py_kinds.empty()) << "_protocol.py: no INFO_KINDS";
  std::set<std::string> cc_kinds;
  for (const auto& spec : kInfoKinds) cc_kinds.insert(std::string(spec.name));
  EXPECT_EQ(py_kinds, cc_kinds);

  // INFO_KEYS = {"kind": ("key", ...), ...}: split at each `"kind": (`.
  const std::string keys = ValueOf(text, "INFO_KEYS");
  std::map<std::string, std::set<std::string>> py_keys;
  std::regex entry("\"([a-z_]+)\"\\s*:\\s*\\(([^)]*)\\)");
  for (auto it = std::sregex_iterator(keys.begin(), keys.end(), entry);
       it != std::sregex_iterator(); ++it) {
    for (const auto& k : Literals((*it)[2])) py_keys[(*it)[1]].insert(k);
  }
  for (const auto& spec : kInfoKinds) {
    std::set<std::string> cc(spec.keys.begin(), spec.keys.end());
    EXPECT_EQ(py_keys[std::string(spec.name)], cc) << "info \"" << spec.name << "\"";
  }
  EXPECT_EQ(py_keys.size(), std::size(kInfoKinds));
}

TEST(PythonContract, PhaseNamesAreTheOnesThePythonSideRecords) {
  const std::string text = ReadProtocol();
  std::set<std::string> py;
  for (const auto& k : Literals(ValueOf(text, "PHASES"))) py.insert(k);
  ASSERT_FALSE(py.empty()) << "_protocol.py: no PHASES";
  // Every phase the hooks record is one the C++ side names (base/vocabulary.h phase_name).
  const std::set<std::string> cc(phase_name::kRecorded.begin(), phase_name::kRecorded.end());
  EXPECT_EQ(py, cc);
}

}  // namespace
}  // namespace stallscope::rundir
