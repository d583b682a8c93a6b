#include "phase/phase_reader.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>

namespace stallscope::phase {
namespace {

/// Live Drain gives up on a claimed but uncommitted slot (counting it incomplete) once it has
/// stopped there on this many polls in a row and for this long: a writer commits four stores
/// after its claim, so only a stopped or dead writer stays that slow. Polls alone are not
/// enough: a reader spinning on a busy host polls faster than a preempted writer resumes.
constexpr uint64_t kMaxStuckPolls = 2;
constexpr int64_t kStuckTimeoutNs = kNsPerSec;
/// Largest capacity a reader accepts (the writer's own limit).
constexpr uint32_t kMaxReadCapacity = 64u * 1024 * 1024;

Error OpenError(const std::string& path, std::string_view what) {
  const int err = errno;
  const ErrorCode code = err == ENOENT   ? ErrorCode::kNotFound
                         : err == EACCES ? ErrorCode::kPermission
                                         : ErrorCode::kIo;
  return MakeError(code, "phase ring {}: {}: {}", path, what, std::strerror(err));
}

/// The immutable part of RingHeader (offsets 0..64), as plain fields a pread can fill.
struct FixedHeader {
  char magic[8];
  uint32_t version;
  uint32_t slots_offset;
  uint32_t slot_bytes;
  uint32_t capacity;
  uint32_t name_capacity;
  uint32_t name_bytes;
  int32_t pid;
  int32_t rank;
  int32_t world_size;
  int32_t forked_from;
  int64_t start_monotonic_ns;
  int64_t start_realtime_ns;
};
static_assert(sizeof(FixedHeader) == offsetof(RingHeader, reserved1));
static_assert(offsetof(FixedHeader, start_realtime_ns) == offsetof(RingHeader, start_realtime_ns));
constexpr uint64_t kCountersOffset = offsetof(RingHeader, write_index);
constexpr uint64_t kCountersBytes = offsetof(RingHeader, reserved2) - kCountersOffset;
constexpr uint64_t kSeqOffset = offsetof(RingSlot, seq);
static_assert(offsetof(RingHeader, dropped) - kCountersOffset == 8);
static_assert(offsetof(RingHeader, name_count) - kCountersOffset == 16);

/// pread(2) until `bytes` are read, the file ends or an error; returns the bytes read (an error
/// reads as the end of the file: what was not read counts as missing).
uint64_t ReadAt(int fd, void* out, uint64_t bytes, uint64_t offset) {
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, static_cast<char*>(out) + done, bytes - done,
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<uint64_t>(n);
  }
  return done;
}

template <typename T>
T Load(const unsigned char* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

/// Checks the fixed header fields; the error names the first field that is wrong.
Status ValidateHeader(const FixedHeader& header, const std::string& path) {
  if (std::memcmp(header.magic, kRingMagic, sizeof(kRingMagic)) != 0) {
    return MakeError(ErrorCode::kParse, "phase ring {}: not a ring file (bad magic)", path);
  }
  if (header.version != kRingVersion) {
    return MakeError(ErrorCode::kUnsupported, "phase ring {}: version {} (this build reads {})",
                     path, header.version, kRingVersion);
  }
  if (header.slot_bytes != kSlotBytes || header.slots_offset != kSlotsOffset ||
      header.name_capacity != kNameCapacity || header.name_bytes != kNameBytes) {
    return MakeError(
        ErrorCode::kParse, "phase ring {}: bad layout (slot {} B at {}, {} names of {} B)", path,
        header.slot_bytes, header.slots_offset, header.name_capacity, header.name_bytes);
  }
  if (!std::has_single_bit(header.capacity) || header.capacity > kMaxReadCapacity) {
    return MakeError(ErrorCode::kParse, "phase ring {}: bad capacity {}", path, header.capacity);
  }
  return OkStatus();
}

}  // namespace

DrainStats& DrainStats::operator+=(const DrainStats& other) {
  read += other.read;
  overwritten += other.overwritten;
  incomplete += other.incomplete;
  return *this;
}

PhaseReader::Scratch::Scratch()
    : bytes(size_t{kChunkSlots} * kSlotBytes),
      seq(kChunkSlots),
      records(kChunkSlots),
      states(kChunkSlots) {}

Result<PhaseReader> PhaseReader::Open(const std::string& path, const Clock* clock) {
  PhaseReader reader;
  reader.fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (reader.fd_ < 0) return OpenError(path, "open");
  struct stat st {};
  if (fstat(reader.fd_, &st) != 0) return OpenError(path, "stat");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kSlotsOffset) {
    return MakeError(ErrorCode::kParse,
                     "phase ring {}: {} bytes, cut before the first record (header needs {})", path,
                     size, kSlotsOffset);
  }
  FixedHeader header{};
  if (ReadAt(reader.fd_, &header, sizeof(header), 0) != sizeof(header)) {
    return MakeError(ErrorCode::kParse, "phase ring {}: cut while opened", path);
  }
  TRY_STATUS(ValidateHeader(header, path));
  reader.opened_bytes_ = size;
  reader.clock_ = clock;
  RingInfo& info = reader.info_;
  info.path = path;
  info.pid = header.pid;
  info.rank = header.rank;
  info.world_size = header.world_size;
  info.forked_from = std::max(header.forked_from, 0);
  info.capacity = header.capacity;
  info.readable_slots = static_cast<uint32_t>(
      std::min<uint64_t>(header.capacity, (size - kSlotsOffset) / kSlotBytes));
  info.start_monotonic_ns = header.start_monotonic_ns;
  info.start_realtime_ns = header.start_realtime_ns;
  reader.names_.reserve(kNameCapacity);  // Name() hands out references: never reallocate
  return reader;
}

