#include "trace/huge_pages.h"

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace stallscope::trace {

void AdviseHugePages(const void* data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (data == nullptr || bytes < kHugePageMinBytes) return;
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;  // x86-64 and arm64 (4 KiB granule) PMD size
  auto begin = reinterpret_cast<uintptr_t>(data);
  uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  uintptr_t last = (begin + bytes) & ~(kHuge - 1);
  if (first >= last) return;
  // Only whole huge pages of the buffer: advice never reaches a neighbouring allocation. An
  // error (EINVAL without THP support) changes nothing, so it is ignored.
  static_cast<void>(::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE));
#else
  static_cast<void>(data);
  static_cast<void>(bytes);
#endif
}

}  // namespace stallscope::trace
