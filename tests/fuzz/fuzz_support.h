#pragma once
// Shared by the libFuzzer harnesses (tests/fuzz/README.md): a per-process scratch directory for
// readers that take paths, and the seed-corpus writer. Test code only, never linked into the tool.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace stallscope::fuzz {

/// A directory of this process's own under $TMPDIR (else /dev/shm, else /tmp), removed at exit:
/// harnesses run in parallel (ctest -j, libFuzzer -jobs) and must not share files.
inline const std::string& ScratchDir() {
  // Never destroyed: the atexit handler below runs after static destructors registered later.
  static const std::string& dir = *new std::string([] {
    std::string base = "/tmp";
    if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') {
      base = tmp;
    } else if (std::filesystem::is_directory("/dev/shm")) {
      base = "/dev/shm";
    }
    std::string path = base + "/stallscope-fuzz-" + std::to_string(getpid());
    std::filesystem::create_directories(path);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(ScratchDir(), ec);
    });
    return path;
  }());
  return dir;
}

/// `input` cut at each `separator` into at most `count` sections, the last taking the rest:
/// how the run-directory harnesses split one input into the files of a run directory (fewer
/// sections when the input holds fewer separators).
inline std::vector<std::string_view> Sections(std::string_view input, std::string_view separator,
                                              size_t count) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < count) {
    const size_t end = input.find(separator);
    if (end == std::string_view::npos) break;
    out.push_back(input.substr(0, end));
    input.remove_prefix(end + separator.size());
  }
  if (count > 0) out.push_back(input);
  return out;
}

/// Replaces `path` with `bytes`.
inline void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// The first `max_bytes` of `path` ("" when unreadable): seeds stay small, so that the fuzzer
/// mutates them fast.
inline std::string ReadPrefix(const std::filesystem::path& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(max_bytes, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(max_bytes));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

/// The directory named by $STALLSCOPE_FUZZ_SEEDS, else "". A harness started with it writes its
/// seed corpus there (from tests/data, STALLSCOPE_SOURCE_DIR) and exits: run_fuzz.sh does this
/// before each run, so the corpus is built fresh from the fixtures in the build directory.
inline std::string SeedDir() {
  const char* dir = std::getenv("STALLSCOPE_FUZZ_SEEDS");
  return dir == nullptr ? std::string() : std::string(dir);
}

/// Writes one seed, named `name` (unique within the harness), into `dir`.
inline void WriteSeed(const std::string& dir, const std::string& name, std::string_view bytes) {
  std::filesystem::create_directories(dir);
  WriteFile(dir + "/" + name, bytes);
}

/// The body of every harness's LLVMFuzzerInitialize: with $STALLSCOPE_FUZZ_SEEDS set, writes the
/// harness's seeds there with `write_seeds` and exits; else returns 0 and fuzzing starts.
inline int SeedOrFuzz(void (*write_seeds)(const std::string& dir)) {
  if (std::string dir = SeedDir(); !dir.empty()) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

}  // namespace stallscope::fuzz
