#pragma once
// stacks.jsonl: the Python stacks `run` sampled from the job's processes (docs/formats.md
// "Stack samples"). Frames and stacks are interned: a frame line and a stack line come once,
// before the first sample that uses them, so a file cut anywhere (a monitor killed mid-write)
// keeps every whole sample before the cut.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace stallscope::stacks {

/// The file name in a run directory.
inline constexpr std::string_view kStacksFile = "stacks.jsonl";
/// The format version of the header line.
inline constexpr int kStacksVersion = 1;

/// One Python frame: where a thread was.
struct StackFrame {
  std::string file;      ///< co_filename, as the interpreter holds it
  std::string function;  ///< the qualified name on 3.11+ ("Model.forward"), else co_name
  int line = 0;          ///< 0: the line table gave none
  std::string text;      ///< the source line, trimmed; empty when the file could not be read
  bool operator==(const StackFrame&) const = default;
};

/// A frame as the sampler holds it (views into the reader's buffers): what AddSample interns.
struct FrameView {
  std::string_view file;
  std::string_view function;
  int line = 0;
};

/// One sampled process.
struct StackProcess {
  int32_t pid = 0;
  int32_t rank = 0;
  bool worker = false;  ///< a DataLoader worker (forked from a rank's process), else a rank's main
  /// A process of the job that runs no hooks (StackTarget::other): neither a rank's nor a worker.
  bool other = false;
  int32_t forked_from = 0;
  std::string python;  ///< "3.11"
  std::string binary;  ///< the file holding _PyRuntime
  std::string cwd;     ///< its working directory when first read (relative co_filenames)
  std::string error;   ///< why it could not be read (one line); empty when it was
  /// Read again after it exec'd into another Python (a later line for the same pid).
  bool exec = false;
};

/// Whether `file` is one of stallscope's own Python files: its package (a folder named
/// `stallscope` holding `__init__.py`, `__main__.py`, `auto.py` and `_*.py`), wherever it is
/// installed. Their frames are in no stack stallscope writes or reads back (issue 40 P06: the
/// step wrapper of auto.py was reported as the job's line).
[[nodiscard]] bool IsStallscopeFile(std::string_view file);

/// One sample: thread `tid` of process `pid` at `t_ns` (CLOCK_MONOTONIC, the phase ring's clock)
/// was in stack `stack`.
struct StackSample {
  int64_t t_ns = 0;
  int32_t pid = 0;
  int32_t tid = 0;
  uint32_t stack = 0;
};

/// What the sampler said at its end.
struct StackTotals {
  int64_t samples = 0;
  int64_t torn = 0;    ///< walks dropped: the target moved while it was read
  int64_t failed = 0;  ///< reads that failed otherwise (the process exiting, no thread state yet)
  double cpu_s = 0;    ///< the sampling thread's own CPU time
  int64_t reads = 0;   ///< process_vm_readv calls
  /// Samples not written: they needed a frame or stack past the writer's bound
  /// (StackLogWriter::kMaxFrames, kMaxStacks).
  int64_t dropped = 0;
};

/// A stacks.jsonl read back. Frames and stacks are found by the ids their lines give (a damaged
/// line costs only the stacks and samples that name it); they are renumbered 0..n-1 here, so
/// `stacks` hold indices into `frames` and samples into `stacks`. At most kMaxFrames frames and
/// kMaxStacks stacks are kept (ReadStackLog says how many more were skipped).
struct StackLog {
  /// 4x what StackLogWriter writes (older files had no bound): ~90 MB of `diagnose` at the
  /// bound (docs/guarantees.md).
  static constexpr size_t kMaxFrames = size_t{1} << 18;
  static constexpr size_t kMaxStacks = size_t{1} << 18;
  static constexpr size_t kMaxStackDepth = 4096;  ///< frames in one stack line
  int main_hz = 0;
  int worker_hz = 0;
  std::vector<StackProcess> processes;
  std::vector<StackFrame> frames;
  std::vector<std::vector<uint32_t>> stacks;  ///< frame ids, innermost first
  std::vector<StackSample> samples;           ///< in file order (time order per thread)
  std::optional<StackTotals> totals;          ///< empty when the file has no end line
  int64_t malformed = 0;  ///< lines skipped: not JSON, wrong types, an id defined twice, ...
  /// Stack and sample lines skipped because they name a frame or stack no line defines (a
  /// damaged or skipped line) or one past kMaxFrames/kMaxStacks.
  int64_t unresolved = 0;
  std::vector<std::string> warnings;

