#include "trace/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace stallscope::trace {
namespace {

// RFC 1952 2.3.1: every gzip member starts with ID1 = 0x1f, ID2 = 0x8b.
constexpr unsigned char kGzipId1 = 0x1f;
constexpr unsigned char kGzipId2 = 0x8b;

ErrorCode CodeForErrno(int err) {
  if (err == ENOENT || err == ENOTDIR) return ErrorCode::kNotFound;
  if (err == EACCES || err == EPERM) return ErrorCode::kPermission;
  return ErrorCode::kIo;
}

/// The raw (possibly compressed) bytes: a file descriptor or a string.
class RawInput {
 public:
  virtual ~RawInput() = default;
  virtual Result<size_t> Read(char* buf, size_t size) = 0;
  virtual uint64_t size() const = 0;
};

class FdInput final : public RawInput {
 public:
  /// `prefix`: bytes already read from a pipe (to see the gzip magic), given back first.
  FdInput(int fd, std::string path, uint64_t size, std::string prefix = {})
      : fd_(fd), path_(std::move(path)), size_(size), prefix_(std::move(prefix)) {}
  ~FdInput() override { ::close(fd_); }
  FdInput(const FdInput&) = delete;
  FdInput& operator=(const FdInput&) = delete;

  Result<size_t> Read(char* buf, size_t size) override {
    // read(2) returns at most 0x7ffff000 bytes; loop so large requests and short reads work.
    size_t done = std::min(size, prefix_.size());
    std::memcpy(buf, prefix_.data(), done);
    prefix_.erase(0, done);
    while (done < size) {
      ssize_t n = ::read(fd_, buf + done, std::min<size_t>(size - done, size_t{1} << 30));
      if (n < 0) {
        if (errno == EINTR) continue;
        return MakeError(CodeForErrno(errno), "{}: read failed: {}", path_, std::strerror(errno));
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }
  uint64_t size() const override { return size_; }

 private:
  int fd_;
  std::string path_;
  uint64_t size_;
  std::string prefix_;
};

class StringInput final : public RawInput {
 public:
  explicit StringInput(std::string bytes) : bytes_(std::move(bytes)) {}
  Result<size_t> Read(char* buf, size_t size) override {
    size_t n = std::min(size, bytes_.size() - pos_);
    std::memcpy(buf, bytes_.data() + pos_, n);
    pos_ += n;
    return n;
  }
  uint64_t size() const override { return bytes_.size(); }

 private:
  std::string bytes_;
  size_t pos_ = 0;
};

class PlainSource final : public ByteSource {
 public:
  explicit PlainSource(std::unique_ptr<RawInput> in) : in_(std::move(in)) {}
  Result<size_t> Read(char* buf, size_t size) override { return in_->Read(buf, size); }
  const std::string& warning() const override { return warning_; }
  uint64_t file_bytes() const override { return in_->size(); }
  bool compressed() const override { return false; }

 private:
  std::unique_ptr<RawInput> in_;
  std::string warning_;
};

/// zlib inflate of concatenated gzip members, pulled by the caller.
class Inflater {
 public:
  Inflater(std::unique_ptr<RawInput> in, size_t block_bytes)
      : in_(std::move(in)), in_buf_(new char[block_bytes]), in_cap_(block_bytes) {
    // 15 + 16: a 32 KiB window, gzip wrapper only (zlib manual, inflateInit2).
    if (inflateInit2(&zs_, 15 + 16) != Z_OK) {
      warning_ = "zlib inflateInit2 failed";
      done_ = true;
    }
  }
  ~Inflater() { inflateEnd(&zs_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  /// Fills `out` as far as the data goes; returns the byte count (< size only at the end).
  Result<size_t> Inflate(char* out, size_t size) {
    size_t produced = 0;
    while (produced < size && !done_) {
      if (zs_.avail_in == 0 && !in_eof_) {
        TRY(size_t n, in_->Read(in_buf_.get(), in_cap_));
        in_eof_ = n == 0;
        zs_.next_in = reinterpret_cast<Bytef*>(in_buf_.get());
        zs_.avail_in = static_cast<uInt>(n);
      }
      if (zs_.avail_in == 0 && in_eof_) {
        if (in_member_) warning_ = "gzip stream truncated";
        done_ = true;
        break;
      }
      if (!in_member_) {
        if (zs_.next_in[0] != kGzipId1) {
          warning_ = "bytes after the last gzip member ignored";
          done_ = true;
          break;
        }
        inflateReset(&zs_);
        in_member_ = true;
      }
      zs_.next_out = reinterpret_cast<Bytef*>(out + produced);
      zs_.avail_out = static_cast<uInt>(std::min<size_t>(size - produced, UINT_MAX));
      uInt before = zs_.avail_out;
      int ret = inflate(&zs_, Z_NO_FLUSH);
      produced += before - zs_.avail_out;
      if (ret == Z_STREAM_END) {
        in_member_ = false;
      } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
        warning_ = fmt::format("gzip stream corrupt ({})", zs_.msg != nullptr ? zs_.msg : "?");
        done_ = true;
      }
    }
    return produced;
  }
  const std::string& warning() const { return warning_; }
  uint64_t file_bytes() const { return in_->size(); }

 private:
  std::unique_ptr<RawInput> in_;
  std::unique_ptr<char[]> in_buf_;
  size_t in_cap_;
  z_stream zs_{};
  bool in_eof_ = false;
  bool in_member_ = true;
  bool done_ = false;
  std::string warning_;
};

class GzipSource final : public ByteSource {
 public:
  GzipSource(std::unique_ptr<RawInput> in, size_t block_bytes)
      : inflater_(std::move(in), block_bytes) {}
  Result<size_t> Read(char* buf, size_t size) override { return inflater_.Inflate(buf, size); }
  const std::string& warning() const override { return inflater_.warning(); }
  uint64_t file_bytes() const override { return inflater_.file_bytes(); }
  bool compressed() const override { return true; }

 private:
  Inflater inflater_;
};

/// Inflates on its own thread into a ring of blocks so that parsing overlaps inflating.
class ThreadedGzipSource final : public ByteSource {
 public:
  ThreadedGzipSource(std::unique_ptr<RawInput> in, size_t block_bytes)
      : inflater_(std::move(in), block_bytes), block_bytes_(block_bytes) {
    for (Block& b : ring_) b.data.reset(new char[block_bytes]);
    worker_ = std::thread([this] { Produce(); });
  }
  ~ThreadedGzipSource() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  ThreadedGzipSource(const ThreadedGzipSource&) = delete;
  ThreadedGzipSource& operator=(const ThreadedGzipSource&) = delete;

  Result<size_t> Read(char* buf, size_t size) override {
    size_t copied = 0;
    while (copied < size) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return filled_ > 0 || finished_; });
      if (filled_ == 0) {
        if (error_) return *error_;
        break;  // finished and drained
      }
      Block& b = ring_[head_];
      lock.unlock();
      // Only this thread touches a filled block until it is released below.
      size_t n = std::min(size - copied, b.size - b.pos);
      std::memcpy(buf + copied, b.data.get() + b.pos, n);
      b.pos += n;
      copied += n;
      if (b.pos == b.size) {
        lock.lock();
        head_ = (head_ + 1) % kRing;
        --filled_;
        lock.unlock();
        cv_.notify_all();
      }
    }
    return copied;
  }
  const std::string& warning() const override { return inflater_.warning(); }
  uint64_t file_bytes() const override { return inflater_.file_bytes(); }
  bool compressed() const override { return true; }

