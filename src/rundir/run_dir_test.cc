// The run-directory reader on hostile input: every field of a real run.json (and of the JSON
// Lines files next to it) replaced, one at a time, by null and by values of every other type.
// Issue 12 finding 1: 10 of 21 such mutations aborted `diagnose` with an uncaught type_error.
#include "rundir/run_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/file_read.h"
#include "diagnose/run_report.h"
#include "rundir/python_notes.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace stallscope::rundir {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixture = fs::path(STALLSCOPE_SOURCE_DIR) / "tests/data/runs/data_cpu";

enum class Kind { kInt32, kInt64, kString, kBool, kDouble, kStrings, kStatus, kObject };

struct FieldSpec {
  const char* key;
  Kind kind;
  bool null_is_absent;  ///< README "Run directory": null while the job runs
};

// Every field WriteRunMeta writes (RunMetaFields.TableCoversTheFixture keeps it complete).
constexpr FieldSpec kFields[] = {
    {"schema_version", Kind::kInt32, false}, {"tool", Kind::kString, false},
    {"name", Kind::kString, false},          {"command", Kind::kStrings, false},
    {"hostname", Kind::kString, false},      {"pid", Kind::kInt32, false},
    {"start_wall_ns", Kind::kInt64, false},  {"start_mono_ns", Kind::kInt64, false},
    {"end_mono_ns", Kind::kInt64, true},     {"exit_code", Kind::kInt32, true},
    {"status", Kind::kStatus, false},        {"auto_hooks", Kind::kBool, false},
    {"interval_ns", Kind::kInt64, false},    {"monitor_cpu_s", Kind::kDouble, true},
    {"job_cpu_s", Kind::kDouble, true},      {"env", Kind::kObject, true},
};

std::vector<json> Mutations() {
  return {nullptr,
          "x",
          7,
          -1,
          1.5,
          true,
          json::array(),
          json::array({"a", 1}),
          json::object(),
          uint64_t{std::numeric_limits<uint64_t>::max()},
          int64_t{1} << 40};
}

bool Accepts(Kind kind, const json& v) {
  switch (kind) {
    case Kind::kInt32:
      return v.is_number_integer() && v.get<int64_t>() >= INT32_MIN &&
             v.get<int64_t>() <= INT32_MAX &&
             !(v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX);
    case Kind::kInt64:
      return v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX);
    case Kind::kString:
      return v.is_string();
    case Kind::kStatus:  // a closed set: RunStatus's names only
      return v.is_string() && ParseRunStatus(v.get<std::string>()).has_value();
    case Kind::kBool:
      return v.is_boolean();
    case Kind::kDouble:
      return v.is_number();
    case Kind::kObject:  // env: its non-string values are skipped
      return v.is_object();
    case Kind::kStrings:
      if (!v.is_array()) return false;
      for (const auto& a : v) {
        if (!a.is_string()) return false;
      }
      return true;
  }
  return false;
}

json FixtureRunJson() { return json::parse(stallscope::testing::Slurp(kFixture / "run.json")); }

TEST(RunMetaFields, TableCoversTheFixture) {
  const json fixture = FixtureRunJson();  // items() of a temporary would dangle
  for (const auto& [key, value] : fixture.items()) {
    bool known = false;
    for (const auto& f : kFields) known |= key == f.key;
    EXPECT_TRUE(known) << key << " is read from run.json but not in kFields";
  }
}

