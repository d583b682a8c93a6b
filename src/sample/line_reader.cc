#include "sample/line_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "base/units.h"

namespace stallscope::sample {

Result<LineReader> LineReader::Open(const std::string& path, const LineReaderOptions& options) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // Callers (run reports, summary) show it as is; the errno's words say which cause it is
    // (issue 27 B21: a symbolic link loop or a permission read as a missing file).
    const int err = errno;
    const ErrorCode code = err == ENOENT || err == ENOTDIR ? ErrorCode::kNotFound
                           : err == EACCES || err == EPERM ? ErrorCode::kPermission
                                                           : ErrorCode::kIo;
    return MakeError(code, "{}: cannot open recording: {}", path, ErrnoText(err));
  }
  return LineReader(fd, path, options);
}

LineReader::LineReader(int fd, std::string path, const LineReaderOptions& options)
    : fd_(fd), path_(std::move(path)), options_(options) {
  options_.max_line_bytes = std::max<size_t>(options_.max_line_bytes, 1);
  // One byte over the cap must fit, to tell "exactly the cap" from "over it".
  const size_t capacity = std::clamp<size_t>(options_.chunk_bytes, 1, options_.max_line_bytes + 1);
  buf_.resize(capacity + options_.padding);
}

LineReader::LineReader(LineReader&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      options_(other.options_),
      buf_(std::move(other.buf_)),
      begin_(other.begin_),
      end_(other.end_),
      scanned_(other.scanned_),
      eof_(other.eof_),
      number_(other.number_) {}

LineReader::~LineReader() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::optional<Line>> LineReader::Next() {
  for (;;) {
    const char* start = buf_.data() + begin_;
    const size_t pending = end_ - begin_;
    const auto* nl =
        static_cast<const char*>(std::memchr(start + scanned_, '\n', pending - scanned_));
    if (nl != nullptr) {
      const auto len = static_cast<size_t>(nl - start);
      begin_ += len + 1;
      scanned_ = 0;
      if (len > options_.max_line_bytes)
        return std::optional<Line>(Line{{}, ++number_, true, true});
      return std::optional<Line>(Line{std::string_view(start, len), ++number_, true, false});
    }
    scanned_ = pending;
    if (pending > options_.max_line_bytes) {
      begin_ = end_ = scanned_ = 0;
      TRY(bool ended, SkipRestOfLine());
      return std::optional<Line>(Line{{}, ++number_, ended, true});
    }
    if (eof_) {
      if (pending == 0) return std::optional<Line>();
      begin_ = end_;
      scanned_ = 0;
      return std::optional<Line>(Line{std::string_view(start, pending), ++number_, false, false});
    }
    TRY_STATUS(Fill());  // sets eof_ when there is no more
  }
}

Result<bool> LineReader::Fill() {
  // Move the partial line to the front: it is short next to a chunk, so this is cheap.
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  size_t capacity = buf_.size() - options_.padding;
  if (end_ == capacity) {
    // A line longer than the buffer: grow, up to one byte over the cap (Next() checks first).
    capacity = std::min(capacity * 2, options_.max_line_bytes + 1);
    buf_.resize(capacity + options_.padding);
  }
  for (;;) {
    ssize_t n = ::read(fd_, buf_.data() + end_, capacity - end_);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return MakeError(ErrorCode::kIo, "{}: cannot read recording: {}", path_,
                       std::strerror(errno));
    }
    if (n == 0) eof_ = true;
    end_ += static_cast<size_t>(n);
    return n > 0;
  }
}

Result<bool> LineReader::SkipRestOfLine() {
  for (;;) {
    TRY(bool more, Fill());
    if (!more) {
      begin_ = end_ = 0;
      return false;
    }
    const char* start = buf_.data();
    const auto* nl = static_cast<const char*>(std::memchr(start, '\n', end_));
    if (nl != nullptr) {
      begin_ = static_cast<size_t>(nl - start) + 1;
      return true;
    }
    begin_ = end_ = 0;  // drop it all: the buffer does not grow while skipping
  }
}

}  // namespace stallscope::sample
