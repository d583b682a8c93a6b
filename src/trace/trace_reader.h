#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "trace/trace_model.h"

namespace stallscope::trace {

/// Longest trace-event element the reader parses (README "trace": the memory bound). A longer
/// one is skipped and counted (ReadStats::oversized, also in malformed), its bytes dropped as
/// they stream past. Kineto's longest elements are a few KB (names are capped at
/// kMaxStringBytes anyway); this bounds the chunk buffer, and simdjson's buffers sized from it,
/// whatever the input.
inline constexpr size_t kMaxElementBytes = size_t{4} << 20;

struct ReadOptions {
  /// --rank: used when neither distributedInfo.rank nor the file name gives one.
  std::optional<int32_t> rank;
  /// Bytes of JSON handed to the parser at a time (memory stays O(chunk), not O(file)).
  /// 1 MiB keeps a chunk in cache between the scan and parse passes (8 MiB measured ~20% slower
  /// on control.json). An element larger than a chunk grows the buffer to fit it.
  size_t chunk_bytes = size_t{1} << 20;
  /// Inflate .gz input on a separate thread while the parser runs.
  bool threaded_inflate = true;
  /// kMaxElementBytes; smaller in tests.
  size_t max_element_bytes = kMaxElementBytes;
};

/// Reads one Kineto/Chrome trace (`.json` or `.json.gz`, detected by content), streaming:
/// memory is the chunk buffer plus the kept events, never the whole file, whatever the input:
/// blanks between tokens are dropped as they stream past (a gzip bomb of whitespace holds no
/// buffer) and an element longer than max_element_bytes is skipped. Malformed events are
/// counted in `stats.malformed`; a file that ends inside traceEvents yields what it holds with a
/// warning and `stats.truncated`. Fails (naming the file) only when it cannot be read or is not a
/// trace at all (no traceEvents array, not JSON).
[[nodiscard]] Result<RankTrace> ReadTrace(const std::string& path, const ReadOptions& options = {});

/// Rank from a file name: "rank-3", "rank_3", "rank3" (any case) anywhere in the base name,
/// else a trailing "_3" before ".json" / ".json.gz"; nullopt otherwise.
[[nodiscard]] std::optional<int32_t> RankFromFileName(std::string_view path);

/// Sets kFlagCudaGraph on GPU events launched by cudaGraphLaunch / cuGraphLaunch (matched by
/// correlation). ReadTrace does this; exposed for traces built in memory.
void MarkCudaGraphKernels(RankTrace& trace);

/// Expands PATHs: a directory gives its *.json / *.json.gz / *.pt.trace.json(.gz) regular files
/// (or links to them), sorted; FIFOs, devices, sockets and dangling links there are skipped
/// (ListTracePaths says which). A path named itself is kept whatever it is (`<(zcat t.gz)`).
/// kNotFound for a missing path or a folder without traces; kIo, with the errno's words, for a
/// path that cannot be reached ("too many levels of symbolic links", "permission denied").
[[nodiscard]] Result<std::vector<std::string>> ExpandTracePaths(
    const std::vector<std::string>& paths);

/// ExpandTracePaths's files, and one line for each entry of a folder it skipped although it is
/// named like a trace: "DIR/rank1.json: a FIFO, not a regular file; skipped" (issue 27 B15: a
/// FIFO there hung `trace DIR`; now it is skipped, and the user told).
struct TracePathList {
  std::vector<std::string> files;
  std::vector<std::string> skipped;
};
[[nodiscard]] Result<TracePathList> ListTracePaths(const std::vector<std::string>& paths);

/// Reads several files on up to `threads` threads (0 = hardware concurrency). Result order =
/// path order. The first unreadable file fails the whole call, unless `skipped` is given: then
/// unreadable files are left out and their errors appended there, and only a call where every
/// file fails is an error (the first one's).
[[nodiscard]] Result<std::vector<RankTrace>> ReadTraces(const std::vector<std::string>& paths,
                                                        const ReadOptions& options = {},
                                                        unsigned threads = 0,
                                                        std::vector<Error>* skipped = nullptr);

}  // namespace stallscope::trace
