#include "doctor/python_checks.h"

#include <charconv>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "doctor/gpu_checks.h"

namespace stallscope::doctor {
namespace {

using S = CheckStatus;

std::string CudaText(int32_t v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

/// The oldest Linux driver that runs a CUDA major release (CUDA compatibility guide, "minor
/// version compatibility" table), as " (CUDA N.x needs V or newer)"; "" when not known.
std::string MinimumDriver(int32_t cuda_major) {
  const char* version = cuda_major == 11   ? "450.80.02"
                        : cuda_major == 12 ? "525.60.13"
                        : cuda_major == 13 ? "580.65.06"
                                           : nullptr;
  return version != nullptr ? fmt::format(" (CUDA {}.x needs {} or newer)", cuda_major, version)
                            : "";
}

Check InterpreterCheck(const PythonFacts& p) {
  const std::string id = "python.interpreter";
  const std::string title = "Python";
  if (!p.ran && p.interpreter.empty())
    return MakeCheck(id, title, S::kSkip, "not run (--no-python)");
  if (!p.ran) {
    return MakeCheck(id, title, S::kWarn, fmt::format("{}: {}", p.interpreter, p.error),
                     "run doctor inside the job's environment (activate its venv or conda env), "
                     "or name its interpreter: --python /path/to/python");
  }
  std::string detail =
      fmt::format("{} {} {}{}", p.implementation, p.version, p.executable, p.venv ? " (venv)" : "");
  // stallscope's in-job recorder and hooks support CPython 3.8+ (README "Works with").
  int major = 0, minor = 0;
  if (std::sscanf(p.version.c_str(), "%d.%d", &major, &minor) == 2 &&
      (major < 3 || (major == 3 && minor < 8))) {
    return MakeCheck(id, title, S::kWarn,
                     detail + ": stallscope run's in-job phase timing needs Python 3.8 or newer",
                     "use Python 3.8+ for the job");
  }
  return MakeCheck(id, title, S::kOk, std::move(detail));
}

Check TorchCheck(const PythonFacts& p) {
  const std::string id = "python.torch";
  const std::string title = "PyTorch";
  if (!p.ran) return MakeCheck(id, title, S::kSkip, "Python did not run");
  if (!p.torch_version) {
    return MakeCheck(id, title, S::kWarn,
                     fmt::format("torch does not import in {}: {}", p.executable, p.torch_error),
                     "install torch in this environment, or --python the interpreter that has it");
  }
  std::string detail = fmt::format("torch {}", *p.torch_version);
  if (p.torch_cuda) {
    detail += fmt::format(" built for CUDA {}", *p.torch_cuda);
  } else if (p.torch_hip) {
    detail += fmt::format(" built for ROCm {}", *p.torch_hip);
  } else {
    detail += " (CPU-only build)";
  }
  if (p.cudnn_version) {
    detail += fmt::format(", cuDNN {}.{}.{}", *p.cudnn_version / 1000, *p.cudnn_version / 100 % 10,
                          *p.cudnn_version % 100);
  }
  if (p.torch_threads) {
    detail +=
        fmt::format(", {} intra-op thread{}", *p.torch_threads, *p.torch_threads == 1 ? "" : "s");
  }
  return MakeCheck(id, title, S::kOk, std::move(detail));
}

Check CudaCheck(const Facts& f, size_t visible) {
  const std::string id = "python.cuda";
  const std::string title = "torch and the GPUs";
  const PythonFacts& p = f.python;
  if (!p.ran || !p.torch_version) return MakeCheck(id, title, S::kSkip, "torch did not import");
  if (f.gpu.driver != DriverState::kOk || f.gpu.gpus.empty()) {
    return MakeCheck(id, title, S::kSkip, "no NVIDIA GPU here: torch runs on the CPU");
  }
  if (!p.torch_cuda) {
    return MakeCheck(
        id, title, S::kFail,
        fmt::format("torch {} has no CUDA: it cannot use the {} GPU{}", *p.torch_version,
                    f.gpu.gpus.size(), f.gpu.gpus.size() == 1 ? "" : "s"),
        f.gpu.cuda_driver_version
            ? fmt::format("install a CUDA build of torch for CUDA {} or older (pytorch.org, "
                          "\"Get started\" picks the index URL)",
                          CudaText(*f.gpu.cuda_driver_version))
            : "install a CUDA build of torch (pytorch.org, \"Get started\")");
  }
  const std::optional<int32_t> built = ParseCudaVersion(*p.torch_cuda);
  const std::optional<int32_t> driver = f.gpu.cuda_driver_version;
  // CUDA compatibility guide: a driver runs CUDA up to its own version, and (minor version
  // compatibility, CUDA 11+) any minor release of its major version, without PTX JIT for newer.
  std::string compat;
  if (built && driver && *built > *driver) {
    if (*built / 1000 > *driver / 1000) {
      return MakeCheck(id, title, S::kFail,
                       fmt::format("torch is built for CUDA {} but driver {} supports CUDA {}",
                                   *p.torch_cuda, f.gpu.driver_version, CudaText(*driver)),
                       fmt::format("upgrade the driver{}, or install torch built for CUDA {}.x",
                                   MinimumDriver(*built / 1000), *driver / 1000));
    }
    compat = fmt::format(
        " (CUDA {} runs on the CUDA {} driver through minor version "
        "compatibility; kernels JIT-compiled from PTX need a newer driver)",
        *p.torch_cuda, CudaText(*driver));
  }
  if (p.cuda_available && !*p.cuda_available) {
    const std::string why = p.warnings.empty() ? "" : ": " + p.warnings.front();
    return MakeCheck(id, title, S::kFail, fmt::format("torch.cuda.is_available() is False{}", why),
                     "check gpu.driver and gpu.visible above; CUDA_VISIBLE_DEVICES set by a "
                     "launcher or a container without --gpus hides them");
  }
  std::string detail = fmt::format("torch sees {} GPU{}{}", p.device_count.value_or(0),
                                   p.device_count.value_or(0) == 1 ? "" : "s", compat);
  if (p.device_count && static_cast<size_t>(*p.device_count) != visible) {
    return MakeCheck(id, title, S::kWarn,
                     fmt::format("{}, but CUDA_VISIBLE_DEVICES and NVML give {}", detail, visible),
                     "compare `nvidia-smi -L` with torch.cuda.device_count(); MIG instances and "
                     "MPS change what CUDA lists");
  }
  return MakeCheck(id, title, S::kOk, std::move(detail));
}

}  // namespace

std::optional<int32_t> ParseCudaVersion(std::string_view text) {
  int32_t major = 0, minor = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, major);
  if (ec != std::errc() || p == end || *p != '.') return std::nullopt;
  auto [q, ec2] = std::from_chars(p + 1, end, minor);
  if (ec2 != std::errc() || major < 0 || major > 1000 || minor < 0 || minor > 9) {
    return std::nullopt;
  }
  return major * 1000 + minor * 10;
}

std::vector<Check> PythonChecks(const Facts& f) {
  const Visibility visible = VisibleGpus(f);
  const size_t count = visible.gpus.size() + visible.mig_instances.size();
  return {InterpreterCheck(f.python), TorchCheck(f.python), CudaCheck(f, count)};
}

}  // namespace stallscope::doctor