TEST(RunMetaFields, EverySingleFieldMutationIsAnErrorNamingTheFieldOrReadsAsAbsent) {
  stallscope::testing::TempDir dir("run_meta");
  const RunPaths paths{dir.path().string()};
  for (const auto& f : kFields) {
    for (const json& value : Mutations()) {
      SCOPED_TRACE(std::string(f.key) + " = " + value.dump());
      json j = FixtureRunJson();
      j[f.key] = value;
      std::ofstream(paths.run_json()) << j.dump();
      Result<RunMeta> meta = ReadRunMeta(paths);  // must not throw
      if (Accepts(f.kind, value) || (value.is_null() && f.null_is_absent)) {
        EXPECT_TRUE(meta.ok()) << meta.error().message;
        continue;
      }
      ASSERT_FALSE(meta.ok());
      const std::string& message = meta.error().message;
      EXPECT_NE(message.find(paths.run_json()), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("\"") + f.key + "\""), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

TEST(RunStatus, EveryStatusReadsBackAsWritten) {
  stallscope::testing::TempDir dir("run_status");
  const RunPaths paths{dir.path().string()};
  for (const auto& [status, name] : kRunStatusNames) {
    EXPECT_EQ(RunStatusName(status), name);
    EXPECT_EQ(ParseRunStatus(name), status);
    RunMeta meta;
    meta.command = {"python", "train.py"};
    meta.status = status;
    ASSERT_TRUE(WriteRunMeta(paths, meta).ok());
    auto read = ReadRunMeta(paths);
    ASSERT_TRUE(read.ok()) << read.error().message;
    EXPECT_EQ(read->status, status) << name;
  }
  EXPECT_FALSE(ParseRunStatus("Exited").has_value());
}

TEST(RunMetaFields, NullOfAFieldStillRunningIsAbsent) {
  stallscope::testing::TempDir dir("run_meta");
  const RunPaths paths{dir.path().string()};
  json j = FixtureRunJson();
  j["end_mono_ns"] = nullptr;
  j["exit_code"] = nullptr;
  std::ofstream(paths.run_json()) << j.dump();
  Result<RunMeta> meta = ReadRunMeta(paths);
  ASSERT_TRUE(meta.ok()) << meta.error().message;
  EXPECT_FALSE(meta->end_mono_ns.has_value());
  EXPECT_FALSE(meta->exit_code.has_value());
  EXPECT_EQ(meta->pid, j["pid"].get<int32_t>());
}

// Issue 27, "Also": `{}` was a run still running, started in 1970. A run.json without a
// field every run.json has from its start is no run's; one over the cap is not read at all.
TEST(RunMetaFields, ARunJsonWithoutTheFieldsOfEveryRunIsNotARun) {
  stallscope::testing::TempDir dir("run_meta");
  const RunPaths paths{dir.path().string()};
  std::ofstream(paths.run_json()) << "{}";
  Result<RunMeta> meta = ReadRunMeta(paths);
  ASSERT_FALSE(meta.ok());
  EXPECT_EQ(meta.error().message,
            paths.run_json() + ": not a stallscope run.json (no \"command\")");
  for (const char* field : {"command", "status", "start_mono_ns"}) {
    json j = FixtureRunJson();
    j.erase(field);
    std::ofstream(paths.run_json()) << j.dump();
    meta = ReadRunMeta(paths);
    ASSERT_FALSE(meta.ok()) << field;
    EXPECT_NE(meta.error().message.find(std::string("(no \"") + field + "\")"), std::string::npos)
        << meta.error().message;
  }
  json big = FixtureRunJson();
  big["env"] = {{"PAD", std::string(kMaxRunJsonBytes, 'x')}};
  std::ofstream(paths.run_json()) << big.dump();
  meta = ReadRunMeta(paths);
  ASSERT_FALSE(meta.ok());
  EXPECT_EQ(meta.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(meta.error().message.find("over the"), std::string::npos) << meta.error().message;
}

TEST(RunMetaFields, IssueReproductionNullPidInAWholeRunJson) {
  stallscope::testing::TempDir dir("run_meta");
  const RunPaths paths{dir.path().string()};
  std::ofstream(paths.run_json()) << R"({"name":"x","pid":null})";
  Result<RunMeta> meta = ReadRunMeta(paths);
  ASSERT_FALSE(meta.ok());
  EXPECT_EQ(meta.error().message,
            paths.run_json() + ": field \"pid\" is null (expected an integer)");
}

/// Each line of `file` (relative to the fixture) with one field mutated: LoadRun never throws,
/// and a line it cannot use is skipped with a warning naming the file.
/// The fixture's one phase meta file, "phases/<pid>.meta.jsonl" (its pid changes when the
/// fixture is recorded again).
std::string MetaFile() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kFixture / "phases", ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".meta.jsonl")) return "phases/" + name;
  }
  ADD_FAILURE() << "no phases/*.meta.jsonl in " << kFixture;
  return "phases/none.meta.jsonl";
}

