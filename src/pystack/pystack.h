#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "pystack/layouts.h"
#include "pystack/process_memory.h"
#include "pystack/stack_reader.h"  // Frame, ThreadStack, PythonProcess, StackReader

namespace stallscope::pystack {

/// Finds _PyRuntime of `pid` (the executable or libpython3.X.so from /proc/PID/maps, symbols read
/// from the file on disk plus the load bias) and the layout for its version. Errors are one line
/// naming the pid: kNotFound (no process, or not CPython), kUnsupported (a version without a
/// layout), kPermission.
[[nodiscard]] Result<PythonProcess> FindPython(pid_t pid);

/// Every thread's stack (StackReader::Open + SampleAll, every frame up to
/// StackReader::kMaxFrames, within ReaderBudget): `py-spy dump` without stopping the target.
[[nodiscard]] Result<ProcessStacks> Dump(pid_t pid);

/// Reads a str object (compact ASCII or compact UCS1/2/4) as UTF-8; at most `max_chars`. With
/// `type` (&PyUnicode_Type), an object of another type is an error. Errors: kParse for an
/// implausible object, the reader's errors for unreadable memory.
[[nodiscard]] Result<std::string> ReadPyString(const MemoryReader& memory, const Layout& layout,
                                               uint64_t address, uint64_t max_chars = 4096,
                                               std::optional<uint64_t> type = std::nullopt);

}  // namespace stallscope::pystack
