#include "phase/phase_reader.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
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
constexpr uint32_t kMaxCapacity = 64u * 1024 * 1024;

Error OpenError(const std::string& path, std::string_view what) {
  const int err = errno;
  const ErrorCode code = err == ENOENT   ? ErrorCode::kNotFound
                         : err == EACCES ? ErrorCode::kPermission
                                         : ErrorCode::kIo;
  return MakeError(code, "phase ring {}: {}: {}", path, what, std::strerror(err));
}

/// Checks the fixed header fields; the error names the first field that is wrong.
Status ValidateHeader(const RingHeader& header, const std::string& path) {
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
  if (!std::has_single_bit(header.capacity) || header.capacity > kMaxCapacity) {
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

Result<PhaseReader> PhaseReader::Open(const std::string& path, const Clock* clock) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OpenError(path, "open");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Error error = OpenError(path, "stat");
    close(fd);
    return error;
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kSlotsOffset) {
    close(fd);
    return MakeError(ErrorCode::kParse,
                     "phase ring {}: {} bytes, cut before the first record (header needs {})", path,
                     size, kSlotsOffset);
  }
  // Map no more than the file holds: touching a page past its end would raise SIGBUS.
  void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return OpenError(path, "mmap");

  PhaseReader reader;
  reader.map_ = map;
  reader.map_bytes_ = size;
  reader.clock_ = clock;
  const RingHeader& header = *reader.header();
  TRY_STATUS(ValidateHeader(header, path));
  RingInfo& info = reader.info_;
  info.path = path;
  info.pid = header.pid;
  info.rank = header.rank;
  info.world_size = header.world_size;
  info.capacity = header.capacity;
  info.readable_slots = static_cast<uint32_t>(
      std::min<uint64_t>(header.capacity, (size - kSlotsOffset) / kSlotBytes));
  info.start_monotonic_ns = header.start_monotonic_ns;
  info.start_realtime_ns = header.start_realtime_ns;
  reader.names_.reserve(kNameCapacity);  // Name() hands out references: never reallocate
  return reader;
}

PhaseReader::PhaseReader(PhaseReader&& other) noexcept
    : map_(std::exchange(other.map_, nullptr)),
      map_bytes_(other.map_bytes_),
      info_(std::move(other.info_)),
      clock_(other.clock_),
      cursor_(other.cursor_),
      stuck_polls_(other.stuck_polls_),
      stuck_since_ns_(other.stuck_since_ns_),
      totals_(other.totals_),
      names_(std::move(other.names_)) {}

PhaseReader& PhaseReader::operator=(PhaseReader&& other) noexcept {
  if (this != &other) {
    if (map_ != nullptr) munmap(map_, map_bytes_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = other.map_bytes_;
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
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

uint64_t PhaseReader::write_index() const {
  return header()->write_index.load(std::memory_order_acquire);
}

uint64_t PhaseReader::writer_dropped() const {
  return header()->dropped.load(std::memory_order_relaxed);
}

PhaseReader::SlotState PhaseReader::ReadSlot(uint64_t index, PhaseRecord* out) const {
  const uint64_t slot_index = index & (info_.capacity - 1);
  if (slot_index >= info_.readable_slots) return SlotState::kMissing;
  const auto* slots =
      reinterpret_cast<const RingSlot*>(static_cast<const char*>(map_) + kSlotsOffset);
  const RingSlot& slot = slots[slot_index];
  // Seqlock read (see RingSlot in ring_format.h).
  const uint64_t seq = slot.seq.load(std::memory_order_acquire);
  if (seq > index + 1) return SlotState::kOverwritten;
  if (seq != index + 1) return SlotState::kNotCommitted;
  const int64_t ts_ns = slot.ts_ns.load(std::memory_order_relaxed);
  const int64_t arg = slot.arg.load(std::memory_order_relaxed);
  const uint64_t meta = slot.meta.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (slot.seq.load(std::memory_order_relaxed) != seq) return SlotState::kTorn;
  out->index = index;
  out->ts_ns = ts_ns;
  out->arg = arg;
  out->tid = static_cast<uint32_t>(meta);
  out->phase_id = static_cast<uint16_t>(meta >> 32);
  out->kind = static_cast<RecordKind>(static_cast<uint8_t>(meta >> 48));
  out->flags = static_cast<uint8_t>(meta >> 56);
  // A kind this build does not know is garbage, not a record.
  if (static_cast<uint8_t>(out->kind) == 0 || static_cast<uint8_t>(out->kind) > kMaxRecordKind) {
    return SlotState::kTorn;
  }
  return SlotState::kOk;
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
  PhaseRecord record;
  while (cursor_ < end) {
    const SlotState state = ReadSlot(cursor_, &record);
    if (state == SlotState::kNotCommitted && mode == DrainMode::kLive) {
      // A writer is between its claim and its commit: come back next poll, unless we have
      // been stuck on this slot for a while.
      if (cursor_ != start) break;
      const int64_t now_ns =
          clock_ != nullptr ? clock_->MonotonicNs() : SystemClock().MonotonicNs();
      if (stuck_polls_ == 0) stuck_since_ns_ = now_ns;
      if (++stuck_polls_ <= kMaxStuckPolls || now_ns - stuck_since_ns_ < kStuckTimeoutNs) break;
    }
    switch (state) {
      case SlotState::kOk:
        visit(ctx, record);
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
  PhaseRecord record;
  for (uint64_t index = begin; index < end; ++index) {
    switch (ReadSlot(index, &record)) {
      case SlotState::kOk:
        records.push_back(record);
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
  if (stats != nullptr) *stats = local;
  return records;
}

const std::vector<std::string>& PhaseReader::Names() {
  const uint32_t count =
      std::min(header()->name_count.load(std::memory_order_acquire), kNameCapacity);
  const char* table = static_cast<const char*>(map_) + kHeaderBlockBytes;
  for (size_t id = names_.size(); id < count; ++id) {
    const char* entry = table + id * kNameBytes;
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
