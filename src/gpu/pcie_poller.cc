#include "gpu/pcie_poller.h"

#include <chrono>
#include <utility>

namespace stallscope::gpu {

PciePoller::PciePoller(size_t gpus, int64_t period_ns, ReadFn read)
    : period_ns_(period_ns), read_(std::move(read)), slots_(gpus) {
  thread_ = std::thread([this] { Loop(); });
}

PciePoller::~PciePoller() {
  {
    const std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool PciePoller::TakeNew(size_t i, uint32_t* tx_kbps, uint32_t* rx_kbps) {
  const std::lock_guard lock(mu_);
  if (i >= slots_.size()) return false;
  Slot& slot = slots_[i];
  if (slot.seq == slot.taken) return false;
  slot.taken = slot.seq;
  *tx_kbps = slot.tx_kbps;
  *rx_kbps = slot.rx_kbps;
  return true;
}

void PciePoller::Loop() {
  auto next = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  while (!stop_) {
    for (size_t i = 0; i < slots_.size() && !stop_; ++i) {
      if (slots_[i].unsupported) continue;
      lock.unlock();  // the call blocks ~40 ms: never while holding the slots
      uint32_t tx = 0, rx = 0;
      bool unsupported = false;
      const bool ok = read_(i, &tx, &rx, &unsupported);
      lock.lock();
      Slot& slot = slots_[i];
      slot.unsupported = unsupported;
      if (ok) {
        slot.tx_kbps = tx;
        slot.rx_kbps = rx;
        ++slot.seq;
      }
    }
    next += std::chrono::nanoseconds(period_ns_);
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;  // fell behind: no burst of catch-up rounds
    cv_.wait_until(lock, next, [this] { return stop_; });
  }
}

}  // namespace stallscope::gpu
