#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "pystack/layouts.h"
#include "pystack/process_memory.h"

namespace stallscope::pystack {

/// One Python frame.
struct Frame {
  std::string file;         ///< co_filename
  std::string function;     ///< co_name
  std::optional<int> line;  ///< empty when the line table has no line for the instruction
};

/// The Python stack of one thread, innermost frame first.
struct ThreadStack {
  uint64_t thread_id = 0;                 ///< PyThreadState.thread_id (the pthread_t)
  std::optional<pid_t> native_thread_id;  ///< the kernel tid; 3.8-3.10: see NativeTidOf
  std::vector<Frame> frames;
  /// Set when the walk stopped on a torn or invalid read (the target moved while we read);
  /// `frames` then holds the frames read before it. Callers count and drop such samples.
  std::optional<Error> error;
};

/// Where a process's interpreter lives and how to read it. Found once per process.
struct PythonProcess {
  pid_t pid = 0;
  Layout layout;
  uint64_t runtime_address = 0;  ///< &_PyRuntime in the target
  std::string binary;            ///< the mapped file holding _PyRuntime
};

/// Finds _PyRuntime of `pid` (the executable or libpython3.X.so from /proc/PID/maps, symbols read
/// from the file on disk plus the load bias) and the layout for its version. Errors are one line
/// naming the pid: kNotFound (no process, or not CPython), kUnsupported (a version without a
/// layout), kPermission.
[[nodiscard]] Result<PythonProcess> FindPython(pid_t pid);

/// Reads every thread's stack of every interpreter through `memory`. Never stops the target.
/// Fails only when the interpreter list itself cannot be read; a thread whose walk hits a torn
/// read carries the error in ThreadStack::error.
[[nodiscard]] Result<std::vector<ThreadStack>> WalkThreads(const MemoryReader& memory,
                                                           const PythonProcess& process);

/// FindPython + WalkThreads through ProcessMemory: `py-spy dump` without stopping the target.
[[nodiscard]] Result<std::vector<ThreadStack>> Dump(pid_t pid);

/// Reads a str object (compact ASCII or compact UCS1/2/4) as UTF-8; at most `max_chars`.
[[nodiscard]] Result<std::string> ReadPyString(const MemoryReader& memory, const Layout& layout,
                                               uint64_t address, uint64_t max_chars = 4096);

}  // namespace stallscope::pystack
