#include "doctor/data_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/stats.h"
#include "base/units.h"
#include "doctor/space.h"

namespace stallscope::doctor {
namespace {

namespace fs = std::filesystem;

constexpr size_t kChunkBytes = 1 << 20;          // one read of the whole-file phase
constexpr uint64_t kMaxBytesPerFile = 16 << 20;  // then the next file: visit many files
constexpr size_t kRandomReadBytes = 4096;        // the page size, and O_DIRECT's usual alignment
constexpr size_t kSampleFiles = 4096;            // files kept from the scan (reservoir)
constexpr size_t kRandomFiles = 64;              // files open at once for the random reads
constexpr size_t kMaxLatencies = 1 << 20;        // per thread

struct DataFile {
  std::string path;
  uint64_t size = 0;
};

/// The scan: counts and sizes every regular file, keeps a uniform random sample (reservoir
/// sampling, fixed seed: the same tree gives the same sample).
std::vector<DataFile> Scan(const std::string& dir, const DataProbeOptions& o, int64_t deadline,
                           DataFacts& out) {
  std::vector<DataFile> sample;
  std::mt19937_64 rng(42);
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (out.files >= o.max_files || MonotonicNs() > deadline) {
      out.scan_truncated = true;
      break;
    }
    std::error_code e2;
    if (!it->is_regular_file(e2)) continue;
    const uint64_t size = it->file_size(e2);
    if (e2 || size == 0) continue;
    ++out.files;
    out.total_bytes += size;
    if (sample.size() < kSampleFiles) {
      sample.push_back({it->path().string(), size});
    } else if (const uint64_t k = rng() % out.files; k < kSampleFiles) {
      sample[k] = {it->path().string(), size};
    }
  }
  std::shuffle(sample.begin(), sample.end(), rng);
  return sample;
}

/// How files are opened: O_DIRECT when the filesystem takes it, O_NOATIME when we may (both
/// found out on the first file).
struct OpenMode {
  int flags = O_RDONLY | O_CLOEXEC;
  bool direct = false;
};

int OpenFile(const std::string& path, OpenMode& mode) {
  int fd = open(path.c_str(), mode.flags | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = open(path.c_str(), mode.flags);  // not our file: atime
  return fd;
}

OpenMode ChooseMode(const std::vector<DataFile>& files, bool force_buffered, std::string& note,
                    const std::string& fs_type) {
  OpenMode mode;
  if (force_buffered || files.empty()) {
    note = "buffered reads (forced)";
    return mode;
  }
  OpenMode direct{O_RDONLY | O_CLOEXEC | O_DIRECT, true};
  const int fd = OpenFile(files.front().path, direct);
  if (fd >= 0) {
    void* buf = std::aligned_alloc(kRandomReadBytes, kRandomReadBytes);
    const ssize_t n = buf != nullptr ? pread(fd, buf, kRandomReadBytes, 0) : -1;
    const int err = errno;
    std::free(buf);
    close(fd);
    if (n >= 0) return direct;
    errno = err;
  }
  note = fmt::format("buffered reads after dropping cached pages: {} refuses O_DIRECT ({})",
                     fs_type, std::strerror(errno));
  return mode;
}

struct Buffer {
  explicit Buffer(size_t bytes)
      : data(static_cast<char*>(std::aligned_alloc(kRandomReadBytes, bytes))) {}
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data;
};

/// Whole-file reads by `threads` readers taking files in turn, until the files or the time run
/// out.
void ReadFiles(const std::vector<DataFile>& files, OpenMode mode, uint32_t threads,
               int64_t deadline, DataFacts& out) {
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0}, done{0}, errors{0};
  const int64_t start = MonotonicNs();
  auto reader = [&] {
    Buffer buf(kChunkBytes);
    if (buf.data == nullptr) return;
    for (size_t i = next++; i < files.size() && MonotonicNs() < deadline; i = next++) {
      OpenMode m = mode;
      const int fd = OpenFile(files[i].path, m);
      if (fd < 0) {
        ++errors;
        continue;
      }
      if (!m.direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      uint64_t got = 0;
      bool failed = false;
      while (got < kMaxBytesPerFile && MonotonicNs() < deadline) {
        const ssize_t n = pread(fd, buf.data, kChunkBytes, static_cast<off_t>(got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          failed = n < 0;
          break;
        }
        got += static_cast<uint64_t>(n);
      }
      close(fd);
      bytes += got;
      if (failed) ++errors;
      if (!failed && (got >= files[i].size || got >= kMaxBytesPerFile)) ++done;
    }
  };
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads; ++t) pool.emplace_back(reader);
  for (std::thread& t : pool) t.join();
  out.read_seconds = NsToSeconds(MonotonicNs() - start);
  out.files_read = done;
  out.bytes_read = bytes;
  out.read_errors += errors;
}

/// 4 KiB reads at random page-aligned offsets of up to kRandomFiles files, until the deadline.
void ReadRandom(const std::vector<DataFile>& files, OpenMode mode, uint32_t threads,
                int64_t deadline, DataFacts& out) {
  std::vector<int> fds;
  std::vector<uint64_t> sizes;
  for (size_t i = 0; i < files.size() && fds.size() < kRandomFiles; ++i) {
    OpenMode m = mode;
    const int fd = OpenFile(files[i].path, m);
    if (fd < 0) continue;
    fds.push_back(fd);
    sizes.push_back(files[i].size);
  }
  if (fds.empty()) return;
  std::vector<std::vector<uint32_t>> latencies(threads);  // µs
  const int64_t start = MonotonicNs();
  auto reader = [&](uint32_t t) {
    Buffer buf(kRandomReadBytes);
    std::mt19937_64 rng(1000 + t);
    while (buf.data != nullptr && latencies[t].size() < kMaxLatencies) {
      const int64_t begin = MonotonicNs();
      if (begin >= deadline) break;
      const size_t k = rng() % fds.size();
      const uint64_t pages = std::max<uint64_t>(1, sizes[k] / kRandomReadBytes);
      const auto offset = static_cast<off_t>((rng() % pages) * kRandomReadBytes);
      if (!mode.direct) posix_fadvise(fds[k], offset, kRandomReadBytes, POSIX_FADV_DONTNEED);
      if (pread(fds[k], buf.data, kRandomReadBytes, offset) < 0) break;
      latencies[t].push_back(static_cast<uint32_t>((MonotonicNs() - begin) / 1000));
    }
  };
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads; ++t) pool.emplace_back(reader, t);
  for (std::thread& t : pool) t.join();
  out.random_seconds = NsToSeconds(MonotonicNs() - start);
  for (int fd : fds) close(fd);
  std::vector<uint32_t> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  out.random_reads = all.size();
  if (all.empty()) return;
  // A measured latency, not an interpolation between two (the lower of the two closest).
  out.random_latency_p50_us = QuantileInPlace(std::span(all), 0.5, QuantileMethod::kLower);
  out.random_latency_p99_us = QuantileInPlace(std::span(all), 0.99, QuantileMethod::kLower);
}

}  // namespace

