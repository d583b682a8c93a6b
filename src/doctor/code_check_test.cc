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
  EXPECT_EQ(CodeExitCode(r), 1);
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

TEST(RenderCodeText, VerdictFindingsWarningsAndNextStep) {
  CodeReport r = ParseCodeCheck(kAnswer);
  r.path = "src";
  const std::string text = RenderCodeText(r);
  EXPECT_EQ(text.rfind("WARN: 1 GPU-stalling pattern, 1 note in 2 files (src, Python 3.11.7)\n", 0),
            0u)
      << text;
  EXPECT_NE(text.find("WARN  train.py:12  loop-item\n      | total += loss.item()\n"
                      "      why: a sync\n      fix: do not\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("INFO  train.py:3   zero-grad-set-to-none\n      why: memset\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("warning: bad.py:4: SyntaxError: invalid syntax (not checked)\n"),
            std::string::npos);
  EXPECT_NE(text.find("warning: 2 malformed entries"), std::string::npos);
  EXPECT_NE(text.find("Next: fix the WARN lines"), std::string::npos);
}

TEST(RenderCodeText, EscapesControlCharactersFromTheCode) {
  CodeReport r = ParseCodeCheck(
      "STALLSCOPE_CODE_CHECK {\"findings\": [{\"file\": \"a\\u001b[2J.py\", \"line\": 1, "
      "\"id\": \"loop-item\", \"severity\": \"warn\", \"source\": \"x\\rforged\"}]}\n");
  const std::string text = RenderCodeText(r);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_NE(text.find("a\\x1b[2J.py:1"), std::string::npos) << text;
}

TEST(RenderCodeText, CleanAndFailed) {
  CodeReport clean = ParseCodeCheck(
      "STALLSCOPE_CODE_CHECK {\"python\": \"3.8.18\", "
      "\"files_checked\": 1, \"findings\": []}\n");
  clean.path = "train.py";
  EXPECT_EQ(RenderCodeText(clean),
            "OK: 0 GPU-stalling patterns, 0 notes in 1 file (train.py, Python 3.8.18)\n");
  CodeReport empty = ParseCodeCheck("STALLSCOPE_CODE_CHECK {\"files_checked\": 0}\n");
  empty.path = "docs";
  EXPECT_NE(RenderCodeText(empty).find("warning: no .py file in docs"), std::string::npos);
  CodeReport failed;
  failed.path = "x.py";
  failed.error = "python9 not found on PATH";
  EXPECT_EQ(RenderCodeText(failed),
            "stallscope doctor --code: could not check x.py: python9 not found on PATH\n");
}

TEST(RenderCodeJson, SchemaAndKeyOrder) {
  CodeReport r = ParseCodeCheck(kAnswer);
  r.path = "src";
  r.python = "python3";
  const std::string out = RenderCodeJson(r, "1.2.3");
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["tool"], "stallscope doctor --code");
  EXPECT_EQ(j["ran"], true);
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_EQ(j["summary"]["warn"], 1);
  EXPECT_EQ(j["summary"]["info"], 1);
  EXPECT_EQ(j["summary"]["exit_code"], 1);
  ASSERT_EQ(j["findings"].size(), 2u);
  EXPECT_EQ(j["findings"][0]["id"], "loop-item");
  EXPECT_EQ(j["findings"][0]["severity"], "warn");
  EXPECT_EQ(j["warnings"][0]["file"], "bad.py");
  EXPECT_LT(out.find("\"schema_version\""), out.find("\"summary\""));
  EXPECT_LT(out.find("\"summary\""), out.find("\"findings\""));
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
