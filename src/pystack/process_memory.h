#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/result.h"

namespace stallscope::pystack {

/// One span to read: `size` bytes at `address` into `out`.
struct ReadRequest {
  uint64_t address = 0;
  void* out = nullptr;
  size_t size = 0;
};

/// Reads bytes out of some address space. The frame walker only sees this interface, so it can
/// be tested (and fuzzed) against a fake address space.
class MemoryReader {
 public:
  /// The most requests one ReadMany takes (callers split longer lists).
  static constexpr size_t kMaxBatch = 64;

  virtual ~MemoryReader() = default;
  /// Copies `size` bytes at `address` into `out`. Errors: kPermission, kNotFound (process gone),
  /// kIo (address not mapped or a short read); the message names the pid and the address.
  [[nodiscard]] virtual Status Read(uint64_t address, void* out, size_t size) const = 0;
  /// Reads every request (at most kMaxBatch) in one go: ProcessMemory makes one
  /// process_vm_readv of them. Fails as Read does when any of them cannot be read whole; the
  /// buffers are then unspecified. The default reads them one by one.
  [[nodiscard]] virtual Status ReadMany(std::span<const ReadRequest> requests) const;
};

/// Reads another process's memory with process_vm_readv: the target is never stopped and never
/// ptrace-attached. Needs the same right as ptrace (same uid and Yama ptrace_scope, or
/// CAP_SYS_PTRACE). Thread-safe (stateless apart from the pid).
class ProcessMemory final : public MemoryReader {
 public:
  explicit ProcessMemory(pid_t pid) : pid_(pid) {}
  [[nodiscard]] Status Read(uint64_t address, void* out, size_t size) const override;
  [[nodiscard]] Status ReadMany(std::span<const ReadRequest> requests) const override;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

/// Reads a trivially copyable T at `address`.
template <typename T>
[[nodiscard]] Result<T> ReadValue(const MemoryReader& memory, uint64_t address) {
  T value{};
  TRY_STATUS(memory.Read(address, &value, sizeof(T)));
  return value;
}

}  // namespace stallscope::pystack
