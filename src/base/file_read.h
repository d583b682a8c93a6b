#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace stallscope {

/// The longest line the run directory's JSON Lines readers accept (python.jsonl,
/// events.names.jsonl, phases/*.meta.jsonl): the cap recording.jsonl has (sample::kMaxLineBytes).
/// Their lines are under 1 KiB; a longer one is skipped unread and counted (issue 27 B16), so a
/// reader holds at most this much of one line whatever the file holds.
inline constexpr size_t kMaxJsonLineBytes = size_t{16} << 20;

/// What a node of `mode` (st_mode) is, for a message: "a FIFO", "a character device", "a
/// symbolic link" (from lstat), "a directory", "a regular file", else "a special file".
[[nodiscard]] std::string_view FileKind(mode_t mode);

/// A regular file open for reading; the descriptor is closed on destruction. Move-only.
class ReadOnlyFile {
 public:
  /// Opens `path` read-only when it is a regular file (or a symbolic link to one), and never
  /// blocks doing so (issue 27 B14): open(2) with O_NONBLOCK (a plain open of a FIFO waits for a
  /// writer forever), then fstat(2) on the descriptor (no race with a rename in between). The
  /// descriptor is blocking again afterwards. Errors name the file: kNotFound (ENOENT, ENOTDIR),
  /// kPermission (EACCES, EPERM), kUnsupported for a FIFO, socket, device or directory
  /// ("{path}: not a regular file (a FIFO); not read"), kIo otherwise.
  [[nodiscard]] static Result<ReadOnlyFile> Open(const std::string& path);
  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&&) = delete;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t size_bytes() const { return size_bytes_; }  ///< as fstat(2) saw it at Open

  /// Reads up to `size` bytes at the file position, retrying EINTR; 0 only at the end of the
  /// file. A read error is kIo naming the file.
  [[nodiscard]] Result<size_t> Read(char* data, size_t size);

 private:
  ReadOnlyFile(int fd, std::string path, uint64_t size_bytes)
      : fd_(fd), path_(std::move(path)), size_bytes_(size_bytes) {}
  int fd_ = -1;
  std::string path_;
  uint64_t size_bytes_ = 0;
};

/// All of regular file `path` (read to its end: /proc files, which stat as 0 bytes, too), when it
/// holds at most `max_bytes`; a bigger one is kUnsupported ("{path}: N bytes, over the M byte
/// limit; not read"). Other errors as ReadOnlyFile::Open.
[[nodiscard]] Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes);

/// One line of ForEachLine.
struct TextLine {
  std::string_view text;  ///< without its '\n' (may be empty); valid during the callback only
  bool complete = true;   ///< ended with '\n' (false: the file ends mid-line, a torn write)
};

/// What ForEachLine read.
struct LineCounts {
  int64_t lines = 0;     ///< handed to the callback
  int64_t overlong = 0;  ///< longer than the cap: skipped unread, never handed on
};

/// Calls `on_line` with each line of regular file `path`, in order; a line longer than
/// `max_line_bytes` is skipped and counted instead. Memory: a 64 KiB read chunk plus the longest
/// line handed on, so at most max_line_bytes more, whatever the file holds. Errors as
/// ReadOnlyFile::Open (a missing file is kNotFound: callers decide whether that is normal), or
/// kIo naming the file when a read fails.
[[nodiscard]] Result<LineCounts> ForEachLine(const std::string& path,
                                             const std::function<void(const TextLine&)>& on_line,
                                             size_t max_line_bytes = kMaxJsonLineBytes);

/// The one warning for lines a reader skipped for their length: "{path}: 2 lines over the
/// 16 MiB line limit skipped".
[[nodiscard]] std::string OverlongLinesWarning(std::string_view path, int64_t count,
                                               size_t max_line_bytes = kMaxJsonLineBytes);

}  // namespace stallscope
