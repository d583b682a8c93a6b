#include "pystack/process_memory.h"

#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace stallscope::pystack {

Status MemoryReader::ReadMany(std::span<const ReadRequest> requests) const {
  for (const ReadRequest& request : requests) {
    TRY_STATUS(Read(request.address, request.out, request.size));
  }
  return OkStatus();
}

namespace {

Status ReadFailed(pid_t pid, int err, uint64_t address, size_t size) {
  if (err == EPERM) {
    return MakeError(ErrorCode::kPermission,
                     "pid {}: may not read its memory (EPERM: needs the same user and Yama "
                     "ptrace_scope, or CAP_SYS_PTRACE)",
                     pid);
  }
  if (err == ESRCH) return MakeError(ErrorCode::kNotFound, "pid {}: no such process", pid);
  return MakeError(ErrorCode::kIo, "pid {}: cannot read {} bytes at {:#x}: {}", pid, size, address,
                   std::strerror(err));
}

}  // namespace

Status ProcessMemory::Read(uint64_t address, void* out, size_t size) const {
  iovec local{out, size};
  iovec remote{reinterpret_cast<void*>(address), size};  // NOLINT: an address in another process
  ssize_t got = process_vm_readv(pid_, &local, 1, &remote, 1, 0);
  if (got == static_cast<ssize_t>(size)) return OkStatus();
  if (got >= 0) {
    return MakeError(ErrorCode::kIo, "pid {}: short read at {:#x} ({} of {} bytes)", pid_, address,
                     got, size);
  }
  return ReadFailed(pid_, errno, address, size);
}

Status ProcessMemory::ReadMany(std::span<const ReadRequest> requests) const {
  if (requests.size() > kMaxBatch) {
    return MakeError(ErrorCode::kInternal, "pid {}: {} reads in one batch (at most {})", pid_,
                     requests.size(), kMaxBatch);
  }
  std::array<iovec, kMaxBatch> local{};
  std::array<iovec, kMaxBatch> remote{};
  size_t total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    local[i] = {requests[i].out, requests[i].size};
    remote[i] = {reinterpret_cast<void*>(requests[i].address),  // NOLINT: another process's
                 requests[i].size};
    total += requests[i].size;
  }
  const auto count = static_cast<unsigned long>(requests.size());
  ssize_t got = process_vm_readv(pid_, local.data(), count, remote.data(), count, 0);
  if (got == static_cast<ssize_t>(total)) return OkStatus();
  if (got >= 0) {
    // The kernel stops at the first span it cannot read: name that one.
    size_t at = 0;
    for (const ReadRequest& request : requests) {
      if (static_cast<size_t>(got) < at + request.size) {
        return MakeError(ErrorCode::kIo, "pid {}: short read at {:#x} ({} of {} bytes)", pid_,
                         request.address, static_cast<size_t>(got) - at, request.size);
      }
      at += request.size;
    }
    return MakeError(ErrorCode::kIo, "pid {}: short read ({} of {} bytes)", pid_, got, total);
  }
  return ReadFailed(pid_, errno, requests.empty() ? 0 : requests[0].address, total);
}

}  // namespace stallscope::pystack
