#pragma once
// The source lines of the files Python frames name, as the process that ran them sees the files:
// what `run --stacks` stores with each new frame and what `dump` prints under each frame.

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace stallscope::stacks {

/// Each file read once (base's ReadSmallFile: regular files only, never a FIFO, at most
/// 8 MiB). A relative name is read in /proc/PID/cwd; an absolute one through /proc/PID/root when
/// the process has another root (a container). Not thread-safe.
class SourceLines {
 public:
  /// Line `line` (1-based) of `file` as process `pid` sees it, trimmed; empty when unknown
  /// ("<frozen ...>", "<string>", a missing, unreadable or over-large file, no such line).
  [[nodiscard]] std::optional<std::string> Line(pid_t pid, const std::string& file, int line);

 private:
  struct Source {
    std::string text;
    std::vector<size_t> starts;  ///< offset of each line
  };
  bool SameRoot(pid_t pid);
  std::string OpenPath(pid_t pid, const std::string& file);
  const Source& Read(const std::string& path);

  std::map<std::string, Source> files_;
  std::map<pid_t, bool> same_root_;
};

}  // namespace stallscope::stacks
