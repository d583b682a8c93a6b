// Recording reader (src/sample/recording_read.cc): the input is a recording file as-is. A JSON
// Lines recording is parsed; a CSV one (record --csv) is recognised and refused with its message;
// seed 002's monitor files (objects per line or one JSON array, whole or cut off) are read.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz_support.h"
#include "sample/recording.h"

namespace {

namespace fs = std::filesystem;
using stallscope::fuzz::ReadPrefix;
using stallscope::fuzz::WriteSeed;

// The recordings of tests/data/runs (first 4 KiB: a header and some samples), a CSV recording
// written from each, and seed 002's monitor files (tests/data/seed: objects per line, one JSON
// array, and that array cut off mid-object).
void WriteSeeds(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(STALLSCOPE_SOURCE_DIR "/tests/data/runs", ec)) {
    fs::path jsonl = e.path() / "recording.jsonl";
    if (!fs::exists(jsonl, ec)) continue;
    std::string name = e.path().filename().string();
    WriteSeed(dir, name + ".jsonl", ReadPrefix(jsonl, 4096));
    auto recording = stallscope::sample::ReadRecording(jsonl.string());
    if (!recording.ok()) continue;
    std::string csv;
    stallscope::sample::AppendCsvHeader(recording->header, csv);
    for (size_t i = 0; i < recording->samples.size() && i < 4; ++i)
      stallscope::sample::AppendCsvRow(recording->header, recording->samples[i], csv);
    WriteSeed(dir, name + ".csv", csv);
  }
  for (const auto& e : fs::directory_iterator(STALLSCOPE_SOURCE_DIR "/tests/data/seed", ec)) {
    const std::string text = ReadPrefix(e.path(), 16384);
    WriteSeed(dir, "seed-" + e.path().filename().string(), text);
    if (!text.empty() && text[0] == '[')
      WriteSeed(dir, "seed-cut-" + e.path().filename().string(),
                text.substr(0, text.size() * 2 / 3));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return stallscope::fuzz::SeedOrFuzz(WriteSeeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = stallscope::fuzz::ScratchDir() + "/recording.jsonl";
  stallscope::fuzz::WriteFile(path, {reinterpret_cast<const char*>(data), size});
  (void)stallscope::sample::ReadRecording(path);
  return 0;
}
