// The reader's file-level helpers: paths, ranks from file names, several files at once, and
// the CUDA-graph post pass (trace_reader.h).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <optional>
#include <system_error>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/thread_pool.h"
#include "base/units.h"
#include "trace/names.h"
#include "trace/trace_reader.h"

namespace stallscope::trace {

/// Rank from the file name: "rank-3", "rank_3", "rank3" anywhere in the base name, else a
/// trailing "_3" before ".json" / ".json.gz".
std::optional<int32_t> RankFromFileName(std::string_view path) {
  std::string_view base = path.substr(path.find_last_of('/') + 1);
  auto digits_at = [&](size_t i) -> std::optional<int32_t> {
    size_t j = i;
    while (j < base.size() && j - i < 9 && std::isdigit(static_cast<unsigned char>(base[j]))) ++j;
    if (j == i) return std::nullopt;
    int32_t v = 0;
    std::from_chars(base.data() + i, base.data() + j, v);
    return v;
  };
  for (size_t i = 0; i + 4 <= base.size(); ++i) {
    std::string_view word = base.substr(i, 4);
    bool is_rank = std::equal(word.begin(), word.end(), "rank", [](char c, char l) {
      return std::tolower(static_cast<unsigned char>(c)) == l;
    });
    if (!is_rank) continue;
    size_t j = i + 4;
    if (j < base.size() && (base[j] == '-' || base[j] == '_')) ++j;
    if (auto r = digits_at(j)) return r;
  }
  std::string_view stem = base;
  if (stem.ends_with(".gz")) stem.remove_suffix(3);
  if (!stem.ends_with(".json")) return std::nullopt;
  stem.remove_suffix(5);
  size_t k = stem.size();
  while (k > 0 && std::isdigit(static_cast<unsigned char>(stem[k - 1]))) --k;
  if (k == stem.size() || k == 0 || stem[k - 1] != '_' || stem.size() - k > 9) return std::nullopt;
  return digits_at(k);
}

/// Kernels launched by cudaGraphLaunch (matched by correlation) get kFlagCudaGraph.
void MarkCudaGraphKernels(RankTrace& trace) {
  std::unordered_set<int64_t> graph_launches;
  for (const Event& e : trace.events) {
    if (e.kind != EventKind::kRuntime && e.kind != EventKind::kDriver) continue;
    if (e.correlation < 0) continue;
    const std::string& name = trace.NameOf(e);
    if (IsGraphLaunchName(name)) {
      graph_launches.insert(e.correlation);
    }
  }
  if (graph_launches.empty()) return;
  for (Event& e : trace.events) {
    if (IsGpuKind(e.kind) && graph_launches.contains(e.correlation)) e.flags |= kFlagCudaGraph;
  }
}

namespace {

/// What a folder entry named like a trace is, when it is not a regular file; nullopt for a
/// regular file (or a link to one) and for a directory (never taken for a trace, never warned).
std::optional<std::string_view> NotARegularFile(const std::filesystem::directory_entry& entry) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = entry.status(ec);  // follows a link
  if (!ec && (fs::is_regular_file(st) || fs::is_directory(st))) return std::nullopt;
  if (ec || !fs::exists(st)) return "a symbolic link to nothing";
  switch (st.type()) {
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

}  // namespace

Result<TracePathList> ListTracePaths(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  TracePathList list;
  for (const std::string& p : paths) {
    std::error_code ec;
    fs::file_status st = fs::status(p, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) {
      // Issue 27 B21: a symbolic link loop or a folder it may not search is not "missing".
      return MakeError(ErrorCode::kIo, "{}: cannot open: {}", p, ErrnoText(ec.value()));
    }
    if (ec || !fs::exists(st)) {
      return MakeError(ErrorCode::kNotFound, "{}: no such file or directory", p);
    }
    if (!fs::is_directory(st)) {
      list.files.push_back(p);
      continue;
    }
    std::vector<std::string> found, skipped;
    for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (!name.ends_with(".json") && !name.ends_with(".json.gz")) continue;
      // Regular files only (symbolic links to them included): a FIFO named like a trace hung
      // the read (issue 27 B15), a device or socket is no trace either.
      if (auto kind = NotARegularFile(*it)) {
        skipped.push_back(
            fmt::format("{}: {}, not a regular file; skipped", it->path().string(), *kind));
      } else if (std::error_code type_ec; it->is_regular_file(type_ec)) {
        found.push_back(it->path().string());
      }
    }
    if (ec)
      return MakeError(ErrorCode::kIo, "{}: cannot list directory: {}", p, ErrnoText(ec.value()));
    std::sort(skipped.begin(), skipped.end());
    if (found.empty()) {
      return MakeError(ErrorCode::kNotFound,
                       "{}: no trace files (*.json, *.json.gz) in directory{}{}", p,
                       skipped.empty() ? "" : "; ", fmt::join(skipped, "; "));
    }
    std::sort(found.begin(), found.end());
    list.files.insert(list.files.end(), found.begin(), found.end());
    list.skipped.insert(list.skipped.end(), skipped.begin(), skipped.end());
  }
  return list;
}

Result<std::vector<std::string>> ExpandTracePaths(const std::vector<std::string>& paths) {
  TRY(TracePathList list, ListTracePaths(paths));
  return std::move(list.files);
}

Result<std::vector<RankTrace>> ReadTraces(const std::vector<std::string>& paths,
                                          const ReadOptions& options, unsigned threads,
                                          std::vector<Error>* skipped) {
  std::vector<std::optional<Result<RankTrace>>> results(paths.size());
  auto failures = ParallelFor(paths.size(), threads,
                              [&](size_t i) { results[i].emplace(ReadTrace(paths[i], options)); });
  for (const TaskFailure& f : failures) {
    results[f.index].emplace(MakeError(ErrorCode::kInternal, "{}: {}", paths[f.index], f.what));
  }
  std::vector<RankTrace> traces;
  traces.reserve(paths.size());
  std::optional<Error> first_error;
  for (auto& r : results) {
    if (r->ok()) {
      traces.push_back(std::move(*r).value());
      continue;
    }
    if (!first_error) first_error = r->error();
    if (skipped == nullptr) return r->take_error();
    skipped->push_back(r->take_error());
  }
  if (traces.empty() && first_error) return *first_error;
  return traces;
}

}  // namespace stallscope::trace
