#include "doctor/python_checks.h"

#include <gtest/gtest.h>

#include <functional>

#include "doctor_facts_test_util.h"

namespace stallscope::doctor {
namespace {

using testing::Contains;
using testing::HealthyFacts;
using testing::One;
using S = CheckStatus;

TEST(PythonChecks, Table) {
  struct Case {
    std::string name;
    std::string id;
    std::function<void(Facts&)> change;
    S status;
    std::string detail_has;
    std::string fix_has = "";
  };
  const Case cases[] = {
      {"interpreter", "python.interpreter", [](Facts&) {}, S::kOk,
       "CPython 3.11.2 /venv/bin/python3 (venv)"},
      {"not found", "python.interpreter",
       [](Facts& f) {
         f.python.ran = false;
         f.python.error = "not found on PATH";
       },
       S::kWarn, "python3: not found on PATH", "--python"},
      {"not asked", "python.interpreter", [](Facts& f) { f.python = PythonFacts{}; }, S::kSkip,
       "not run (--no-python)"},
      {"old python", "python.interpreter", [](Facts& f) { f.python.version = "3.7.17"; }, S::kWarn,
       "needs Python 3.8"},
      {"torch", "python.torch", [](Facts&) {}, S::kOk,
       "torch 2.3.1+cu121 built for CUDA 12.1, cuDNN 8.9.2, 8 intra-op threads"},
      {"no torch", "python.torch",
       [](Facts& f) {
         f.python.torch_version.reset();
         f.python.torch_error = "ModuleNotFoundError: No module named 'torch'";
       },
       S::kWarn, "No module named 'torch'", "install torch"},
      {"rocm", "python.torch",
       [](Facts& f) {
         f.python.torch_cuda.reset();
         f.python.torch_hip = "6.0.32830";
       },
       S::kOk, "built for ROCm 6.0.32830"},
      {"cuda ok", "python.cuda", [](Facts&) {}, S::kOk, "torch sees 1 GPU"},
      {"cpu build on a gpu machine", "python.cuda", [](Facts& f) { f.python.torch_cuda.reset(); },
       S::kFail, "has no CUDA: it cannot use the 1 GPU", "CUDA 12.4 or older"},
      {"driver too old for torch", "python.cuda",
       [](Facts& f) { f.gpu.cuda_driver_version = 11040; }, S::kFail,
       "built for CUDA 12.1 but driver 550.54.15 supports CUDA 11.4",
       "CUDA 12.x needs 525.60.13 or newer"},
      {"minor version compatibility", "python.cuda",
       [](Facts& f) { f.gpu.cuda_driver_version = 12000; }, S::kOk,
       "through minor version compatibility"},
      {"not available", "python.cuda",
       [](Facts& f) {
         f.python.cuda_available = false;
         f.python.device_count = 0;
         f.python.warnings = {"CUDA initialization: The NVIDIA driver on your system is too old"};
       },
       S::kFail, "is_available() is False: CUDA initialization: The NVIDIA driver"},
      {"count differs", "python.cuda", [](Facts& f) { f.python.device_count = 2; }, S::kWarn,
       "torch sees 2 GPUs, but CUDA_VISIBLE_DEVICES and NVML give 1"},
      {"no gpu machine", "python.cuda",
       [](Facts& f) {
         f.gpu = GpuFacts{};
         f.python.cuda_available = false;
       },
       S::kSkip, "torch runs on the CPU"},
      {"no torch, no cuda check", "python.cuda", [](Facts& f) { f.python.torch_version.reset(); },
       S::kSkip, "torch did not import"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Facts f = HealthyFacts();
    c.change(f);
    const Check check = One(PythonChecks(f), c.id);
    EXPECT_EQ(check.status, c.status) << check.detail;
    EXPECT_TRUE(Contains(check.detail, c.detail_has)) << check.detail;
    EXPECT_TRUE(Contains(check.fix, c.fix_has)) << check.fix;
  }
}

TEST(ParseCudaVersion, Table) {
  EXPECT_EQ(ParseCudaVersion("12.1"), 12010);
  EXPECT_EQ(ParseCudaVersion("11.8"), 11080);
  EXPECT_EQ(ParseCudaVersion("12.10"), std::nullopt) << "minor above 9 does not fit NVML's code";
  EXPECT_EQ(ParseCudaVersion("12"), std::nullopt);
  EXPECT_EQ(ParseCudaVersion(""), std::nullopt);
  EXPECT_EQ(ParseCudaVersion("x.1"), std::nullopt);
  EXPECT_EQ(ParseCudaVersion("12.1.1"), 12010);
}

}  // namespace
}  // namespace stallscope::doctor