DataFacts ProbeData(const std::string& dir, const DataProbeOptions& o) {
  DataFacts out;
  out.path = dir;
  const int64_t start = MonotonicNs();
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    out.error = std::strerror(errno);
    return out;
  }
  if (!S_ISDIR(st.st_mode)) {
    out.error = "not a directory";
    return out;
  }
  struct statfs sfs {};
  if (statfs(dir.c_str(), &sfs) == 0) out.fs_type = FsTypeName(static_cast<uint64_t>(sfs.f_type));
  out.network_fs = IsNetworkFs(out.fs_type);
  out.threads = std::clamp<uint32_t>(o.threads, 1, 16);
  const int64_t budget = std::max<int64_t>(o.time_budget_ns, 100'000'000);
  // A third of the time at most for the scan; of the rest, 60% for whole files.
  const std::vector<DataFile> files = Scan(dir, o, start + budget / 3, out);
  if (files.empty()) return out;
  const OpenMode mode = ChooseMode(files, o.force_buffered, out.io_note, out.fs_type);
  out.direct_io = mode.direct;
  const int64_t left = start + budget - MonotonicNs();
  ReadFiles(files, mode, out.threads, MonotonicNs() + left * 6 / 10, out);
  ReadRandom(files, mode, out.threads, start + budget, out);
  return out;
}

}  // namespace stallscope::doctor
