#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "sample/line_reader.h"
#include "sample/sample.h"

namespace stallscope::sample {

/// Appends the header line (JSON, no trailing newline) of a recording to `out`.
void AppendHeaderJson(const RecordingHeader& header, std::string& out);

/// Appends one sample as a JSON object (no trailing newline) to `out`: the seed 002 multi-GPU
/// keys (`timestamp`, `multi_gpu_data[]`, `aggregate_stats`) plus `host` and `processes`.
/// `header` supplies GPU names. Keys and float formats are stable (README "Recording format").
void AppendSampleJson(const RecordingHeader& header, const Sample& sample, std::string& out);

/// Output formats of `record`.
/// kSeed: seed 002's GPU monitor objects, one per line (the legacy single-GPU object for one
/// GPU, the multi-GPU object with aggregate_stats otherwise), for scripts that parse them; no
/// header, events or trailer.
enum class RecordingFormat { kJsonl, kCsv, kSeed };

/// Writes a recording line by line. Each line goes out in one write(2) on an O_APPEND fd, so a
/// writer killed with SIGKILL leaves a file that is valid up to its last complete line.
/// Not thread-safe; the buffer is reused, so steady state does not allocate.
class RecordingWriter {
 public:
  /// Creates/truncates `path` ("-" = stdout) and writes the header.
  [[nodiscard]] static Result<RecordingWriter> Open(const std::string& path,
                                                    const RecordingHeader& header,
                                                    RecordingFormat format);
  RecordingWriter(RecordingWriter&& other) noexcept;
  RecordingWriter& operator=(RecordingWriter&&) = delete;
  RecordingWriter(const RecordingWriter&) = delete;
  ~RecordingWriter();

  [[nodiscard]] Status Append(const Sample& sample);
  /// Writes an event line {"type":"event","kind":...,"ts_ns":...,...} (JSONL only).
  [[nodiscard]] Status AppendEvent(std::string_view kind, int64_t mono_ns, std::string_view detail);
  /// Writes the trailer line {"type":"end",...} with the followed command's exit code, if any.
  [[nodiscard]] Status Finish(int64_t end_mono_ns, std::optional<int> exit_code);

  /// Sample lines written in full (a failed write is not counted).
  int64_t samples_written() const { return samples_; }

 private:
  RecordingWriter(int fd, bool owns_fd, std::string path, RecordingHeader header,
                  RecordingFormat format);
  [[nodiscard]] Status WriteLine();

  int fd_ = -1;
  bool owns_fd_ = false;
  std::string path_;
  RecordingHeader header_;
  RecordingFormat format_;
  std::string line_;
  int64_t samples_ = 0;
};

/// One sample as seed 002's monitor object (no newline).
void AppendSeedObject(const RecordingHeader& header, const Sample& sample, std::string& out);

/// CSV column header for `header`'s GPUs (one row per sample; per-GPU columns gpuN_*).
void AppendCsvHeader(const RecordingHeader& header, std::string& out);
/// One CSV row; empty cells for absent metrics.
void AppendCsvRow(const RecordingHeader& header, const Sample& sample, std::string& out);

/// A recording read back.
struct Recording {
  RecordingHeader header;
  std::vector<Sample> samples;
  std::vector<std::string> events;    ///< raw event lines, in order
  bool finished = false;              ///< the "end" trailer was present
  std::optional<int> exit_code;       ///< from the trailer
  int64_t malformed_lines = 0;        ///< counted and skipped
  bool truncated_last_line = false;   ///< the file ended mid-line (writer killed)
  std::vector<std::string> warnings;  ///< one line each, for people
};

/// Receives a recording from StreamRecording as it is read, one line at a time.
class RecordingConsumer {
 public:
  virtual ~RecordingConsumer() = default;
  /// The header line, once, before any sample or event.
  virtual void OnHeader(const RecordingHeader& header) = 0;
  /// One sample line. `sample` is reused for the next line: copy what must outlive the call.
  virtual void OnSample(const Sample& sample) = 0;
  /// One event line, its raw JSON; the view is valid during the call only.
  virtual void OnEvent(std::string_view line) { (void)line; }
};

/// What a streamed recording said besides its header, samples and events.
struct RecordingTail {
  int64_t samples = 0;                ///< sample lines handed to OnSample
  bool finished = false;              ///< the "end" trailer was present
  std::optional<int> exit_code;       ///< from the trailer
  int64_t malformed_lines = 0;        ///< counted and skipped (overlong ones included)
  int64_t overlong_lines = 0;         ///< of malformed_lines: over the line cap, skipped unread
  bool truncated_last_line = false;   ///< the file ended mid-line (writer killed)
  std::vector<std::string> warnings;  ///< one line each, for people
};

/// Reads a JSONL recording forward in bounded chunks, one line at a time, and hands each part to
/// `consumer`: memory is one line and one Sample, never the file. Reads pipes (/dev/stdin).
/// Malformed lines and lines over `max_line_bytes` are counted and skipped; a torn last line
/// (writer killed) is a warning. Fails only when the file cannot be read or has no valid header,
/// with a message naming the file and the problem (a CSV recording is named as such).
[[nodiscard]] Result<RecordingTail> StreamRecording(const std::string& path,
                                                    RecordingConsumer& consumer,
                                                    size_t max_line_bytes = kMaxLineBytes);

/// Reads a whole JSONL recording into memory (StreamRecording, every sample kept): for callers
/// that need all samples at once. `summary` streams instead. Same errors as StreamRecording.
[[nodiscard]] Result<Recording> ReadRecording(const std::string& path);

}  // namespace stallscope::sample