 private:
  static constexpr size_t kRing = 3;
  struct Block {
    std::unique_ptr<char[]> data;
    size_t size = 0;
    size_t pos = 0;
  };

  void Produce() {
    size_t tail = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return filled_ < kRing || stop_; });
        if (stop_) return;
        tail = (head_ + filled_) % kRing;
      }
      // The free block at `tail` belongs to this thread until published.
      Result<size_t> n = inflater_.Inflate(ring_[tail].data.get(), block_bytes_);
      std::lock_guard<std::mutex> lock(mu_);
      if (!n.ok()) {
        error_ = n.take_error();
        finished_ = true;
      } else if (*n > 0) {
        ring_[tail].size = *n;
        ring_[tail].pos = 0;
        ++filled_;
      }
      if (n.ok() && *n < block_bytes_) finished_ = true;
      cv_.notify_all();
      if (finished_) return;
    }
  }

  Inflater inflater_;
  size_t block_bytes_;
  std::array<Block, kRing> ring_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t head_ = 0;
  size_t filled_ = 0;
  bool finished_ = false;
  bool stop_ = false;
  std::optional<Error> error_;
  std::thread worker_;
};

std::unique_ptr<ByteSource> MakeSource(std::unique_ptr<RawInput> in, bool gzip,
                                       const ByteSourceOptions& options) {
  size_t block = std::max<size_t>(options.block_bytes, 4096);
  if (!gzip) return std::make_unique<PlainSource>(std::move(in));
  if (options.threaded_inflate) return std::make_unique<ThreadedGzipSource>(std::move(in), block);
  return std::make_unique<GzipSource>(std::move(in), block);
}

