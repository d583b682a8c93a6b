// The whole analysis of a run directory, as `diagnose` does it: diagnose::LoadAndAnalyzeRun
// (run.json, recording.jsonl, events.bin, events.names.jsonl, phases/ rings and meta files,
// python.jsonl; then the phases, the life of the run, the info records, the facts, every rule)
// and the text and JSON renderers. Where run_dir_fuzz checks the readers alone, this reaches
// what they hand on: a step series, notes and info records no fixture has. The input is up to
// seven sections separated by kSeparator:
//   run.json | recording.jsonl | events.bin | events.names.jsonl | phases/7.meta.jsonl |
//   python.jsonl | phases/7.ring
// written as files (a missing section leaves its file out); the ring section is written as-is.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "diagnose/run_analysis.h"
#include "fuzz_support.h"
#include "report/run_render.h"

namespace {

namespace fs = std::filesystem;
using stallscope::fuzz::ReadPrefix;

constexpr std::string_view kSeparator = "\n@@\n";
constexpr const char* kFiles[] = {"run.json",           "recording.jsonl",     "events.bin",
                                  "events.names.jsonl", "phases/7.meta.jsonl", "python.jsonl",
                                  "phases/7.ring"};

/// Each tests/data/runs/<run>, its files' first bytes (the records that give it steps).
void WriteSeeds(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(STALLSCOPE_SOURCE_DIR "/tests/data/runs", ec)) {
    std::string meta;
    for (const auto& m : fs::directory_iterator(e.path() / "phases", ec)) {
      if (m.path().extension() == ".jsonl") meta = ReadPrefix(m.path(), 2048);
    }
    std::string seed;
    seed += ReadPrefix(e.path() / "run.json", 4096);
    seed += kSeparator;
    seed += ReadPrefix(e.path() / "recording.jsonl", 6144);
    seed += kSeparator;
    seed += ReadPrefix(e.path() / "events.bin", 8192);
    seed += kSeparator;
    seed += ReadPrefix(e.path() / "events.names.jsonl", 2048);
    seed += kSeparator;
    seed += meta;
    seed += kSeparator;
    seed += ReadPrefix(e.path() / "python.jsonl", 2048);
    stallscope::fuzz::WriteSeed(dir, e.path().filename().string(), seed);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return stallscope::fuzz::SeedOrFuzz(WriteSeeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string run_dir = stallscope::fuzz::ScratchDir() + "/run";
  std::error_code ec;
  fs::remove_all(run_dir, ec);
  fs::create_directories(run_dir + "/phases", ec);
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto sections = stallscope::fuzz::Sections(input, kSeparator, std::size(kFiles));
  for (size_t i = 0; i < sections.size(); ++i)
    stallscope::fuzz::WriteFile(run_dir + "/" + kFiles[i], sections[i]);
  auto run = stallscope::diagnose::LoadAndAnalyzeRun(run_dir);
  if (run.ok()) {
    (void)stallscope::report::RenderRunReportText(run->analysis.report);
    (void)stallscope::report::RenderRunReportJson(run->analysis.report);
  }
  return 0;
}
