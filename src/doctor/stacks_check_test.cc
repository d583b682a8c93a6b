#include "doctor/stacks_check.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "doctor_facts_test_util.h"
#include "temp_dir.h"

namespace stallscope::doctor {
namespace {

using testing::Contains;
using testing::HealthyFacts;
using S = CheckStatus;

TEST(ParseStackReadFacts, PtraceScope) {
  struct ScopeCase {
    std::optional<std::string_view> text;
    std::optional<int32_t> want;
  };
  const ScopeCase cases[] = {{"0\n", 0},         {"1\n", 1},   {"2", 2}, {"3\n", 3},
                             {"4\n", {}},        {"-1\n", {}}, {"", {}}, {"one\n", {}},
                             {std::nullopt, {}}, {"1 2\n", {}}};
  for (const ScopeCase& c : cases) {
    EXPECT_EQ(ParseStackReadFacts(c.text, std::nullopt).ptrace_scope, c.want)
        << (c.text ? *c.text : "(none)");
  }
}

TEST(ParseStackReadFacts, CapabilityAndSeccompFromStatus) {
  struct StatusCase {
    std::string_view status;
    std::optional<bool> cap;
    std::optional<int32_t> seccomp;
  };
  const StatusCase cases[] = {
      // Root on the host, and a default Docker container (no CAP_SYS_PTRACE, a filter).
      {"Name:\tx\nCapEff:\t000001ffffffffff\nSeccomp:\t0\nSeccomp_filters:\t0\n", true, 0},
      {"CapEff:\t00000000a80425fb\nSeccomp:\t2\nSeccomp_filters:\t1\n", false, 2},
      {"CapEff:\t0000000000080000\n", true, {}},  // bit 19 alone
      {"CapEff:\t0000000000000000\nSeccomp:\t1\n", false, 1},
      {"CapEff:\tzz\nSeccomp:\t9\n", {}, {}},          // malformed
      {"CapEff:\t\nSeccomp:", {}, {}},                 // truncated
      {"CapEff:\t00000000000000000\n", {}, {}},        // 17 digits: not a 64-bit mask
      {"Seccomp_filters:\t2\nCapEffX:\t1\n", {}, {}},  // other keys with the same start
      {"", {}, {}},
  };
  for (const StatusCase& c : cases) {
    const StackReadFacts f = ParseStackReadFacts(std::nullopt, c.status);
    EXPECT_EQ(f.cap_sys_ptrace, c.cap) << c.status;
    EXPECT_EQ(f.seccomp, c.seccomp) << c.status;
    EXPECT_FALSE(f.probed);
  }
}

TEST(KernelBefore48, Releases) {
  EXPECT_EQ(KernelBefore48("4.4.0-210-generic"), true);
  EXPECT_EQ(KernelBefore48("3.10.0-1160.el7.x86_64"), true);
  EXPECT_EQ(KernelBefore48("4.8.0"), false);
  EXPECT_EQ(KernelBefore48("4.19.0-26-amd64"), false);
  EXPECT_EQ(KernelBefore48("6.1.0-18-amd64"), false);
  EXPECT_EQ(KernelBefore48("5"), std::nullopt);
  EXPECT_EQ(KernelBefore48(""), std::nullopt);
  EXPECT_EQ(KernelBefore48("4.x"), std::nullopt);
}

StackReadFacts Probed(int32_t err, std::optional<int32_t> scope, std::optional<bool> cap,
                      std::optional<int32_t> seccomp = 0, std::string kernel = "6.1.0") {
  StackReadFacts f;
  f.probed = true;
  f.probe_errno = err;
  f.ptrace_scope = scope;
  f.cap_sys_ptrace = cap;
  f.seccomp = seccomp;
  f.kernel_release = std::move(kernel);
  return f;
}

TEST(PythonStacksCheck, Outcomes) {
  struct OutcomeCase {
    StackReadFacts facts;
    S status;
    std::string detail_has;
    std::string fix_has;
  };
  const OutcomeCase cases[] = {
      {Probed(0, 1, false), S::kOk, "needs CAP_SYS_PTRACE (sudo)", ""},
      {Probed(0, 1, true), S::kOk, "`dump` may read any process", ""},
      {Probed(0, std::nullopt, false), S::kOk, "no Yama ptrace_scope", ""},
      {Probed(0, 0, false), S::kOk, "this user's processes", ""},
      {Probed(EPERM, 3, true), S::kWarn, "ptrace_scope 3 forbids it", "and reboot"},
      {Probed(EPERM, 2, false), S::kWarn, "only CAP_SYS_PTRACE",
       "sysctl kernel.yama.ptrace_scope=1"},
      {Probed(EPERM, 1, false, 2, "4.4.0-210-generic"), S::kWarn,
       "only with CAP_SYS_PTRACE before Linux 4.8, and this is 4.4.0-210-generic",
       "docker run --cap-add SYS_PTRACE"},
      {Probed(EPERM, 1, false, 2, "6.1.0"), S::kWarn, "stricter than Docker's default",
       "seccomp profile that allows process_vm_readv"},
      {Probed(EPERM, 1, false, 2, ""), S::kWarn,
       "allows it on kernels 4.8+, or with CAP_SYS_PTRACE", "--cap-add SYS_PTRACE"},
      {Probed(ENOSYS, 1, false, 2), S::kWarn, "ENOSYS", "outside the sandbox"},
      {Probed(EPERM, 1, false, 0), S::kWarn, "EPERM", "AppArmor/SELinux"},
  };
  for (const OutcomeCase& c : cases) {
    const Check check = PythonStacksCheck(c.facts);
    EXPECT_EQ(check.id, "host.python_stacks");
    EXPECT_EQ(check.title, "Python stacks readable");
    EXPECT_EQ(check.status, c.status) << check.detail;
    EXPECT_TRUE(Contains(check.detail, c.detail_has)) << check.detail;
    EXPECT_TRUE(Contains(check.fix, c.fix_has)) << check.fix;
    EXPECT_EQ(check.fix.empty(), c.status == S::kOk) << check.fix;
    EXPECT_EQ(check.detail.find('\n'), std::string::npos) << check.detail;
  }
}

TEST(PythonStacksCheck, ProbeThatCouldNotRunIsSkipped) {
  StackReadFacts f;
  f.probe_error = "fork: resource temporarily unavailable";
  const Check check = PythonStacksCheck(f);
  EXPECT_EQ(check.status, S::kSkip);
  EXPECT_TRUE(Contains(check.detail, "fork: resource temporarily unavailable")) << check.detail;
}

TEST(StackChecks, OnlyWhenGathered) {
  Facts f = HealthyFacts();
  EXPECT_TRUE(StackChecks(f).empty());  // facts built by hand: no row (golden reports)
  f.host.python_stacks = Probed(0, 1, false);
  ASSERT_EQ(StackChecks(f).size(), 1U);
  // In RunChecks, with the host group.
  const std::vector<Check> all = RunChecks(f);
  auto at = [&all](std::string_view id) {
    return std::find_if(all.begin(), all.end(), [id](const Check& c) { return c.id == id; });
  };
  ASSERT_NE(at("host.python_stacks"), all.end());
  EXPECT_LT(at("host.nofile"), at("host.python_stacks"));
  EXPECT_LT(at("host.python_stacks"), at("storage.checkpoint"));
}

TEST(GatherStackRead, InjectedFilesAndARealProbe) {
  stallscope::testing::TempDir root{"stallscope_stacks_check"};
  std::filesystem::create_directories(root.path() / "sys/kernel/yama");
  std::filesystem::create_directories(root.path() / "self");
  std::ofstream(root.Sub("sys/kernel/yama/ptrace_scope")) << "2\n";
  std::ofstream(root.Sub("self/status")) << "CapEff:\t0000000000000000\nSeccomp:\t2\n";
  host::ProcFs fs;
  fs.proc_root = root.path().string();
  const StackReadFacts f = GatherStackRead(fs);
  EXPECT_EQ(f.ptrace_scope, 2);
  EXPECT_EQ(f.cap_sys_ptrace, false);
  EXPECT_EQ(f.seccomp, 2);
  EXPECT_FALSE(f.kernel_release.empty());
  EXPECT_TRUE(f.probed) << f.probe_error;
}

TEST(ProbeChildRead, ReadsItsChildHere) {
  StackReadFacts f;
  ProbeChildRead(f);
  ASSERT_TRUE(f.probed) << f.probe_error;
  if (f.probe_errno == EPERM || f.probe_errno == ENOSYS) {
    GTEST_SKIP() << "this machine refuses process_vm_readv of a child (errno " << f.probe_errno
                 << "): what the check reports as WARN";
  }
  EXPECT_EQ(f.probe_errno, 0);
  // Run twice: no child left behind (each is reaped), no descriptor leaked into the next.
  StackReadFacts again;
  ProbeChildRead(again);
  EXPECT_EQ(again.probe_errno, 0);
}

}  // namespace
}  // namespace stallscope::doctor
