#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace stallscope::sample {

/// Longest line a recording reader accepts. A sample line is a few KiB (8 GPUs with processes:
/// ~4.5 KiB); 16 MiB leaves room for hosts with thousands of CPUs and large process trees while
/// bounding memory when a file is not line-oriented at all.
inline constexpr size_t kMaxLineBytes = size_t{16} << 20;

/// Options of LineReader.
struct LineReaderOptions {
  size_t max_line_bytes = kMaxLineBytes;  ///< longer lines are skipped (Line::overlong)
  size_t chunk_bytes = size_t{64} << 10;  ///< first buffer size and read(2) size
  size_t padding = 0;                     ///< readable bytes guaranteed after each line's end
};

/// One line of a LineReader, without its '\n'.
struct Line {
  std::string_view text;  ///< valid until the next Next(); empty when overlong
  int64_t number = 0;     ///< 1-based, empty lines included
  bool complete = true;   ///< ended with '\n' (false: the file ended mid-line)
  bool overlong = false;  ///< longer than max_line_bytes: its bytes were dropped unread
};

/// Reads a file (or a pipe: /dev/stdin, <(zcat ...)) forward, one line at a time, in bounded
/// chunks: memory is O(longest line) up to max_line_bytes, never O(file). Not thread-safe.
class LineReader {
 public:
  /// Opens `path`. Fails with "{path}: cannot open recording: <the errno in words>": kNotFound
  /// when it does not exist, kPermission, else kIo.
  [[nodiscard]] static Result<LineReader> Open(const std::string& path,
                                               const LineReaderOptions& options = {});
  LineReader(LineReader&& other) noexcept;
  LineReader& operator=(LineReader&&) = delete;
  LineReader(const LineReader&) = delete;
  ~LineReader();

  /// The next line, or nullopt at the end of the file. A read error fails (kIo, names the file).
  /// `text` is followed by at least `padding` readable bytes (simdjson reads past the end).
  [[nodiscard]] Result<std::optional<Line>> Next();

 private:
  LineReader(int fd, std::string path, const LineReaderOptions& options);
  /// Reads more bytes after end_, compacting or growing the buffer first. False at EOF.
  [[nodiscard]] Result<bool> Fill();
  /// Drops bytes up to and including the next '\n' (or EOF). True when a '\n' ended it.
  [[nodiscard]] Result<bool> SkipRestOfLine();

  int fd_ = -1;
  std::string path_;
  LineReaderOptions options_;
  std::vector<char> buf_;  ///< [begin_, end_) unread; padding_ bytes spare at the end
  size_t begin_ = 0;
  size_t end_ = 0;
  size_t scanned_ = 0;  ///< bytes after begin_ already known to hold no '\n'
  bool eof_ = false;
  int64_t number_ = 0;
};

}  // namespace stallscope::sample
