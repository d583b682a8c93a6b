// `stallscope`, the command users run. `record` runs in this process, which links none of the
// readers (no simdjson, so no libstdc++.so) and no CLI11 (its <iostream> would initialise a C++
// locale): its footprint is the sampler's. Everything else, the other commands, --help,
// --version, and any `record` line that ParseRecordArgs leaves to CLI11, is stallscope-full
// (src/main.cc), the same CLI with every command: exec'd from beside this binary with the same
// arguments, so the process, its PID and its exit code are the command's own (README.md "Two
// binaries").
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "cli/record_args.h"

namespace {

/// <directory of this executable>/stallscope-full; empty when /proc/self/exe cannot be read.
std::string FullBinaryPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf);
  if (n <= 0 || static_cast<size_t>(n) == sizeof buf) return {};
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "stallscope-full";
}

}  // namespace

int main(int argc, char** argv) {
  if (auto record = stallscope::cli::ParseRecordArgs(argc, argv)) {
    return stallscope::cli::RunRecord(*record);
  }
  const std::string full = FullBinaryPath();
  if (full.empty()) {
    std::fprintf(stderr, "stallscope: cannot find stallscope-full: /proc/self/exe: %s\n",
                 std::strerror(errno));
    return 127;
  }
  execv(full.c_str(), argv);
  std::fprintf(stderr,
               "stallscope: cannot run %s: %s (an incomplete installation: reinstall stallscope)\n",
               full.c_str(), std::strerror(errno));
  return 127;
}
