#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"

namespace stallscope::trace {

/// A forward-only stream of bytes (a plain file, an inflated gzip file, memory in tests).
/// Not thread-safe: one reader at a time.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  /// Copies up to `size` bytes into `buf`; returns how many (0 = end of data). A read error of
  /// the underlying file fails (kIo). A corrupt or truncated compressed stream ends the data
  /// early instead and sets `warning()`: what was inflated before the damage is kept.
  [[nodiscard]] virtual Result<size_t> Read(char* buf, size_t size) = 0;
  /// Why the data ended early ("gzip stream truncated", ...); empty when it did not.
  [[nodiscard]] virtual const std::string& warning() const = 0;
  /// Bytes of the underlying file (compressed size for gzip), when known; a hint for sizing.
  [[nodiscard]] virtual uint64_t file_bytes() const = 0;
  /// True when the content is gzip-compressed.
  [[nodiscard]] virtual bool compressed() const = 0;
};

/// Options for OpenByteSource.
struct ByteSourceOptions {
  /// Inflate gzip input on a separate thread into a small ring of blocks (double-buffering).
  bool threaded_inflate = true;
  /// Size of each read(2) and of each inflated block.
  size_t block_bytes = size_t{1} << 20;
};

/// Opens `path`: gzip when it starts with the gzip magic 1f 8b (by content, not by name;
/// concatenated members are read in order), plain bytes otherwise. Errors name the file:
/// kNotFound, kPermission, kIo.
[[nodiscard]] Result<std::unique_ptr<ByteSource>> OpenByteSource(
    const std::string& path, const ByteSourceOptions& options = {});

/// A source over bytes in memory, gzip-inflated when they start with 1f 8b (for tests).
[[nodiscard]] std::unique_ptr<ByteSource> MemoryByteSource(std::string bytes,
                                                           const ByteSourceOptions& options = {});

}  // namespace stallscope::trace
