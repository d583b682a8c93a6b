#pragma once

// Linux file and directory reading for the samplers: open/read/getdents64 into buffers that are
// kept between calls, so a sample does not allocate once the buffers have grown.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stallscope::host {

/// Owns a file descriptor; closes it on destruction. Move-only.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();

 private:
  int fd_ = -1;
};

/// Opens a directory (relative to `dir_fd`, or absolute with AT_FDCWD). Invalid on error, with
/// errno set.
ScopedFd OpenDir(int dir_fd, const char* path);

/// Reads whole small files (/proc, cgroupfs, sysfs) into one reused buffer. Not thread-safe.
class FileReader {
 public:
  /// Reads `path`, relative to `dir_fd` (or absolute with AT_FDCWD). Returns 0 or the errno of
  /// the failed open/read (ENOENT, ESRCH when the process exited mid-read, EACCES, ...).
  int ReadAt(int dir_fd, const char* path);
  /// ReadAt that also keeps the file open in `*keep` (when not null) after a successful read.
  int ReadAt(int dir_fd, const char* path, ScopedFd* keep);
  /// Reads the file open at `fd` again from offset 0 (pread): a /proc file kept open between
  /// samples makes its content anew then. Returns 0 or the errno (ESRCH: the process has
  /// exited, and a pid reused since is another process). A read shorter than asked ends the
  /// file, as it does for seq_file-backed /proc files and regular files; do not use on pipes.
  int ReadFd(int fd);
  /// Reads `dir` + `file` (e.g. "/proc" + "/stat"), building the path in a reused buffer.
  int ReadPath(std::string_view dir, std::string_view file);
  /// The bytes of the last successful read; empty after a failed one.
  std::string_view data() const { return std::string_view(buf_.data(), size_); }

 private:
  int ReadOpen(int fd);  // read() to EOF into buf_

  std::string buf_;
  size_t size_ = 0;
  std::string path_;
};

/// Lists the entries of a directory whose names are decimal numbers (pids, tids), ascending.
/// Not thread-safe.
class NumericDirLister {
 public:
  /// Lists `path` relative to `dir_fd` into `out` (cleared first). Returns 0 or the errno.
  int List(int dir_fd, const char* path, std::vector<int32_t>& out);

 private:
  std::vector<char> buf_;
};

/// Formats "<pid>/<file>" (e.g. "1234/stat") into `out`, NUL-terminated; for openat on /proc.
/// `out` must hold at least 64 chars; `file` must be shorter than 40.
void FormatPidPath(char* out, int32_t pid, std::string_view file);

/// Formats "<pid>/task/<tid>/<file>" (e.g. "1234/task/1240/children") into `out`,
/// NUL-terminated. `out` must hold at least 96 chars; `file` must be shorter than 40.
void FormatTaskPath(char* out, int32_t pid, int32_t tid, std::string_view file);

}  // namespace stallscope::host
