#include "rundir/python_notes.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace stallscope::rundir {
namespace {

namespace fs = std::filesystem;

TEST(PythonNotes, StartAndHooksNotesMergePerProcess) {
  const fs::path dir = fs::temp_directory_path() / ("python_notes_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / kPythonNotesFile)
      << R"({"ts_ns":1,"pid":10,"event":"start","ppid":9,"python":"3.12.1",)"
         R"("implementation":"cpython","executable":"/venv/bin/python","venv":true,)"
         R"("argv":["/venv/bin/python","train.py"],"shim":true,"backend":"native",)"
         R"("backend_error":null,"recording":true,"auto":true})"
      << "\n"
      << "not json\n"
      << R"({"ts_ns":2,"pid":11,"event":"start","python":"3.8.18","shim":false,)"
         R"("backend":null,"backend_error":"native: cannot open","recording":false})"
      << "\n"
      << R"({"ts_ns":3,"pid":10,"event":"hooks","torch":"2.3.1",)"
         R"("mechanisms":{"forward_pass":"global hook","data_loading":"patch"},"error":null})"
      << "\n"
      << R"({"pid":"x","event":"start"})"
      << "\n";
  PythonNotes notes = ReadPythonNotes(dir.string());
  fs::remove_all(dir);
  EXPECT_EQ(notes.malformed_lines, 2);
  ASSERT_EQ(notes.processes.size(), 2u);
  const PythonProcess& a = notes.processes[0];
  EXPECT_EQ(a.pid, 10);
  EXPECT_EQ(a.ppid, 9);
  EXPECT_EQ(a.version, "3.12.1");
  EXPECT_TRUE(a.venv);
  EXPECT_TRUE(a.shim);
  EXPECT_TRUE(a.recording);
  EXPECT_EQ(a.backend, "native");
  EXPECT_FALSE(a.backend_error);
  EXPECT_EQ(a.argv, (std::vector<std::string>{"/venv/bin/python", "train.py"}));
  EXPECT_TRUE(a.hooks_noted);
  EXPECT_EQ(a.torch_version, "2.3.1");
  ASSERT_EQ(a.mechanisms.size(), 2u);
  EXPECT_EQ(a.mechanisms[1], (std::pair<std::string, std::string>{"forward_pass", "global hook"}))
      << "mechanisms in key order";
  const PythonProcess& b = notes.processes[1];
  EXPECT_FALSE(b.recording);
  EXPECT_EQ(b.backend_error, "native: cannot open");
  EXPECT_FALSE(b.hooks_noted);
}

TEST(PythonNotes, MissingFileIsNoProcesses) {
  PythonNotes notes = ReadPythonNotes("/nonexistent/run");
  EXPECT_TRUE(notes.processes.empty());
  EXPECT_EQ(notes.malformed_lines, 0);
}

TEST(PythonNotes, LooksLikePython) {
  struct Case {
    const char* comm;
    const char* cmdline;
    bool python;
  };
  for (const Case& c : {Case{"python3", "", true}, Case{"python3.12", "x", true},
                        Case{"bash", "/usr/bin/python3 -m x", true},
                        Case{"pt_main_thread", "/venv/bin/python train.py", true},
                        Case{"bash", "bash train.sh", false}, Case{"pythonista", "", false},
                        Case{"torchrun", "/venv/bin/torchrun x.py", false}}) {
    EXPECT_EQ(LooksLikePython(c.comm, c.cmdline), c.python) << c.comm << " | " << c.cmdline;
  }
}

TEST(PythonNotes, FlagsThatSkipTheStartupHook) {
  struct Case {
    const char* cmdline;
    std::optional<char> flag;
  };
  for (const Case& c : {
           Case{"python3 train.py", std::nullopt},
           Case{"python3 -I train.py", 'I'},
           Case{"python3 -E train.py", 'E'},
           Case{"python3 -S train.py", 'S'},
           Case{"python3 -uIS train.py", 'I'},
           Case{"python3 -u -X dev -E x.py", 'E'},
           Case{"python3 -X importtime -W ignore x.py -I", std::nullopt},
           Case{"python3 -Xdev -B -Es x.py", 'E'},
           Case{"python3 -c import sys -I", std::nullopt},
           Case{"python3 -m torch.distributed.run -E", std::nullopt},
           Case{"python3 train.py -E", std::nullopt},
           Case{"python3", std::nullopt},
       }) {
    EXPECT_EQ(PythonFlagIgnoringStartup(c.cmdline), c.flag) << c.cmdline;
  }
}

}  // namespace
}  // namespace stallscope::rundir
