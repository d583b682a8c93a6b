#include "phase/phase_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>

#include "base/units.h"

namespace stallscope::phase {

/// One created ring: the writable mapping of the file and what the hot path needs from it.
struct PhaseWriter::Ring {
  RingHeader* header = nullptr;
  RingSlot* slots = nullptr;
  uint64_t mask = 0;
  uint64_t map_bytes = 0;
  int32_t pid = 0;
  std::string path;  // ".../<stem>.ring"

  ~Ring() {
    if (header != nullptr) munmap(header, map_bytes);
  }
};

namespace {

std::optional<int64_t> ParseInt(const std::optional<std::string>& text) {
  return text ? ParseInt64(*text) : std::nullopt;
}

uint32_t RoundCapacity(uint32_t capacity) {
  return std::bit_ceil(std::clamp(capacity, kMinCapacity, kMaxCapacity));
}

/// Copies `name` into a name-table entry, cut to 47 bytes on a UTF-8 character boundary.
void WriteNameEntry(RingHeader* header, uint16_t id, std::string_view name) {
  char* entry = reinterpret_cast<char*>(header) + kHeaderBlockBytes + id * kNameBytes;
  size_t n = std::min<size_t>(name.size(), kNameBytes - 1);
  // Back off over continuation bytes (10xxxxxx) so a cut never splits a character.
  while (n < name.size() && n > 0 && (static_cast<unsigned char>(name[n]) & 0xC0) == 0x80) --n;
  std::memcpy(entry, name.data(), n);
  std::memset(entry + n, 0, kNameBytes - n);
}

uint32_t CurrentTid(int32_t ring_pid) {
  // gettid() is a system call; cache it per thread. The cache is keyed by the ring's pid so a
  // forked child (whose ring has a new pid) refreshes the tid of the thread that forked.
  struct TidCache {
    int32_t pid = 0;
    uint32_t tid = 0;
  };
  thread_local TidCache cache;
  if (cache.pid != ring_pid) {
    cache.tid = static_cast<uint32_t>(syscall(SYS_gettid));
    cache.pid = ring_pid;
  }
  return cache.tid;
}

Error ErrnoError(std::string_view what, const std::string& path) {
  const int err = errno;
  const ErrorCode code = err == EACCES || err == EPERM ? ErrorCode::kPermission : ErrorCode::kIo;
  return MakeError(code, "phase ring {}: {} failed: {}", path, what, std::strerror(err));
}

/// Creates `path` with `bytes` reserved and maps it shared, read-write.
Result<void*> MapNewFile(const std::string& path, uint64_t bytes) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create", path);
  // Reserve the blocks now: a sparse file on a full disk would SIGBUS the job on a later store.
  const int alloc_err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (alloc_err != 0) {
    close(fd);
    errno = alloc_err;
    return ErrnoError("allocate", path);
  }
  void* addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) {
    Error error = ErrnoError("mmap", path);  // before close() can change errno
    close(fd);
    return error;
  }
  close(fd);  // the mapping keeps the file
  return addr;
}

/// Links the finished temp file to `<pid>.ring`, or `<pid>.<n>.ring` when a reused pid finds
/// a file of an earlier process there. Returns the final path.
Result<std::string> Publish(const std::string& dir, int32_t pid, const std::string& tmp) {
  for (int n = 0; n < 100; ++n) {
    std::string path =
        n == 0 ? fmt::format("{}/{}.ring", dir, pid) : fmt::format("{}/{}.{}.ring", dir, pid, n);
    if (link(tmp.c_str(), path.c_str()) == 0) return path;
    if (errno == EEXIST) continue;
    // Filesystems without hard links: rename. Not atomic against a racing creator of the same
    // name, which only a second writer in this process (or a shared dir across hosts) can be.
    if (access(path.c_str(), F_OK) == 0) continue;
    if (rename(tmp.c_str(), path.c_str()) == 0) return path;
    return ErrnoError("rename", path);
  }
  return MakeError(ErrorCode::kIo, "phase ring {}/{}.ring: 100 files for this pid already", dir,
                   pid);
}

