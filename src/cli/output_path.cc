#include "cli/output_path.h"

#include <sys/stat.h>

#include <fmt/format.h>

#include "base/file_read.h"
#include "base/units.h"

namespace stallscope::cli {

std::optional<std::string> RefuseOutputPath(std::string_view flag, const std::string& path,
                                            bool force, OutputWrite how,
                                            std::span<const std::string> inputs) {
  struct stat st {};
  struct stat node {};
  if (path == "-" || ::lstat(path.c_str(), &node) != 0) return std::nullopt;  // stdout, new file
  const bool followed = ::stat(path.c_str(), &st) == 0;  // false: a dangling symbolic link
  for (const std::string& in : inputs) {
    struct stat other {};
    if (followed && ::stat(in.c_str(), &other) == 0 && other.st_dev == st.st_dev &&
        other.st_ino == st.st_ino)
      return fmt::format("{} {}: is the input {}; choose another file", flag, path, in);
  }
  if (followed && S_ISDIR(st.st_mode)) return fmt::format("{} {}: is a directory", flag, path);
  if (how == OutputWrite::kReplace && !S_ISREG(node.st_mode)) {
    // The write is a new file renamed over `path`: it would replace the node itself.
    return fmt::format("{} {}: is {}, not a regular file; it is never replaced (give a file path)",
                       flag, path, FileKind(node.st_mode));
  }
  if (!followed || force || !S_ISREG(st.st_mode) || st.st_size == 0) return std::nullopt;
  return fmt::format("{} {}: exists ({}); give --force to replace it, or another {}", flag, path,
                     FormatBytes(static_cast<double>(st.st_size)), flag);
}

}  // namespace stallscope::cli
