#pragma once

// Test code (stallscope_testing, tests/fakes/CMakeLists.txt): never linked into the tool.

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpu/gpu_backend.h"

namespace stallscope::gpu {

/// An in-memory GpuBackend for unit tests of the modules above `gpu` (sampler, recorder, ...).
/// Each Sample() either calls the callback or replays a script. Not thread-safe.
class FakeGpuBackend final : public GpuBackend {
 public:
  /// Fills `out` (already cleared) for GPU `gpu` on its `call`-th Sample() (0-based).
  using SampleFn = std::function<void(size_t gpu, size_t call, GpuSample& out)>;

  /// GPUs `gpus`; every Sample() is answered by `fn` (or left empty when `fn` is empty).
  explicit FakeGpuBackend(std::vector<GpuStatic> gpus, SampleFn fn = {},
                          std::string driver_version = "550.54.15");

  /// GPUs `gpus`; the k-th Sample() of GPU g returns script[g][k], and the last entry repeats
  /// once the script runs out (an empty script gives empty samples).
  static FakeGpuBackend Scripted(std::vector<GpuStatic> gpus,
                                 std::vector<std::vector<GpuSample>> script);

  /// A plausible static description of GPU `index` (an H100 SXM), for tests that need one.
  static GpuStatic MakeStatic(uint32_t index);

  size_t DeviceCount() const override { return gpus_.size(); }
  const GpuStatic& Static(size_t i) const override { return gpus_[i]; }
  using GpuBackend::Sample;
  void Sample(size_t i, PollTiers due, GpuSample& out) override;
  std::string DriverVersion() const override { return driver_version_; }
  std::optional<int32_t> CudaDriverVersion() const override { return cuda_driver_version_; }
  GpuHealth Health(size_t i) override { return health_[i]; }
  std::string_view Name() const override { return "fake"; }

  /// What Health(i) answers (default: nothing known).
  void SetHealth(size_t i, GpuHealth health) { health_[i] = std::move(health); }
  void SetCudaDriverVersion(std::optional<int32_t> version) { cuda_driver_version_ = version; }

  /// How many times Sample(i, ...) has been called.
  size_t SampleCalls(size_t i) const { return calls_[i]; }
  /// The tiers the last Sample(i, ...) asked for.
  PollTiers LastDue(size_t i) const { return last_due_[i]; }
  /// What ProbedCosts() answers (default: nothing measured).
  void SetProbedCosts(TierCosts costs) { costs_ = costs; }
  TierCosts ProbedCosts() const override { return costs_; }

 private:
  std::vector<GpuStatic> gpus_;
  SampleFn fn_;
  std::string driver_version_;
  std::vector<size_t> calls_;
  std::vector<PollTiers> last_due_;
  TierCosts costs_{};
  std::vector<GpuHealth> health_;
  std::optional<int32_t> cuda_driver_version_ = 12040;
};

}  // namespace stallscope::gpu