/// Issue 27 B20: a process whose ring cannot be created (disk full, an unwritable phases dir)
/// records nothing, and the report took that silence for a job that marked no phases. One
/// "info" line named kRingErrorInfo in `<pid>.meta.jsonl` says why: a few hundred bytes may fit
/// where the ring's megabytes did not. Best effort: where even this fails, nothing is said.
void NoteRingError(const std::string& dir, int32_t pid, int32_t rank, int64_t ts_ns,
                   const Error& error, int err) {
  std::string line = fmt::format(R"({{"ts_ns":{},"pid":{},"rank":{},"kind":"info","name":"{}",)",
                                 ts_ns, pid, rank, kRingErrorInfo);
  line += R"("data":{"error":)";
  AppendJsonString(line, error.message);
  line += R"(,"errno":)";
  AppendJsonString(line, err == ENOSPC ? "ENOSPC" : err == EDQUOT ? "EDQUOT" : "");
  line += "}}\n";
  const std::string path = fmt::format("{}/{}.meta.jsonl", dir, pid);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t written = write(fd, line.data(), line.size());
  close(fd);
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read-only use
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

WriterOptions WriterOptionsFromEnv(const EnvLookup& env) {
  WriterOptions options;
  if (auto dir = env(kRunDirEnv); dir && !dir->empty()) options.phases_dir = *dir + "/phases";
  // torchrun sets RANK and WORLD_SIZE; LOCAL_RANK alone comes from single-node launchers.
  std::optional<int64_t> rank = ParseInt(env("RANK"));
  if (!rank) rank = ParseInt(env("LOCAL_RANK"));
  if (rank && *rank >= 0 && *rank <= INT32_MAX) options.rank = static_cast<int32_t>(*rank);
  if (std::optional<int64_t> records = ParseInt(env(kRingRecordsEnv));
      records && *records > 0 && *records <= UINT32_MAX) {
    options.capacity = static_cast<uint32_t>(*records);
  }
  std::optional<int64_t> world = ParseInt(env("WORLD_SIZE"));
  if (world && *world >= 1 && *world <= INT32_MAX)
    options.world_size = static_cast<int32_t>(*world);
  return options;
}

PhaseWriter::PhaseWriter(WriterOptions options, const Clock* clock)
    : options_(std::move(options)), clock_(clock != nullptr ? clock : &system_clock_) {
  own_pid_ = static_cast<int32_t>(getpid());
  names_.reserve(kNameCapacity);
  names_.emplace_back();  // id 0 = kNoName
  if (options_.phases_dir.empty()) {
    error_ =
        MakeError(ErrorCode::kNotFound, "phase writer: no phases directory ({} unset)", kRunDirEnv);
    failed_.store(true, std::memory_order_relaxed);
  }
}

PhaseWriter::~PhaseWriter() {
  delete ring_.load(std::memory_order_acquire);
  if (meta_fd_ >= 0) close(meta_fd_);
}

uint16_t PhaseWriter::NameId(std::string_view name) {
  std::lock_guard lock(mu_);
  std::string key(name);
  if (auto it = ids_.find(key); it != ids_.end()) return it->second;
  if (names_.size() >= kNameCapacity) return kNoName;
  const auto id = static_cast<uint16_t>(names_.size());
  names_.push_back(key);
  ids_.emplace(std::move(key), id);
  // Publish the name before any record can carry the id (the caller only learns it below).
  if (Ring* ring = ring_.load(std::memory_order_acquire)) {
    WriteNameEntry(ring->header, id, name);
    ring->header->name_count.store(id + 1u, std::memory_order_release);
  }
  return id;
}

int64_t PhaseWriter::Step() {
  const int64_t step = steps_.fetch_add(1, std::memory_order_relaxed) + 1;
  Write(RecordKind::kStep, kNoName, step, 0);
  return step;
}

PhaseWriter::Ring* PhaseWriter::RingFor(RecordKind kind, uint16_t id) {
  Ring* ring = ring_.load(std::memory_order_acquire);
  if (ring == nullptr) [[unlikely]] {
    ring = OpenSlow();
    if (ring == nullptr) return nullptr;
  }
  if (id == kNoName && kind != RecordKind::kStep) [[unlikely]] {
    ring->header->dropped.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  return ring;
}

void PhaseWriter::Write(RecordKind kind, uint16_t id, int64_t arg, uint8_t flags) {
  if (Ring* ring = RingFor(kind, id)) WriteAt(*ring, clock_->MonotonicNs(), kind, id, arg, flags);
}

void PhaseWriter::WriteStamped(RecordKind kind, uint16_t id, int64_t ts_ns) {
  if (Ring* ring = RingFor(kind, id)) WriteAt(*ring, ts_ns, kind, id, 0, 0);
}

void PhaseWriter::GpuSpan(uint16_t id, int64_t begin_ts_ns, int64_t gpu_ns) {
  if (Ring* ring = RingFor(RecordKind::kGpuSpan, id)) {
    WriteAt(*ring, begin_ts_ns, RecordKind::kGpuSpan, id, gpu_ns, 0);
  }
}

void PhaseWriter::WriteAt(Ring& ring, int64_t ts_ns, RecordKind kind, uint16_t id, int64_t arg,
                          uint8_t flags) {
  const uint32_t tid = CurrentTid(ring.pid);
  const uint64_t index = ring.header->write_index.fetch_add(1, std::memory_order_relaxed);
  RingSlot& slot = ring.slots[index & ring.mask];
  // Seqlock write (see RingSlot): invalidate, fence, payload, commit.
  slot.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.ts_ns.store(ts_ns, std::memory_order_relaxed);
  slot.arg.store(arg, std::memory_order_relaxed);
  slot.meta.store(PackMeta(tid, id, kind, flags), std::memory_order_relaxed);
  slot.seq.store(index + 1, std::memory_order_release);
}

Status PhaseWriter::Open() {
  if (OpenSlow() != nullptr) return OkStatus();
  std::lock_guard lock(mu_);
  return error_.value_or(MakeError(ErrorCode::kInternal, "phase writer: off for no reason"));
}

PhaseWriter::Ring* PhaseWriter::OpenSlow() {
  if (failed_.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard lock(mu_);
  if (Ring* ring = ring_.load(std::memory_order_acquire)) return ring;  // another thread won
  if (failed_.load(std::memory_order_relaxed)) return nullptr;

  const std::string& dir = options_.phases_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // an error shows up as the open() failure
  const auto pid = static_cast<int32_t>(getpid());
  const uint32_t capacity = RoundCapacity(options_.capacity);
  // Build the file under a hidden temp name and publish it complete, so a reader never sees
  // a half-written header.
  // The writer's address keeps two writers of one process apart.
  const std::string tmp =
      fmt::format("{}/.{}.{:x}.ring.tmp", dir, pid, reinterpret_cast<uintptr_t>(this));
  auto fail = [&](Error error) -> Ring* {
    const int err = errno;  // of the call that failed (ErrnoError keeps it)
    unlink(tmp.c_str());    // first: frees the space the note below needs
    NoteRingError(dir, pid, options_.rank, clock_->MonotonicNs(), error, err);
    error_ = std::move(error);
    failed_.store(true, std::memory_order_relaxed);
    return nullptr;
  };
  Result<void*> addr = MapNewFile(tmp, RingFileBytes(capacity));
  if (!addr.ok()) return fail(addr.take_error());

  auto ring = std::make_unique<Ring>();
  ring->map_bytes = RingFileBytes(capacity);
  ring->pid = pid;
  ring->mask = capacity - 1;
  ring->header = new (*addr) RingHeader{};
  // Constructing every slot also touches every page, so no record write takes a page fault.
  ring->slots = reinterpret_cast<RingSlot*>(static_cast<char*>(*addr) + kSlotsOffset);
  for (uint32_t i = 0; i < capacity; ++i) new (&ring->slots[i]) RingSlot{};
  InitHeader(*ring->header, pid, capacity);

  Result<std::string> path = Publish(dir, pid, tmp);
  if (!path.ok()) return fail(path.take_error());
  unlink(tmp.c_str());
  ring->path = std::move(path).value();
  ring_.store(ring.get(), std::memory_order_release);
  return ring.release();
}

void PhaseWriter::InitHeader(RingHeader& header, int32_t pid, uint32_t capacity) const {
  std::memcpy(header.magic, kRingMagic, sizeof(kRingMagic));
  header.version = kRingVersion;
  header.slots_offset = kSlotsOffset;
  header.slot_bytes = kSlotBytes;
  header.capacity = capacity;
  header.name_capacity = kNameCapacity;
  header.name_bytes = kNameBytes;
  header.pid = pid;
  header.rank = options_.rank;
  header.world_size = options_.world_size;
  header.forked_from = forked_from_;
  header.start_monotonic_ns = clock_->MonotonicNs();
  header.start_realtime_ns = clock_->WallNs();
  for (size_t id = 0; id < names_.size(); ++id) {
    WriteNameEntry(&header, static_cast<uint16_t>(id), names_[id]);
  }
  header.name_count.store(static_cast<uint32_t>(names_.size()), std::memory_order_release);
}

void PhaseWriter::AfterForkInChild() {
  // The child has one thread, but another parent thread may have held mu_ at fork time:
  // re-create it instead of locking it (what pthread_atfork child handlers do).
  new (&mu_) std::mutex();
  // MAP_SHARED mappings are shared with the parent after fork: drop ours, never write to it.
  delete ring_.exchange(nullptr, std::memory_order_acq_rel);
  if (meta_fd_ >= 0) close(meta_fd_);
  meta_fd_ = -1;
  meta_serial_ = 0;
  steps_.store(0, std::memory_order_relaxed);
  forked_from_ = own_pid_;
  own_pid_ = static_cast<int32_t>(getpid());
}

std::string PhaseWriter::ring_path() const {
  Ring* ring = ring_.load(std::memory_order_acquire);
  return ring != nullptr ? ring->path : std::string();
}

std::string PhaseWriter::meta_path() const {
  std::string path = ring_path();
  if (path.empty()) return path;
  path.resize(path.size() - std::string_view(".ring").size());
  return path + ".meta.jsonl";
}

std::optional<Error> PhaseWriter::error() const {
  std::lock_guard lock(mu_);
  if (!failed_.load(std::memory_order_relaxed)) return std::nullopt;
  return error_;
}

Status PhaseWriter::Mark(uint16_t id, std::string_view data_json) {
  Ring* ring = ring_.load(std::memory_order_acquire);
  if (ring == nullptr) ring = OpenSlow();
  if (ring == nullptr) return OkStatus();  // off: nothing to record, not an error of this call
  if (id == kNoName) {
    ring->header->dropped.fetch_add(1, std::memory_order_relaxed);
    return OkStatus();
  }
  std::lock_guard lock(mu_);
  if (id >= names_.size()) {
    return MakeError(ErrorCode::kInvalidArgument, "phase writer: unknown name id {}", id);
  }
  return AppendMetaLineLocked(*ring, "mark", names_[id], id, data_json);
}

Status PhaseWriter::Info(std::string_view kind, std::string_view data_json) {
  Ring* ring = ring_.load(std::memory_order_acquire);
  if (ring == nullptr) ring = OpenSlow();
  if (ring == nullptr) return OkStatus();
  std::lock_guard lock(mu_);
  return AppendMetaLineLocked(*ring, "info", kind, kNoName, data_json);
}

Status PhaseWriter::AppendMetaLineLocked(Ring& ring, std::string_view kind, std::string_view name,
                                         uint16_t mark_id, std::string_view data_json) {
  const int64_t ts_ns = clock_->MonotonicNs();
  const std::string path = meta_path();
  if (meta_fd_ < 0) {
    meta_fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (meta_fd_ < 0) return ErrnoError("open", path);
  }
  const int64_t serial = meta_serial_++;
  // The mark record carries the serial of its meta line so a reader can join the two.
  if (mark_id != kNoName) WriteAt(ring, ts_ns, RecordKind::kMark, mark_id, serial, 0);
  std::string line =
      fmt::format(R"({{"ts_ns":{},"pid":{},"rank":{},"serial":{},"kind":"{}","name":)", ts_ns,
                  ring.pid, options_.rank, serial, kind);
  AppendJsonString(line, name);
  line += ",\"data\":";
  line += data_json.empty() ? std::string_view("{}") : data_json;
  line += "}\n";
  // One write() per line with O_APPEND: lines from several threads never interleave.
  const ssize_t written = write(meta_fd_, line.data(), line.size());
  if (written != static_cast<ssize_t>(line.size())) return ErrnoError("append", path);
  return OkStatus();
}

}  // namespace stallscope::phase
