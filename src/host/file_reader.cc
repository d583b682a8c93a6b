#include "host/file_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <utility>

namespace stallscope::host {
namespace {

// Large enough for /proc/PID/status and /proc/stat of a few hundred CPUs in one read(); a
// bigger file doubles the buffer once and it stays that size.
constexpr size_t kInitialReadBuffer = 16 * 1024;
constexpr size_t kDirentBuffer = 32 * 1024;

}  // namespace

ScopedFd& ScopedFd::operator=(ScopedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) close(fd_);
}

int ScopedFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

ScopedFd OpenDir(int dir_fd, const char* path) {
  return ScopedFd(openat(dir_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

int FileReader::ReadAt(int dir_fd, const char* path) { return ReadAt(dir_fd, path, nullptr); }

int FileReader::ReadAt(int dir_fd, const char* path, ScopedFd* keep) {
  size_ = 0;
  ScopedFd fd(openat(dir_fd, path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errno;
  const int err = ReadOpen(fd.get());
  if (err == 0 && keep != nullptr) *keep = std::move(fd);
  return err;
}

int FileReader::ReadFd(int fd) {
  size_ = 0;
  if (buf_.empty()) buf_.resize(kInitialReadBuffer);
  for (;;) {
    if (size_ == buf_.size()) buf_.resize(buf_.size() * 2);
    const size_t want = buf_.size() - size_;
    const ssize_t n = pread(fd, buf_.data() + size_, want, static_cast<off_t>(size_));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      size_ = 0;
      return err;
    }
    size_ += static_cast<size_t>(n);
    // seq_file fills the whole buffer unless the file ended: no second call to see EOF.
    if (static_cast<size_t>(n) < want) return 0;
  }
}

int FileReader::ReadOpen(int fd) {
  if (buf_.empty()) buf_.resize(kInitialReadBuffer);
  // /proc files report size 0: read until EOF.
  for (;;) {
    if (size_ == buf_.size()) buf_.resize(buf_.size() * 2);
    const ssize_t n = read(fd, buf_.data() + size_, buf_.size() - size_);
    if (n == 0) return 0;
    if (n > 0) {
      size_ += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    const int err = errno;
    size_ = 0;
    return err;
  }
}

int FileReader::ReadPath(std::string_view dir, std::string_view file) {
  path_.assign(dir);
  path_.append(file);
  return ReadAt(AT_FDCWD, path_.c_str());
}

int NumericDirLister::List(int dir_fd, const char* path, std::vector<int32_t>& out) {
  out.clear();
  ScopedFd fd = OpenDir(dir_fd, path);
  if (!fd.valid()) return errno;
  if (buf_.empty()) buf_.resize(kDirentBuffer);
  // getdents64 instead of readdir: opendir allocates its buffer on every call.
  for (;;) {
    const ssize_t n = getdents64(fd.get(), buf_.data(), buf_.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    for (size_t pos = 0; pos < static_cast<size_t>(n);) {
      const char* rec = buf_.data() + pos;
      unsigned short reclen = 0;
      std::memcpy(&reclen, rec + offsetof(struct dirent64, d_reclen), sizeof(reclen));
      const char* name = rec + offsetof(struct dirent64, d_name);
      int32_t id = 0;
      const char* end = name + std::strlen(name);
      auto [ptr, ec] = std::from_chars(name, end, id);
      if (ec == std::errc() && ptr == end && ptr != name) out.push_back(id);
      if (reclen == 0) break;  // never from the kernel; guards an endless loop
      pos += reclen;
    }
  }
  std::sort(out.begin(), out.end());
  return 0;
}

void FormatPidPath(char* out, int32_t pid, std::string_view file) {
  auto [ptr, ec] = std::to_chars(out, out + 16, pid);
  (void)ec;  // an int32 always fits in 16 chars
  *ptr++ = '/';
  const size_t n = std::min<size_t>(file.size(), 40);
  std::memcpy(ptr, file.data(), n);
  ptr[n] = '\0';
}

void FormatTaskPath(char* out, int32_t pid, int32_t tid, std::string_view file) {
  // "<pid>/task/" is at most 11 + 6 chars; FormatPidPath then adds at most 12 + 1 + 40 + 1.
  FormatPidPath(out, pid, "task/");
  FormatPidPath(out + std::strlen(out), tid, file);
}

}  // namespace stallscope::host
