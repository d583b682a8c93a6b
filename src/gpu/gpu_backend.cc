#include "gpu/gpu_backend.h"

#include <fmt/format.h>

namespace stallscope::gpu {

std::vector<std::string> ClockEventReasonNames(uint64_t mask) {
  std::vector<std::string> names;
  uint64_t known = 0;
  for (const ClockEventReasonInfo& reason : kClockEventReasons) {
    known |= reason.bit;
    if ((mask & reason.bit) != 0) names.emplace_back(reason.name);
  }
  // Newer drivers add bits; keep them visible rather than dropping them.
  if (const uint64_t unknown = mask & ~known; unknown != 0) {
    names.push_back(fmt::format("{:#x}", unknown));
  }
  return names;
}

void GpuSample::Clear() {
  lost = false;
  util_gpu_pct.reset();
  util_mem_pct.reset();
  mem_used_bytes.reset();
  mem_total_bytes.reset();
  power_mw.reset();
  power_limit_mw.reset();
  energy_mj.reset();
  temperature_c.reset();
  sm_clock_mhz.reset();
  mem_clock_mhz.reset();
  clock_event_reasons.reset();
  pcie_tx_kbps.reset();
  pcie_rx_kbps.reset();
  pcie_gen.reset();
  pcie_width.reset();
  ecc_volatile_corrected.reset();
  ecc_volatile_uncorrected.reset();
  util_sample_count = 0;  // util_samples entries past the count are stale by contract
  processes.clear();      // keeps capacity
  gpm.reset();
}

void CarrySlowFields(const GpuSample& before, GpuSample& now) {
  if (now.lost || before.lost) return;
  auto carry = [](const auto& from, auto& to) {
    if (!to && from) to = from;
  };
  carry(before.energy_mj, now.energy_mj);
  carry(before.pcie_tx_kbps, now.pcie_tx_kbps);
  carry(before.pcie_rx_kbps, now.pcie_rx_kbps);
  carry(before.pcie_gen, now.pcie_gen);
  carry(before.pcie_width, now.pcie_width);
  carry(before.ecc_volatile_corrected, now.ecc_volatile_corrected);
  carry(before.ecc_volatile_uncorrected, now.ecc_volatile_uncorrected);
  carry(before.gpm, now.gpm);
  for (GpuProcess& p : now.processes) {
    if (p.sm_util_pct) continue;
    for (const GpuProcess& q : before.processes) {
      if (q.pid != p.pid || q.graphics != p.graphics) continue;
      p.sm_util_pct = q.sm_util_pct;
      p.mem_util_pct = q.mem_util_pct;
      break;
    }
  }
}

namespace {

/// The backend used when NVML is absent: no GPUs, every call is a no-op.
class NoGpuBackend final : public GpuBackend {
 public:
  size_t DeviceCount() const override { return 0; }
  const GpuStatic& Static(size_t /*i*/) const override { return empty_; }
  using GpuBackend::Sample;
  void Sample(size_t /*i*/, PollTiers /*due*/, GpuSample& out) override { out.Clear(); }
  std::string DriverVersion() const override { return {}; }
  std::string_view Name() const override { return "none"; }

 private:
  GpuStatic empty_;  // Static() has no valid index; answer something harmless anyway
};

}  // namespace

std::unique_ptr<GpuBackend> MakeNoGpuBackend() { return std::make_unique<NoGpuBackend>(); }

}  // namespace stallscope::gpu