/// Every field of the lines of `file` (objects by key, arrays by index; only the line numbers in
/// `pick`, 0-based, when given; SIZE_MAX: the last line) set to each of Mutations(): LoadRun
/// never throws, and its warnings stay one line each.
void MutateJsonLines(const std::string& file, std::vector<size_t> pick = {}) {
  const std::vector<std::string> lines = [&] {
    std::vector<std::string> out;
    std::ifstream in(kFixture / file);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }();
  ASSERT_FALSE(lines.empty()) << kFixture / file;
  for (size_t& n : pick) n = std::min(n, lines.size() - 1);
  for (size_t n = 0; n < lines.size(); ++n) {
    if (!pick.empty() && std::find(pick.begin(), pick.end(), n) == pick.end()) continue;
    const json line = json::parse(lines[n]);
    for (const auto& [key, original] : line.items()) {
      for (const json& value : Mutations()) {
        SCOPED_TRACE(file + " line " + std::to_string(n + 1) + ": " + key + " = " + value.dump());
        stallscope::testing::TempDir dir("run_lines");
        fs::copy(kFixture, dir.path(), fs::copy_options::recursive);
        json j = json::parse(lines[n]);
        if (j.is_array()) {
          j[std::stoul(key)] = value;
        } else {
          j[key] = value;
        }
        std::ofstream out(dir.path() / file, std::ios::trunc);
        for (size_t i = 0; i < lines.size(); ++i) out << (i == n ? j.dump() : lines[i]) << "\n";
        out.close();
        Result<RunData> run = LoadRun(dir.path().string());  // must not throw
        ASSERT_TRUE(run.ok()) << run.error().message;
        for (const auto& w : run->warnings) EXPECT_EQ(w.find('\n'), std::string::npos) << w;
      }
    }
  }
}

TEST(RunDirLines, EventNamesFieldMutationsNeverThrow) { MutateJsonLines("events.names.jsonl"); }

TEST(RunDirLines, PhaseMetaFieldMutationsNeverThrow) { MutateJsonLines(MetaFile()); }

// stacks.jsonl (issue 31): its header, process line, first frame, first stack, first sample
// (an array) and end line (the fixture's line numbers; a re-recorded fixture keeps this order).
TEST(RunDirLines, StackLogFieldMutationsNeverThrow) {
  MutateJsonLines("stacks.jsonl", {0, 1, 2, 14, 15, SIZE_MAX});
}

TEST(RunDirLines, AWrongTypedNameLineIsSkippedWithAWarning) {
  stallscope::testing::TempDir dir("run_lines");
  fs::copy(kFixture, dir.path(), fs::copy_options::recursive);
  std::ofstream(dir.path() / "events.names.jsonl", std::ios::app)
      << R"({"type":"name","pid":8317,"id":"9","name":"x"})"
      << "\n";
  Result<RunData> run = LoadRun(dir.path().string());
  ASSERT_TRUE(run.ok()) << run.error().message;
  bool warned = false;
  for (const auto& w : run->warnings)
    warned |= w == (dir.path() / "events.names.jsonl").string() + ": 1 malformed line(s) skipped";
  EXPECT_TRUE(warned);
}

TEST(ShellJoin, QuotesWhatAShellWouldSplitOrExpand) {
  EXPECT_EQ(ShellJoin({"python", "train.py", "--lr=0.1"}), "python train.py --lr=0.1");
  EXPECT_EQ(ShellJoin({"echo", "a b", "", "it's", "$HOME", "x;y"}),
            "echo 'a b' '' 'it'\\''s' '$HOME' 'x;y'");
  // Control characters stay as they are here: the renderers escape every job string.
  EXPECT_EQ(ShellJoin({"a\nb"}), "'a\nb'");
}

