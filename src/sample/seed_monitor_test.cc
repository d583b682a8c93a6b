// Seed 002's GPU monitor files read as recordings (fixtures in tests/data/seed, written from the
// seed's examples).
#include "sample/seed_monitor.h"

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sample/recording.h"
#include "temp_dir.h"

namespace stallscope::sample {
namespace {

const std::string kSeed = STALLSCOPE_SOURCE_DIR "/tests/data/seed/";

// Found by the recording fuzzer: year 5025 overflowed int64 nanoseconds (UBSan).
TEST(ParseIsoTimestampNs, YearsPastInt64NanosecondsAreRefused) {
  EXPECT_EQ(ParseIsoTimestampNs("5025-01-15T10:30:00"), std::nullopt);
  EXPECT_EQ(ParseIsoTimestampNs("9999-12-31T23:59:59.999999999"), std::nullopt);
  auto last = ParseIsoTimestampNs("2261-12-31T23:59:59.999999999-99:59");
  ASSERT_TRUE(last.has_value());
  EXPECT_GT(*last, int64_t{9'000'000'000} * 1'000'000'000);
}

TEST(ParseIsoTimestampNs, PythonIsoformatForms) {
  EXPECT_EQ(ParseIsoTimestampNs("1970-01-01T00:00:00"), 0);
  EXPECT_EQ(ParseIsoTimestampNs("2025-01-15T10:30:00"), int64_t{1736937000} * 1'000'000'000);
  EXPECT_EQ(ParseIsoTimestampNs("2025-01-15 10:30:00.5"),
            int64_t{1736937000} * 1'000'000'000 + 500'000'000);
  EXPECT_EQ(ParseIsoTimestampNs("2025-01-15T10:30:00.123456Z"),
            int64_t{1736937000} * 1'000'000'000 + 123'456'000);
  EXPECT_EQ(ParseIsoTimestampNs("2025-01-15T11:30:00+01:00"), int64_t{1736937000} * 1'000'000'000);
  EXPECT_EQ(ParseIsoTimestampNs("2025-01-15T09:30:00-01:00"), int64_t{1736937000} * 1'000'000'000);
  for (const char* bad : {"", "2025-01-15", "2025-13-15T10:30:00", "2025-01-15T10:30:00x",
                          "2025-01-15T10:30:00+0100", "yesterday"}) {
    EXPECT_FALSE(ParseIsoTimestampNs(bad).has_value()) << bad;
  }
}

TEST(SeedRecording, LegacyLinesKeepMissingKeysAbsent) {
  auto rec = ReadRecording(kSeed + "legacy.jsonl");
  ASSERT_TRUE(rec.ok()) << rec.error().message;
  ASSERT_EQ(rec->header.gpus.size(), 1u);
  EXPECT_EQ(rec->header.gpus[0].name, "NVIDIA A10G");
  EXPECT_EQ(rec->header.gpus[0].mem_total_bytes, uint64_t{24576} << 20);
  ASSERT_EQ(rec->samples.size(), 6u);
  const gpu::GpuSample& first = rec->samples[0].gpus[0];
  EXPECT_EQ(first.util_gpu_pct, 85u);
  EXPECT_EQ(first.mem_used_bytes, uint64_t{12800} << 20);
  EXPECT_EQ(first.power_mw, 150'000u);
  EXPECT_FALSE(rec->samples[3].gpus[0].power_mw.has_value());         // no "power" key
  EXPECT_FALSE(rec->samples[4].gpus[0].mem_total_bytes.has_value());  // no "memory_total"
  EXPECT_EQ(rec->samples[5].wall_ns - rec->samples[0].wall_ns, int64_t{10} * 1'000'000'000);
  EXPECT_EQ(rec->samples[5].mono_ns, int64_t{10} * 1'000'000'000);
  ASSERT_FALSE(rec->warnings.empty());
  EXPECT_NE(rec->warnings[0].find("read as seed 002 legacy single-GPU objects (one object per "
                                  "line)"),
            std::string::npos)
      << rec->warnings[0];
}

TEST(SeedRecording, MultiGpuLinesAndArrayGiveTheSameGpus) {
  auto lines = ReadRecording(kSeed + "multi_gpu.jsonl");
  auto array = ReadRecording(kSeed + "multi_gpu_array.json");
  ASSERT_TRUE(lines.ok()) << lines.error().message;
  ASSERT_TRUE(array.ok()) << array.error().message;
  EXPECT_EQ(lines->samples.size(), 6u);
  EXPECT_EQ(array->samples.size(), 4u);
  for (const Recording* r : {&*lines, &*array}) {
    ASSERT_EQ(r->header.gpus.size(), 4u);
    EXPECT_EQ(r->header.gpus[3].index, 3u);
    EXPECT_EQ(r->samples[0].gpus[3].util_gpu_pct, 40u);
    EXPECT_EQ(r->samples[0].gpus[3].temperature_c, 73u);
    EXPECT_EQ(r->samples[1].gpus[0].util_gpu_pct, 88u);
  }
  EXPECT_NE(array->warnings[0].find("multi-GPU objects (a JSON array)"), std::string::npos);
}

TEST(SeedRecording, MixedFormsAndBadLinesAreCountedNotFatal) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "mixed.jsonl").string();
  std::ofstream(path)
      << R"({"timestamp": "2025-01-15T10:30:00", "gpu_index": 0, "utilization": 50})"
      << "\n"
      << R"({"timestamp": "2025-01-15T10:30:01", "multi_gpu_data": []})"
      << "\n"
      << R"({"timestamp": "not a time", "gpu_index": 0})"
      << "\n"
      << R"({"timestamp": "2025-01-15T10:30:02", "gpu_index": 0, "utilizat)";
  auto rec = ReadRecording(path);
  ASSERT_TRUE(rec.ok()) << rec.error().message;
  EXPECT_EQ(rec->samples.size(), 1u);
  EXPECT_EQ(rec->malformed_lines, 2);
  EXPECT_TRUE(rec->truncated_last_line);
  EXPECT_FALSE(rec->samples[0].gpus[0].mem_used_bytes.has_value());
  EXPECT_EQ(rec->header.gpus[0].name, "");
}

// Found by the recording fuzzer (UBSan): numbers past what a field holds were cast anyway. They
// are absent now, and a GPU index past uint32_t matches no GPU.
TEST(SeedRecording, NumbersPastTheirFieldAreAbsent) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "huge.jsonl").string();
  std::ofstream(path)
      << R"({"timestamp": "2025-01-15T10:30:00", "gpu_index": 0, "utilization": 50})"
      << "\n"
      << R"({"timestamp": "2025-01-15T10:30:01", "gpu_index": 0, "utilization": 6e12, )"
      << R"("power": 1e300, "memory_used": 1e30, "temperature": 5e9})"
      << "\n"
      << R"({"timestamp": "2025-01-15T10:30:02", "gpu_index": 6148450000000, "utilization": 7})"
      << "\n";
  auto rec = ReadRecording(path);
  ASSERT_TRUE(rec.ok()) << rec.error().message;
  ASSERT_EQ(rec->samples.size(), 3u);
  const gpu::GpuSample& huge = rec->samples[1].gpus[0];
  EXPECT_FALSE(huge.lost);
  EXPECT_FALSE(huge.util_gpu_pct.has_value());
  EXPECT_FALSE(huge.power_mw.has_value());
  EXPECT_FALSE(huge.mem_used_bytes.has_value());
  EXPECT_FALSE(huge.temperature_c.has_value());
  EXPECT_TRUE(rec->samples[2].gpus[0].lost);  // names no GPU of the file
}

TEST(SeedRecording, AnArrayOfSomethingElseIsNotARecording) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "other.json").string();
  std::ofstream(path) << "  [{\"a\": 1}]\n";
  auto rec = ReadRecording(path);
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.error().message,
            path +
                ": not a stallscope recording (a JSON array, but its first object is not one "
                "of seed 002's GPU monitor objects)");
  std::ofstream(path) << "[{\"timestamp\": \"2025-01-15T10:30:00\", \"gpu_ind";
  auto torn = ReadRecording(path);
  ASSERT_FALSE(torn.ok());
  EXPECT_EQ(torn.error().message, path + ": not a stallscope recording (invalid JSON array)");
}

// A monitor killed mid-write leaves an array without its end: every whole object is read, with a
// warning, at any byte it was cut.
TEST(SeedRecording, AnArrayCutAnywhereKeepsItsWholeObjects) {
  std::ifstream in(kSeed + "multi_gpu_array.json", std::ios::binary);
  const std::string full((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto whole = ReadRecording(kSeed + "multi_gpu_array.json");
  ASSERT_TRUE(whole.ok());
  // Where each top-level object ends (depth back to 1 inside the array).
  std::vector<size_t> object_ends;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < full.size(); ++i) {
    const char c = full[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 1) {
      object_ends.push_back(i + 1);
    }
  }
  ASSERT_EQ(object_ends.size(), whole->samples.size());
  testing::TempDir dir;
  const std::string path = (dir.path() / "cut.json").string();
  const size_t last = full.rfind(']');
  for (size_t cut = full.find('[') + 1; cut < last; ++cut) {
    std::ofstream(path, std::ios::trunc) << full.substr(0, cut);
    size_t complete = 0;
    for (size_t e : object_ends) complete += e <= cut;
    auto rec = ReadRecording(path);
    if (complete == 0) {
      EXPECT_FALSE(rec.ok()) << cut;
      continue;
    }
    ASSERT_TRUE(rec.ok()) << cut << ": " << rec.error().message;
    EXPECT_EQ(rec->samples.size(), complete) << cut;
    bool warned = false;
    for (const auto& w : rec->warnings) warned |= w.find("breaks off after") != std::string::npos;
    EXPECT_TRUE(warned) << cut;
  }
}

TEST(LooksLikeSeedMonitorFile, SeedFilesYesTracesNo) {
  for (const char* f : {"legacy.jsonl", "multi_gpu.jsonl", "multi_gpu_array.json"}) {
    EXPECT_TRUE(LooksLikeSeedMonitorFile(kSeed + f)) << f;
  }
  EXPECT_FALSE(
      LooksLikeSeedMonitorFile(STALLSCOPE_SOURCE_DIR "/tests/data/traces/steps_kineto_gpu.json"));
  EXPECT_FALSE(LooksLikeSeedMonitorFile(kSeed + "no such file"));
}

}  // namespace
}  // namespace stallscope::sample
