#include "pystack/process_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace stallscope::pystack {

Status ProcessMemory::Read(uint64_t address, void* out, size_t size) const {
  iovec local{out, size};
  iovec remote{reinterpret_cast<void*>(address), size};  // NOLINT: an address in another process
  ssize_t got = process_vm_readv(pid_, &local, 1, &remote, 1, 0);
  if (got == static_cast<ssize_t>(size)) return OkStatus();
  if (got >= 0) {
    return MakeError(ErrorCode::kIo, "pid {}: short read at {:#x} ({} of {} bytes)", pid_, address,
                     got, size);
  }
  int err = errno;
  if (err == EPERM) {
    return MakeError(ErrorCode::kPermission,
                     "pid {}: may not read its memory (EPERM: needs the same user and Yama "
                     "ptrace_scope, or CAP_SYS_PTRACE)",
                     pid_);
  }
  if (err == ESRCH) return MakeError(ErrorCode::kNotFound, "pid {}: no such process", pid_);
  return MakeError(ErrorCode::kIo, "pid {}: cannot read {} bytes at {:#x}: {}", pid_, size, address,
                   std::strerror(err));
}

}  // namespace stallscope::pystack
