#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "pystack/layouts.h"
#include "pystack/process_memory.h"

namespace stallscope::pystack {

/// One Python frame.
struct Frame {
  std::string file;  ///< co_filename
  /// co_qualname on 3.11+ ("Model.forward", "main.<locals>.<lambda>"), co_name before.
  std::string function;
  std::optional<int> line;  ///< empty when the line table has no line for the instruction
};

/// The Python stack of one thread, innermost frame first.
struct ThreadStack {
  uint64_t thread_id = 0;                 ///< PyThreadState.thread_id (the pthread_t)
  std::optional<pid_t> native_thread_id;  ///< the kernel tid (3.8-3.10: read from glibc's pthread)
  std::vector<Frame> frames;
  /// The walk stopped at max_frames with outer frames left: `frames` holds the innermost ones.
  bool truncated = false;
  /// SampleAll/Dump only: set when this thread's walk stopped on a torn or invalid read (the
  /// target moved while we read; code kIo, "pid N: torn or invalid read: ..."). `frames` is then
  /// empty. Callers count and drop such stacks.
  std::optional<Error> error;
};

/// Every thread of a process (SampleAll), and what the per-process budget left out.
struct ProcessStacks {
  std::vector<ThreadStack> threads;  ///< the main thread first, then in thread-list order
  /// Empty when every thread state was read and walked; else why some were not, one line
  /// ("the thread lists hold more than 4096 thread states: the rest are not read; ..."). A forged
  /// or corrupt interpreter (a thread list that loops, lists shared between interpreters, a
  /// million thread states) is cut here instead of costing memory without bound.
  std::string cut;
  /// The thread lists were cut (the budget of thread states or interpreters spent, or a thread
  /// state met twice): no real interpreter does that.
  bool list_cut = false;
  size_t not_walked = 0;  ///< threads read but not walked: the frames or threads budget spent
};

/// Where a process's interpreter lives and how to read it. Found once per process (FindPython).
struct PythonProcess {
  pid_t pid = 0;
  Layout layout;
  uint64_t runtime_address = 0;  ///< &_PyRuntime in the target
  std::string binary;            ///< the mapped file holding _PyRuntime
  /// &PyCode_Type, &PyUnicode_Type, &PyBytes_Type in the target when the binary's symbols name
  /// them: objects read are then checked to be of the right type (a torn read rarely passes).
  std::optional<uint64_t> code_type;
  std::optional<uint64_t> str_type;
  std::optional<uint64_t> bytes_type;
};

/// What a StackReader did since it was made. Counters only grow.
struct ReaderStats {
  int64_t samples = 0;            ///< Sample/SampleAll calls that returned a stack
  int64_t torn = 0;               ///< walks stopped by a torn or invalid read (dropped by callers)
  int64_t code_cache_hits = 0;    ///< frames whose code object was known and still valid
  int64_t code_cache_misses = 0;  ///< code objects read whole (new, or changed since cached)
  int64_t reads = 0;              ///< MemoryReader Read/ReadMany calls (process_vm_readv calls)
};

/// What one StackReader may hold and read, whatever the target's memory says (the target is
/// not trusted: a C extension's bug or a hostile script can forge its interpreter). Each bound
/// is per process; README.md "Budgets" says what a forged interpreter gets. The defaults are
/// what the tool uses; tests and the fuzz harness may pass smaller ones.
struct ReaderBudget {
  /// Thread states read per thread search or SampleAll, all interpreters together; a thread
  /// state met a second time (a list that loops, or one shared by two interpreters) ends its
  /// list and is not read again.
  size_t thread_states = 4096;
  size_t interpreters = 256;
  /// Frames (every frame read counts, a torn walk's too) and bytes of frame names (file +
  /// function) one SampleAll returns, all threads together: Dump of 4096 threads 4096 frames
  /// deep stays within this.
  size_t frames_per_process = 65536;
  size_t name_bytes_per_process = size_t{16} << 20;
  /// Bytes of frame names one walk (one thread) returns: a deeper stack of long names is cut
  /// at its innermost frames, `truncated` set.
  size_t name_bytes_per_walk = size_t{4} << 20;
  /// The code cache: entries, and bytes of names and line tables held. Line tables are kept
  /// once per bytes object (code objects may share one: `code.replace(co_linetable=...)`); past
  /// the byte bound a code object's table is not kept but read again when its line is needed.
  size_t code_cache_entries = 16384;
  size_t code_cache_bytes = size_t{16} << 20;
};

/// Reads one process's Python stacks repeatedly and cheaply, never stopping it: FindPython once;
/// each code object's file, name and line table read once and cached by address, revalidated on
/// every use (its type, file/name/qualname/line-table pointers and first line are re-read in one
/// batch per sample, so a code object freed and replaced at the same address is read afresh,
/// never reported with the old one's names); on 3.11+ the thread's frame stack chunk is read in
/// one go; buffers are reused. Cost on a 40-frame stack: see README.md ("Cost").
///
/// Errors of Sample/SampleAll, each one line naming the pid:
///   kNotFound    no Python thread with that tid, no interpreter (finalizing), or the process is
///                gone ("pid N: no such process"): stop sampling it.
///   kPermission  may not read the process (ptrace rights): stop sampling it.
///   kIo          a torn or invalid read ("pid N: torn or invalid read: ..."): the target moved
///                while we read; transient, counted in stats().torn; drop the sample, go on.
///   kUnsupported the layout's offsets are implausible (a corrupt _Py_DebugOffsets).
/// Not thread-safe: one reader per process, used by one thread at a time.
class StackReader {
 public:
  /// The default and largest max_frames.
  static constexpr size_t kMaxFrames = 4096;