  bool empty() const { return samples.empty() && processes.empty(); }
  const StackProcess* Process(int32_t pid) const;
};

/// Writes stacks.jsonl. Each Flush is one write(2) on an O_APPEND descriptor, so a writer killed
/// mid-run leaves whole lines. Not thread-safe (the sampling thread owns it).
class StackLogWriter {
 public:
  /// Frames and stacks interned (held in memory for the whole run): a sample that needs one
  /// more is not written, and counted in StackTotals::dropped. A job that keeps making new code
  /// (exec of generated source) costs the monitor no more than this.
  static constexpr size_t kMaxFrames = 65536;
  static constexpr size_t kMaxStacks = 65536;

  /// Creates (or truncates, as events.bin: the run directory is stallscope's) `path` and buffers
  /// the header line. Errors name the file. `max_interned`: the bound on frames and on stacks
  /// (kMaxFrames; tests pass smaller).
  [[nodiscard]] static Result<StackLogWriter> Open(const std::string& path, int main_hz,
                                                   int worker_hz, size_t max_interned = kMaxFrames);
  StackLogWriter(StackLogWriter&& other) noexcept;
  StackLogWriter& operator=(StackLogWriter&&) = delete;
  ~StackLogWriter();

  void AddProcess(const StackProcess& process);
  /// The source text of a frame seen for the first time ("" when unknown).
  using TextOf = std::function<std::string(const FrameView&)>;
  /// Interns `frames` (innermost first) and buffers a sample of them. Allocates only for frames
  /// and stacks seen for the first time (and `text` is asked only then). False (and nothing
  /// written) when a new frame or stack would pass the bound (kMaxFrames, kMaxStacks, or Open's
  /// `max_interned`): the caller counts it.
  bool AddSample(int64_t t_ns, int32_t pid, int32_t tid, std::span<const FrameView> frames,
                 const TextOf& text = {});
  /// The same with whole frames (their `text` as given).
  bool AddSample(int64_t t_ns, int32_t pid, int32_t tid, const std::vector<StackFrame>& frames);
  /// Buffers the end line.
  void AddTotals(const StackTotals& totals);
  /// Writes what is buffered. The first error is kept (later calls return it again and write
  /// nothing): the job goes on without stacks.
  [[nodiscard]] Status Flush();
  size_t frames_interned() const;

 private:
  struct Interner;
  StackLogWriter(int fd, std::string path);
  void AppendFrameLine(uint32_t id, const StackFrame& frame);
  int fd_ = -1;
  size_t max_interned_ = kMaxFrames;
  std::string path_;
  std::string buffer_;
  std::unique_ptr<Interner> interner_;
  std::optional<Error> error_;
};

/// Reads `<run_dir>/stacks.jsonl`. A missing file gives an empty log (no warning: a run without
/// stack sampling). Damage is data: malformed lines are counted, a file cut mid-line keeps what
/// precedes the cut, and a file that cannot be read is one warning naming it.
/// `max_kept`: the bound on frames and on stacks kept (StackLog::kMaxFrames; tests pass smaller).
[[nodiscard]] StackLog ReadStackLog(const std::string& run_dir,
                                    size_t max_kept = StackLog::kMaxFrames);

}  // namespace stallscope::stacks
