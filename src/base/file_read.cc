#include "base/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/units.h"

namespace stallscope {
namespace {

std::string LimitText(size_t bytes) {
  return bytes >= kMiB && bytes % kMiB == 0 ? fmt::format("{} MiB", bytes / kMiB)
                                            : fmt::format("{} byte", bytes);
}

}  // namespace

std::string_view FileKind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

Result<ReadOnlyFile> ReadOnlyFile::Open(const std::string& path) {
  // O_NONBLOCK: open(2) of a FIFO without a writer would wait forever; O_NOCTTY: a terminal
  // device never becomes ours. Neither changes how a regular file is read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    const ErrorCode code = err == ENOENT || err == ENOTDIR ? ErrorCode::kNotFound
                           : err == EACCES || err == EPERM ? ErrorCode::kPermission
                                                           : ErrorCode::kIo;
    return MakeError(code, "{}: cannot open: {}", path, ErrnoText(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return MakeError(ErrorCode::kIo, "{}: cannot stat: {}", path, ErrnoText(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return MakeError(ErrorCode::kUnsupported, "{}: not a regular file ({}); not read", path,
                     FileKind(st.st_mode));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return ReadOnlyFile(fd, path, static_cast<uint64_t>(std::max<off_t>(st.st_size, 0)));
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      size_bytes_(other.size_bytes_) {}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<size_t> ReadOnlyFile::Read(char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd_, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return MakeError(ErrorCode::kIo, "{}: cannot read: {}", path_, ErrnoText(errno));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  TRY(ReadOnlyFile file, ReadOnlyFile::Open(path));
  if (file.size_bytes() > max_bytes) {
    return MakeError(ErrorCode::kUnsupported, "{}: {} bytes, over the {} limit; not read", path,
                     file.size_bytes(), LimitText(max_bytes));
  }
  // Read to the end, not to fstat's size: /proc and /sys files say 0 bytes and hold more, and a
  // file may grow since fstat. One byte more than allowed tells a file over the limit.
  std::string text;
  size_t used = 0;
  for (size_t want = static_cast<size_t>(file.size_bytes()) + 1;; want = used + (4 << 10)) {
    want = std::min(want, max_bytes + 1);
    text.resize(want);
    TRY(size_t n, file.Read(text.data() + used, want - used));
    used += n;
    if (used < want || used > max_bytes) break;  // the end, or past the limit
  }
  if (used > max_bytes) {
    return MakeError(ErrorCode::kUnsupported, "{}: over the {} limit; not read", path,
                     LimitText(max_bytes));
  }
  text.resize(used);
  return text;
}

Result<LineCounts> ForEachLine(const std::string& path,
                               const std::function<void(const TextLine&)>& on_line,
                               size_t max_line_bytes) {
  constexpr size_t kChunkBytes = size_t{64} << 10;
  max_line_bytes = std::max<size_t>(max_line_bytes, 1);
  TRY(ReadOnlyFile file, ReadOnlyFile::Open(path));
  LineCounts counts;
  std::vector<char> chunk(kChunkBytes);
  std::string pending;    // the start of a line that spans chunks; never over the cap
  bool skipping = false;  // in a line over the cap: drop bytes up to its '\n'
  for (;;) {
    TRY(size_t n, file.Read(chunk.data(), chunk.size()));
    if (n == 0) break;
    std::string_view in(chunk.data(), n);
    while (!in.empty()) {
      const size_t nl = in.find('\n');
      const std::string_view piece = in.substr(0, nl);
      in.remove_prefix(nl == std::string_view::npos ? in.size() : nl + 1);
      if (skipping) {
        skipping = nl == std::string_view::npos;
        continue;
      }
      if (pending.size() + piece.size() > max_line_bytes) {
        ++counts.overlong;
        pending.clear();
        pending.shrink_to_fit();
        skipping = nl == std::string_view::npos;
        continue;
      }
      if (nl == std::string_view::npos) {
        // Grow to what is needed, not by doubling: the buffer never passes the cap.
        if (pending.capacity() < pending.size() + piece.size())
          pending.reserve(std::min(
              max_line_bytes, std::max(pending.size() + piece.size(), 2 * pending.capacity())));
        pending.append(piece);
        continue;
      }
      ++counts.lines;
      if (pending.empty()) {
        on_line(TextLine{piece, true});
      } else {
        pending.append(piece);
        on_line(TextLine{pending, true});
        pending.clear();
      }
    }
  }
  if (!pending.empty()) {
    ++counts.lines;
    on_line(TextLine{pending, false});
  }
  return counts;
}

std::string OverlongLinesWarning(std::string_view path, int64_t count, size_t max_line_bytes) {
  return fmt::format("{}: {} line{} over the {} line limit skipped", path, count,
                     count == 1 ? "" : "s", LimitText(max_line_bytes));
}

}  // namespace stallscope