TEST(LastErrorLine, ThePythonExceptionElseTheLastNonBlankLine) {
  stallscope::testing::TempDir dir("last_line");
  const std::string path = (dir.path() / "job.log").string();
  EXPECT_EQ(LastErrorLine(path), "");  // missing
  auto write = [&](const std::string& text) { std::ofstream(path, std::ios::binary) << text; };
  write("");
  EXPECT_EQ(LastErrorLine(path), "");
  write("  \n\n");
  EXPECT_EQ(LastErrorLine(path), "");
  write(
      "Traceback (most recent call last):\n  File \"t.py\"\nModuleNotFoundError: No module named "
      "'torch'\n\n");
  EXPECT_EQ(LastErrorLine(path), "ModuleNotFoundError: No module named 'torch'");
  // The launcher's own last words come after the rank's exception.
  write(
      "  File \"t.py\", line 3\n    import numpy\nModuleNotFoundError: No module named 'numpy'\n"
      "launch.py: local rank 0 exited with 1; stopping the other ranks\n");
  EXPECT_EQ(LastErrorLine(path), "ModuleNotFoundError: No module named 'numpy'");
  write(
      "[rank1]: torch.OutOfMemoryError: CUDA out of memory.\ntorch.OutOfMemoryError: CUDA out "
      "of memory. Tried to allocate 2.00 GiB\nE1125 03:00 failed (exitcode: 1)\n");
  EXPECT_EQ(LastErrorLine(path),
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB");
  write("Error: nothing\nsee: the docs\n");  // "see" is no exception name
  EXPECT_EQ(LastErrorLine(path), "Error: nothing");
  write("one line, no newline");
  EXPECT_EQ(LastErrorLine(path), "one line, no newline");
  write("progress 1\rprogress 2\r\n");  // a progress bar's carriage returns
  EXPECT_EQ(LastErrorLine(path), "progress 2");
  // A 1 MB log: only its end is read; a long line is cut.
  write(std::string(1 << 20, 'x') + "\n   " + std::string(300, 'e') + "\n");
  EXPECT_EQ(LastErrorLine(path), std::string(197, 'e') + "...");
}

// Issue 27 B14: a FIFO in a run directory hung every reader (open(2) waits for a writer). A
// hang here is the bug (ctest's timeout). Each file is refused unopened, with a warning naming
// it; run.json, without which there is no run, is an error naming it.
TEST(RunDirFifos, NoFileOfARunDirectoryIsOpenedWhenItIsAFifo) {
  for (const std::string& name : {std::string("recording.jsonl"), std::string("events.bin"),
                                  std::string("events.names.jsonl"), std::string("python.jsonl"),
                                  std::string("stacks.jsonl"), MetaFile()}) {
    SCOPED_TRACE(name);
    stallscope::testing::TempDir dir("run_fifo");
    fs::copy(kFixture, dir.path(), fs::copy_options::recursive);
    const std::string path = (dir.path() / name).string();
    fs::remove(path);
    ASSERT_EQ(mkfifo(path.c_str(), 0644), 0);
    Result<RunData> run = LoadRun(dir.path().string());
    ASSERT_TRUE(run.ok()) << run.error().message;
    bool warned = false;
    for (const auto& w : run->warnings)
      warned |= w.starts_with(path + ": not a regular file (a FIFO)");
    EXPECT_TRUE(warned) << ::testing::PrintToString(run->warnings);
  }
  stallscope::testing::TempDir dir("run_fifo");
  fs::copy(kFixture, dir.path(), fs::copy_options::recursive);
  const std::string run_json = (dir.path() / "run.json").string();
  fs::remove(run_json);
  ASSERT_EQ(mkfifo(run_json.c_str(), 0644), 0);
  Result<RunData> run = LoadRun(dir.path().string());
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().message, run_json + ": not a regular file (a FIFO); not read");
  const std::string job_log = (dir.path() / "job.log").string();
  ASSERT_EQ(mkfifo(job_log.c_str(), 0644), 0);
  EXPECT_EQ(LastErrorLine(job_log), "");
}

// Issue 27 B16: a 50 MB line in python.jsonl cost ~4x its size. Over 16 MiB a line is skipped
// unread and counted; the notes around it are kept.
TEST(RunDirLines, AnOverlongPythonNotesLineIsSkippedAndCounted) {
  stallscope::testing::TempDir dir("run_lines");
  fs::copy(kFixture, dir.path(), fs::copy_options::recursive);
  const fs::path notes = dir.path() / kPythonNotesFile;
  {
    std::ofstream out(notes, std::ios::trunc);
    out << R"({"event":"start","pid":7,"python":"3.12.1"})"
        << "\n";
    out << R"({"event":"start","pid":8,"argv":[")" << std::string(kMaxJsonLineBytes, 'a')
        << "\"]}\n";
    out << R"({"event":"start","pid":9,"python":"3.11.0"})"
        << "\n";
  }
  const PythonNotes read = ReadPythonNotes(dir.path().string());
  ASSERT_EQ(read.processes.size(), 2u);
  EXPECT_EQ(read.processes[1].version, "3.11.0");
  EXPECT_EQ(read.overlong_lines, 1);
  EXPECT_EQ(read.malformed_lines, 0);
  Result<RunData> run = LoadRun(dir.path().string());
  ASSERT_TRUE(run.ok()) << run.error().message;
  bool warned = false;
  for (const auto& w : run->warnings)
    warned |= w == notes.string() + ": 1 line over the 16 MiB line limit skipped";
  EXPECT_TRUE(warned) << ::testing::PrintToString(run->warnings);
}

}  // namespace
}  // namespace stallscope::rundir