PhaseReader::PhaseReader(PhaseReader&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      opened_bytes_(other.opened_bytes_),
      shrunk_(other.shrunk_),
      shrunk_to_bytes_(other.shrunk_to_bytes_),
      last_write_index_(other.last_write_index_),
      last_dropped_(other.last_dropped_),
      shrunk_reported_(other.shrunk_reported_),
      scratch_(std::move(other.scratch_)),
      info_(std::move(other.info_)),
      clock_(other.clock_),
      cursor_(other.cursor_),
      stuck_polls_(other.stuck_polls_),
      stuck_since_ns_(other.stuck_since_ns_),
      totals_(other.totals_),
      names_(std::move(other.names_)) {}

PhaseReader& PhaseReader::operator=(PhaseReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    opened_bytes_ = other.opened_bytes_;
    shrunk_ = other.shrunk_;
    shrunk_to_bytes_ = other.shrunk_to_bytes_;
    last_write_index_ = other.last_write_index_;
    last_dropped_ = other.last_dropped_;
    shrunk_reported_ = other.shrunk_reported_;
    scratch_ = std::move(other.scratch_);
    info_ = std::move(other.info_);
    cursor_ = other.cursor_;
    clock_ = other.clock_;
    stuck_polls_ = other.stuck_polls_;
    stuck_since_ns_ = other.stuck_since_ns_;
    totals_ = other.totals_;
    names_ = std::move(other.names_);
  }
  return *this;
}

PhaseReader::~PhaseReader() {
  if (fd_ >= 0) close(fd_);
}

void PhaseReader::NoteShrunk() const {
  struct stat st {};
  shrunk_to_bytes_ = fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  // A file cut and grown again (sparse) is no smaller: the read that came up short says it was.
  shrunk_to_bytes_ = std::min(shrunk_to_bytes_, opened_bytes_ - 1);
  shrunk_ = true;
}

std::optional<Error> PhaseReader::TakeShrunkError() {
  if (!shrunk_ || shrunk_reported_) return std::nullopt;
  shrunk_reported_ = true;
  return MakeError(ErrorCode::kIo,
                   "phase ring {}: the file shrank from {} to {} bytes while it was read "
                   "(something truncated it; writers never do): its records past the cut are "
                   "lost, counted as incomplete",
                   info_.path, opened_bytes_, shrunk_to_bytes_);
}

bool PhaseReader::ReadCounters(uint64_t* write_index, uint64_t* dropped,
                               uint32_t* name_count) const {
  alignas(8) unsigned char raw[kCountersBytes];
  if (ReadAt(fd_, raw, sizeof(raw), kCountersOffset) != sizeof(raw)) {
    NoteShrunk();
    return false;
  }
  // The kernel's copy stands in for an acquire load: order what follows after it.
  std::atomic_thread_fence(std::memory_order_acquire);
  *write_index = Load<uint64_t>(raw);
  *dropped = Load<uint64_t>(raw + 8);
  *name_count = Load<uint32_t>(raw + 16);
  return true;
}

