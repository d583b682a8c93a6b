#pragma once
// Recording pieces the renderers' tests share.

#include <cstddef>
#include <cstdint>

#include "sample/sample.h"

namespace stallscope::testing {

/// A header of `gpus` H100s on host "node-1" with 16 CPUs.
inline sample::RecordingHeader H100Header(size_t gpus) {
  sample::RecordingHeader h;
  h.hostname = "node-1";
  h.cpu_count = 16;
  for (uint32_t i = 0; i < gpus; ++i) {
    gpu::GpuStatic g;
    g.index = i;
    g.name = "NVIDIA H100 80GB HBM3";
    h.gpus.push_back(g);
  }
  return h;
}

}  // namespace stallscope::testing