  /// FindPython(pid) + ProcessMemory(pid). Errors as FindPython's.
  [[nodiscard]] static Result<StackReader> Open(pid_t pid);
  /// Test seam: any address space (fakes under tests/support/pystack_fake_memory.h), any budget.
  StackReader(PythonProcess process, std::unique_ptr<MemoryReader> memory,
              ReaderBudget budget = {});
  StackReader(StackReader&&) noexcept;
  StackReader& operator=(StackReader&&) noexcept;
  ~StackReader();

  /// The stack of the thread whose kernel tid is `tid` (the pid for the main thread), innermost
  /// first, at most `max_frames` (capped at kMaxFrames): outer frames past it are left out and
  /// `truncated` set. Errors: see the class comment. Never stops the target.
  [[nodiscard]] Result<ThreadStack> Sample(pid_t tid, size_t max_frames = 256);
  /// Sample into `stack`, reusing its storage: a sampler that passes the same ThreadStack every
  /// time allocates nothing once its strings have grown (`frames` is left empty on an error).
  [[nodiscard]] Status SampleInto(pid_t tid, size_t max_frames, ThreadStack& stack);
  /// Every thread of every interpreter, within budget() (what it left out is in `cut`). A
  /// thread whose walk was torn carries the kIo error in ThreadStack::error (and counts in
  /// stats().torn); the call fails only when the thread list cannot be read, or the process is
  /// gone or unreadable.
  [[nodiscard]] Result<ProcessStacks> SampleAll(size_t max_frames = 256);
  /// SampleAll into `out`, reusing its storage, walking at most `max_threads` threads (the main
  /// thread first): a sampler that passes the same ProcessStacks allocates nothing once warm.
  [[nodiscard]] Status SampleAllInto(size_t max_frames, size_t max_threads, ProcessStacks& out);

  const ReaderStats& stats() const;
  const ReaderBudget& budget() const;
  /// Bytes of names and line tables the code cache holds now: at most
  /// ReaderBudget::code_cache_bytes, plus what one walk added past it.
  size_t code_cache_bytes() const;
  pid_t pid() const;
  const PythonProcess& process() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stallscope::pystack
