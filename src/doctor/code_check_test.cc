#include "doctor/code_check.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "base/units.h"
#include "temp_dir.h"

namespace stallscope::doctor {
namespace {

constexpr std::string_view kAnswer =
    "hello from sitecustomize\n"
    "STALLSCOPE_CODE_CHECK {\"python\": \"3.11.7\", \"files_checked\": 2, \"truncated\": false, "
    "\"findings\": [{\"file\": \"train.py\", \"line\": 12, \"id\": \"loop-item\", \"severity\": "
    "\"warn\", \"why\": \"a sync\", \"fix\": \"do not\", \"source\": \"total += loss.item()\"}, "
    "{\"file\": \"train.py\", \"line\": 3, \"id\": \"zero-grad-set-to-none\", \"severity\": "
    "\"info\", \"why\": \"memset\", \"fix\": \"set_to_none=True\", \"source\": \"\"}, "
    "{\"file\": \"x.py\", \"id\": \"no-line\", \"severity\": \"warn\"}], "
    "\"warnings\": [{\"file\": \"bad.py\", \"line\": 4, \"message\": \"SyntaxError: invalid "
    "syntax (not checked)\"}, {\"line\": 1}]}\n";

TEST(ParseCodeCheck, ReadsFindingsAndCountsMalformedEntries) {
  const CodeReport r = ParseCodeCheck(kAnswer);
  ASSERT_TRUE(r.ran) << r.error;
  EXPECT_EQ(r.python_version, "3.11.7");
  EXPECT_EQ(r.files_checked, 2);
  ASSERT_EQ(r.findings.size(), 2u);
  EXPECT_EQ(r.findings[0].file, "train.py");
  EXPECT_EQ(r.findings[0].line, 12);
  EXPECT_EQ(r.findings[0].id, "loop-item");
  EXPECT_EQ(r.findings[0].severity, CodeSeverity::kWarn);
  EXPECT_EQ(r.findings[0].source, "total += loss.item()");
  EXPECT_EQ(r.findings[1].severity, CodeSeverity::kInfo);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0].line, 4);
  EXPECT_EQ(r.malformed, 2);  // the finding without a line, the warning without a file
  // Each warning is a file not checked, the malformed one too (issue 27 B12): a check that did
  // not read every file fails, whatever it found in the others.
  EXPECT_EQ(r.files_not_checked, 2);
  EXPECT_EQ(CodeExitCode(r), kCodeExitNotChecked);
  CodeReport all_read = r;
  all_read.files_not_checked = 0;
  EXPECT_EQ(CodeExitCode(all_read), 1);
}

TEST(ParseCodeCheck, BadAnswers) {
  struct Case {
    std::string_view text;
    std::string_view error;
  };
  for (const Case& c : {
           Case{"", "it printed no result line"},
           Case{"x STALLSCOPE_CODE_CHECK {}\n", "it printed no result line"},
           Case{"STALLSCOPE_CODE_CHECK [1]\n", "its result line is not a JSON object"},
           Case{"STALLSCOPE_CODE_CHECK {\"findings\": [", "its result line is not a JSON object"},
       }) {
    const CodeReport r = ParseCodeCheck(c.text);
    EXPECT_FALSE(r.ran) << c.text;
    EXPECT_EQ(r.error, c.error) << c.text;
    EXPECT_EQ(CodeExitCode(r), 2);
  }
  // Every truncation of a good answer either parses or says why; none crashes.
  for (size_t n = 0; n <= kAnswer.size(); ++n) {
    const CodeReport r = ParseCodeCheck(kAnswer.substr(0, n));
    EXPECT_TRUE(r.ran || !r.error.empty()) << n;
  }
}

TEST(ParseCodeCheck, NoFindingsOrOnlyInfoExitZero) {
  EXPECT_EQ(CodeExitCode(ParseCodeCheck("STALLSCOPE_CODE_CHECK {\"findings\": []}\n")), 0);
  const CodeReport info = ParseCodeCheck(
      "STALLSCOPE_CODE_CHECK {\"findings\": [{\"file\": \"a.py\", \"line\": 1, \"id\": \"x\", "
      "\"severity\": \"info\"}]}\n");
  EXPECT_EQ(CodeExitCode(info), 0);
  // A severity this version does not know counts as warn.
  const CodeReport odd = ParseCodeCheck(
      "STALLSCOPE_CODE_CHECK {\"findings\": [{\"file\": \"a.py\", \"line\": 1, \"id\": \"x\", "
      "\"severity\": \"fail\"}]}\n");
  EXPECT_EQ(CodeExitCode(odd), 1);
}

TEST(CheckCode, MissingInterpreterAndRealPython) {
  const CodeReport missing = CheckCode("stallscope-no-such-python", "x.py", kNsPerSec);
  EXPECT_FALSE(missing.ran);
  EXPECT_EQ(missing.error, "stallscope-no-such-python not found on PATH");
  // A fake interpreter that crashes: the last line of its stderr is the reason.
  stallscope::testing::TempDir dir;
  const std::string fake = dir.Sub("python");
  std::ofstream(fake) << "#!/bin/sh\necho 'Traceback' >&2\necho 'boom' >&2\nexit 3\n";
  chmod(fake.c_str(), 0755);
  const CodeReport crashed = CheckCode(fake, "x.py", 10 * kNsPerSec);
  EXPECT_FALSE(crashed.ran);
  EXPECT_EQ(crashed.error, fake + " exited 3: boom");
}

TEST(CodeCheckScript, IsTheAnalyzer) {
  EXPECT_NE(CodeCheckScript().find("import ast"), std::string_view::npos);
  EXPECT_NE(CodeCheckScript().find(kCodeCheckMarker), std::string_view::npos);
}

}  // namespace
}  // namespace stallscope::doctor