uint64_t PhaseReader::write_index() const {
  uint64_t index = 0, dropped = 0;
  uint32_t names = 0;
  if (ReadCounters(&index, &dropped, &names)) {
    last_write_index_ = index;
    last_dropped_ = dropped;
  }
  return last_write_index_;
}

uint64_t PhaseReader::writer_dropped() const {
  write_index();
  return last_dropped_;
}

void PhaseReader::ReadSlots(uint64_t index, uint32_t count, Scratch& scratch) const {
  const uint64_t first_slot = index & (info_.capacity - 1);
  const uint64_t offset = kSlotsOffset + first_slot * kSlotBytes;
  const uint64_t bytes = uint64_t{count} * kSlotBytes;
  unsigned char* buf = scratch.bytes.data();
  // Seqlock read (RingSlot in ring_format.h) over a run of slots: commit words, fence, payloads,
  // fence, commit words. A slot whose two commit words are its index + 1 was committed before
  // the payload copy began and not touched until after it ended.
  uint64_t whole = ReadAt(fd_, buf, bytes, offset) / kSlotBytes;
  for (uint32_t k = 0; k < whole; ++k)
    scratch.seq[k] = Load<uint64_t>(buf + k * kSlotBytes + kSeqOffset);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  whole = std::min<uint64_t>(whole, ReadAt(fd_, buf, bytes, offset) / kSlotBytes);
  for (uint32_t k = 0; k < whole; ++k) {
    const unsigned char* at = buf + k * kSlotBytes;
    PhaseRecord& out = scratch.records[k];
    const auto meta = Load<uint64_t>(at + offsetof(RingSlot, meta));
    out.index = index + k;
    out.ts_ns = Load<int64_t>(at + offsetof(RingSlot, ts_ns));
    out.arg = Load<int64_t>(at + offsetof(RingSlot, arg));
    out.tid = static_cast<uint32_t>(meta);
    out.phase_id = static_cast<uint16_t>(meta >> 32);
    out.kind = static_cast<RecordKind>(static_cast<uint8_t>(meta >> 48));
    out.flags = static_cast<uint8_t>(meta >> 56);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  whole = std::min<uint64_t>(whole, ReadAt(fd_, buf, bytes, offset) / kSlotBytes);
  for (uint32_t k = 0; k < count; ++k) {
    const uint64_t want = index + k + 1;
    SlotState& state = scratch.states[k];
    if (k >= whole) {
      state = SlotState::kMissing;
      continue;
    }
    const uint64_t seq = scratch.seq[k];
    const auto kind = static_cast<uint8_t>(scratch.records[k].kind);
    if (seq > want) {
      state = SlotState::kOverwritten;
    } else if (seq != want) {
      state = SlotState::kNotCommitted;
    } else if (Load<uint64_t>(buf + k * kSlotBytes + kSeqOffset) != seq) {
      state = SlotState::kTorn;
    } else if (kind == 0 || kind > kMaxRecordKind) {
      state = SlotState::kTorn;  // a kind this build does not know is garbage, not a record
    } else {
      state = SlotState::kOk;
    }
  }
  // Slots the file held when opened but no longer does: it shrank under us.
  if (whole < count && first_slot + whole < info_.readable_slots) NoteShrunk();
}

DrainStats PhaseReader::DrainCore(DrainMode mode, void* ctx, Visit visit) {
  DrainStats stats;
  const uint64_t end = write_index();
  // Lapped: everything older than one ring behind the writer is gone.
  if (end > cursor_ + info_.capacity) {
    stats.overwritten += end - info_.capacity - cursor_;
    cursor_ = end - info_.capacity;
  }
  const uint64_t start = cursor_;
  bool stop = false;
  while (cursor_ < end && !stop) {
    // A run of slots that does not wrap around the ring's end.
    const uint64_t to_wrap = info_.capacity - (cursor_ & (info_.capacity - 1));
    const auto count =
        static_cast<uint32_t>(std::min<uint64_t>({end - cursor_, kChunkSlots, to_wrap}));
    ReadSlots(cursor_, count, scratch_);
    for (uint32_t k = 0; k < count; ++k) {
      const SlotState state = scratch_.states[k];
      if (state == SlotState::kNotCommitted && mode == DrainMode::kLive) {
        // A writer is between its claim and its commit: come back next poll, unless we have
        // been stuck on this slot for a while.
        stop = true;
        if (cursor_ != start) break;
        const int64_t now_ns =
            clock_ != nullptr ? clock_->MonotonicNs() : SystemClock().MonotonicNs();
        if (stuck_polls_ == 0) stuck_since_ns_ = now_ns;
        if (++stuck_polls_ <= kMaxStuckPolls || now_ns - stuck_since_ns_ < kStuckTimeoutNs) break;
        stop = false;
      }
      switch (state) {
        case SlotState::kOk:
          visit(ctx, scratch_.records[k]);
          ++stats.read;
          break;
        case SlotState::kOverwritten:
          ++stats.overwritten;
          break;
        case SlotState::kNotCommitted:
        case SlotState::kTorn:
        case SlotState::kMissing:
          ++stats.incomplete;
          break;
      }
      ++cursor_;
    }
  }
  if (cursor_ != start) stuck_polls_ = 0;
  totals_ += stats;
  return stats;
}

std::vector<PhaseRecord> PhaseReader::ReadAll(DrainStats* stats) const {
  DrainStats local;
  const uint64_t end = write_index();
  const uint64_t begin = end > info_.capacity ? end - info_.capacity : 0;
  local.overwritten = begin;
  std::vector<PhaseRecord> records;
  // A damaged header can claim any write index: reserve no more than the file can hold.
  records.reserve(static_cast<size_t>(std::min<uint64_t>(end - begin, info_.readable_slots)));
  Scratch scratch;
  for (uint64_t index = begin; index < end;) {
    const uint64_t to_wrap = info_.capacity - (index & (info_.capacity - 1));
    const auto count =
        static_cast<uint32_t>(std::min<uint64_t>({end - index, kChunkSlots, to_wrap}));
    ReadSlots(index, count, scratch);
    for (uint32_t k = 0; k < count; ++k) {
      switch (scratch.states[k]) {
        case SlotState::kOk:
          records.push_back(scratch.records[k]);
          ++local.read;
          break;
        case SlotState::kOverwritten:
          ++local.overwritten;
          break;
        default:
          ++local.incomplete;
          break;
      }
    }
    index += count;
  }
  if (stats != nullptr) *stats = local;
  return records;
}

const std::vector<std::string>& PhaseReader::Names() {
  uint64_t index = 0, dropped = 0;
  uint32_t count = 0;
  if (!ReadCounters(&index, &dropped, &count)) return names_;
  count = std::min(count, kNameCapacity);
  // Published before any record names it (release on name_count, acquire above).
  char entry[kNameBytes];
  for (size_t id = names_.size(); id < count; ++id) {
    const uint64_t got = ReadAt(fd_, entry, kNameBytes, kHeaderBlockBytes + id * kNameBytes);
    if (got != kNameBytes) {
      NoteShrunk();
      break;
    }
    names_.emplace_back(entry, strnlen(entry, kNameBytes - 1));
  }
  return names_;
}

const std::string& PhaseReader::Name(uint16_t id) {
  static const std::string kUnknown;  // immutable
  if (id >= names_.size()) Names();
  return id < names_.size() ? names_[id] : kUnknown;
}

bool ProcessExists(int32_t pid) {
  // EPERM: it exists but is not ours to signal.
  return ::kill(pid, 0) == 0 || errno != ESRCH;
}

RingDirWatcher::PollResult RingDirWatcher::Scan() {
  PollResult result;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir_, ec);
  if (ec) return result;  // not created yet: no process has recorded
  std::vector<std::string> found;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    // Temp files (".<pid>.<writer>.ring.tmp") are hidden and not yet complete.
    if (name.empty() || name[0] == '.' || !name.ends_with(".ring")) continue;
    if (seen_.count(name) == 0) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  for (const std::string& name : found) {
    seen_.insert(name);
    Result<PhaseReader> reader = PhaseReader::Open(dir_ + "/" + name);
    if (!reader.ok()) {
      result.new_errors.push_back(reader.take_error());
      continue;
    }
    rings_.push_back(std::make_unique<PhaseReader>(std::move(reader).value()));
    ++result.new_rings;
  }
  return result;
}

}  // namespace stallscope::phase
