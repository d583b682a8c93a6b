#include "cli/output_path.h"

#include <sys/stat.h>

#include <fmt/format.h>

#include "base/units.h"

namespace stallscope::cli {

std::optional<std::string> RefuseOutputPath(std::string_view flag, const std::string& path,
                                            bool force, std::span<const std::string> inputs) {
  struct stat st {};
  if (path == "-" || ::stat(path.c_str(), &st) != 0) return std::nullopt;  // stdout, a new file
  for (const std::string& in : inputs) {
    struct stat other {};
    if (::stat(in.c_str(), &other) == 0 && other.st_dev == st.st_dev && other.st_ino == st.st_ino)
      return fmt::format("{} {}: is the input {}; choose another file", flag, path, in);
  }
  if (S_ISDIR(st.st_mode)) return fmt::format("{} {}: is a directory", flag, path);
  if (force || !S_ISREG(st.st_mode) || st.st_size == 0) return std::nullopt;
  return fmt::format("{} {}: exists ({}); give --force to replace it, or another {}", flag, path,
                     FormatBytes(static_cast<double>(st.st_size)), flag);
}

}  // namespace stallscope::cli
