#pragma once

#include <cstddef>
#include <vector>

namespace stallscope::trace {

/// Buffers at least this large are worth transparent huge pages (one 2 MiB fault instead of 512
/// 4 KiB ones); smaller ones are left alone.
inline constexpr size_t kHugePageMinBytes = size_t{2} << 20;

/// Asks the kernel to back the whole 2 MiB pages inside [data, data + bytes) with transparent
/// huge pages when they are first touched (madvise MADV_HUGEPAGE; Linux only, a no-op elsewhere,
/// for ranges under kHugePageMinBytes, and when THP is "never"). Page faults are much of the
/// time of `trace` on a big rank (bench/trace_bench.sh: 18,853 faults on one 250 MB rank, ~7 µs
/// each on the VM); untouched pages still cost no memory. Never fails: advice only.
void AdviseHugePages(const void* data, size_t bytes);

/// `v.reserve(n)`, then AdviseHugePages on the new capacity (before any of it is touched).
template <typename T>
void ReserveHuge(std::vector<T>& v, size_t n) {
  if (n <= v.capacity()) return;
  v.reserve(n);
  AdviseHugePages(v.data(), v.capacity() * sizeof(T));
}

}  // namespace stallscope::trace
