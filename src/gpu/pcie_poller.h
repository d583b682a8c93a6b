#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace stallscope::gpu {

/// Reads PCIe throughput of every GPU on a thread of its own. NVML measures it over a 20 ms
/// window inside each call (20.7 ms of wall time per direction on an H100, issue 28), so the
/// sampling thread never makes the call: it takes the newest reading when there is one.
/// NVML is thread-safe; the read function must only call NVML (no backend state).
class PciePoller {
 public:
  /// Reads GPU `gpu`: true with both values in KB/s, false when there is nothing (an error);
  /// `unsupported` set to true stops asking that GPU.
  using ReadFn =
      std::function<bool(size_t gpu, uint32_t* tx_kbps, uint32_t* rx_kbps, bool* unsupported)>;

  /// Starts the thread: a first round at once, then one every `period_ns`.
  PciePoller(size_t gpus, int64_t period_ns, ReadFn read);
  /// Stops the thread (it ends its current call first: at most ~40 ms per GPU).
  ~PciePoller();
  PciePoller(const PciePoller&) = delete;
  PciePoller& operator=(const PciePoller&) = delete;

  /// The newest reading of GPU `i` when it is newer than the last one taken; else false.
  bool TakeNew(size_t i, uint32_t* tx_kbps, uint32_t* rx_kbps);

 private:
  struct Slot {
    uint32_t tx_kbps = 0;
    uint32_t rx_kbps = 0;
    uint64_t seq = 0;    ///< readings stored
    uint64_t taken = 0;  ///< seq when last taken
    bool unsupported = false;
  };
  void Loop();

  int64_t period_ns_;
  ReadFn read_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<Slot> slots_;
  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace stallscope::gpu
