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
/// the process sees another tree: another root directory, or another mount namespace (a
/// container, `unshare -m`, whose mounts may hide ours at the same path). Bounded whatever the
/// frames name: files past kMaxBytes of text held or kMaxFiles give no text. Not thread-safe.
class SourceLines {
 public:
  /// The text held (a frame's co_filename comes from the job, which may name any file).
  static constexpr size_t kMaxBytes = size_t{16} << 20;
  static constexpr size_t kMaxFiles = 4096;

  /// Line `line` (1-based) of `file` as process `pid` sees it, trimmed; empty when unknown
  /// ("<frozen ...>", "<string>", a missing, unreadable or over-large file, no such line).
  [[nodiscard]] std::optional<std::string> Line(pid_t pid, const std::string& file, int line);

 private:
  struct Source {
    std::string text;
    std::vector<size_t> starts;  ///< offset of each line
  };
  bool SameView(pid_t pid);
  std::string OpenPath(pid_t pid, const std::string& file);
  const Source& Read(const std::string& path);

  std::map<std::string, Source> files_;
  std::map<pid_t, bool> same_view_;
  size_t bytes_ = 0;  ///< text held in files_
};

}  // namespace stallscope::stacks