bool HasGzipMagic(const unsigned char* p, size_t n) {
  return n >= 2 && p[0] == kGzipId1 && p[1] == kGzipId2;
}

}  // namespace

Result<std::unique_ptr<ByteSource>> OpenByteSource(const std::string& path,
                                                   const ByteSourceOptions& options) {
  // O_NONBLOCK: opening a FIFO for reading blocks until a writer opens it (issue 27 B15: `trace
  // DIR` hung on a FIFO named like a trace); a pipe with a writer (`<(zcat t.gz)`) still works,
  // one without gives end of data at once. Reads block again below.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    return MakeError(CodeForErrno(err), "{}: cannot open: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    int err = S_ISDIR(st.st_mode) ? EISDIR : errno;
    ::close(fd);
    return MakeError(ErrorCode::kIo, "{}: cannot read: {}", path, std::strerror(err));
  }
  if (int flags = ::fcntl(fd, F_GETFL);
      flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
    int err = errno;
    ::close(fd);
    return MakeError(ErrorCode::kIo, "{}: cannot read: {}", path, std::strerror(err));
  }
  unsigned char magic[2] = {0, 0};
  ssize_t n = ::pread(fd, magic, sizeof(magic), 0);
  std::string prefix;  // a pipe (/dev/stdin, <(zcat ...)) cannot be re-read: keep what was read
  if (n < 0 && errno == ESPIPE) {
    n = 0;
    while (n < 2) {
      ssize_t got = ::read(fd, magic + n, static_cast<size_t>(2 - n));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        if (got < 0) n = -1;
        break;
      }
      n += got;
    }
    if (n > 0) prefix.assign(reinterpret_cast<const char*>(magic), static_cast<size_t>(n));
  }
  if (n < 0) {
    int err = errno;
    ::close(fd);
    return MakeError(CodeForErrno(err), "{}: read failed: {}", path, std::strerror(err));
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  auto in =
      std::make_unique<FdInput>(fd, path, static_cast<uint64_t>(st.st_size), std::move(prefix));
  return MakeSource(std::move(in), HasGzipMagic(magic, static_cast<size_t>(n)), options);
}

std::unique_ptr<ByteSource> MemoryByteSource(std::string bytes, const ByteSourceOptions& options) {
  bool gzip = HasGzipMagic(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  return MakeSource(std::make_unique<StringInput>(std::move(bytes)), gzip, options);
}

}  // namespace stallscope::trace
