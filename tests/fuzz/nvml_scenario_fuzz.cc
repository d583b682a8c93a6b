// The fake NVML's scenario parser (tests/fakes/nvml/scenario.h), in memory, and the load
// pattern functions on what it accepts.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "scenario.h"

namespace {

namespace fs = std::filesystem;

// tests/data/nvml/*.json as they are (all small).
void WriteSeeds(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(STALLSCOPE_SOURCE_DIR "/tests/data/nvml", ec)) {
    stallscope::fuzz::WriteSeed(dir, e.path().filename().string(),
                                stallscope::fuzz::ReadPrefix(e.path(), 16 * 1024));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return stallscope::fuzz::SeedOrFuzz(WriteSeeds);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto scenario = stallscope::fake_nvml::ParseScenario({reinterpret_cast<const char*>(data), size});
  if (!scenario.ok()) return 0;
  for (const auto& gpu : scenario->gpus) {
    for (double t : {0.0, 0.5, 1.0, 7.25, 1e6}) {
      (void)stallscope::fake_nvml::UtilAt(gpu.pattern, t);
      (void)stallscope::fake_nvml::UtilIntegral(gpu.pattern, t);
    }
  }
  return 0;
}
