#include "stacks/stack_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "base/file_read.h"
#include "base/json_fields.h"
#include "base/units.h"

namespace stallscope::stacks {
namespace {

using nlohmann::json;

Status WriteAllTo(int fd, const std::string& data, const std::string& path) {
  const char* p = data.data();
  size_t size = data.size();
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return MakeError(ErrorCode::kIo, "{}: write failed: {}", path, std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

// Frames by their fields, looked up with views (no key built per sample): C++20 heterogeneous
// lookup in the unordered_map.
struct FrameKeyHash {
  using is_transparent = void;
  size_t operator()(const FrameView& f) const {
    const size_t h = std::hash<std::string_view>{}(f.file);
    return (h * 31 + std::hash<std::string_view>{}(f.function)) * 31 + static_cast<size_t>(f.line);
  }
};
struct FrameKeyEqual {
  using is_transparent = void;
  bool operator()(const FrameView& a, const FrameView& b) const {
    return a.line == b.line && a.file == b.file && a.function == b.function;
  }
};

struct StackKeyHash {
  size_t operator()(const std::vector<uint32_t>& v) const {
    size_t h = v.size();
    for (uint32_t x : v) h = h * 1000003u ^ x;
    return h;
  }
};

}  // namespace

struct StackLogWriter::Interner {
  std::deque<StackFrame> owned;  // the interned frames: stable addresses for the keys' views
  std::unordered_map<FrameView, uint32_t, FrameKeyHash, FrameKeyEqual> frames;
  std::unordered_map<std::vector<uint32_t>, uint32_t, StackKeyHash> stacks;
  std::vector<uint32_t> ids;  // reused per sample
};

bool IsStallscopeFile(std::string_view file) {
  const size_t slash = file.rfind('/');
  if (slash == std::string_view::npos) return false;
  const std::string_view dir = file.substr(0, slash), base = file.substr(slash + 1);
  if (dir != "stallscope" && !dir.ends_with("/stallscope")) return false;
  return base == "__init__.py" || base == "__main__.py" || base == "auto.py" ||
         (base.starts_with('_') && base.ends_with(".py"));
}

const StackProcess* StackLog::Process(int32_t pid) const {
  for (const auto& p : processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

Result<StackLogWriter> StackLogWriter::Open(const std::string& path, int main_hz, int worker_hz,
                                            size_t max_interned) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return MakeError(ErrorCode::kIo, "{}: cannot create: {}", path, std::strerror(errno));
  StackLogWriter writer(fd, path);
  writer.max_interned_ = std::min({max_interned, kMaxFrames, kMaxStacks});
  writer.buffer_ = fmt::format(R"({{"stallscope_stacks":{},"hz":{},"worker_hz":{}}})"
                               "\n",
                               kStacksVersion, main_hz, worker_hz);
  return writer;
}

StackLogWriter::StackLogWriter(int fd, std::string path)
    : fd_(fd), path_(std::move(path)), interner_(std::make_unique<Interner>()) {}

StackLogWriter::StackLogWriter(StackLogWriter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      max_interned_(other.max_interned_),
      path_(std::move(other.path_)),
      buffer_(std::move(other.buffer_)),
      interner_(std::move(other.interner_)),
      error_(std::move(other.error_)) {}

size_t StackLogWriter::frames_interned() const { return interner_->owned.size(); }

StackLogWriter::~StackLogWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void StackLogWriter::AddProcess(const StackProcess& p) {
  buffer_ += fmt::format(R"({{"process":{},"rank":{},"worker":{},"forked_from":{})", p.pid, p.rank,
                         p.worker, p.forked_from);
  auto field = [&](const char* key, const std::string& value) {
    if (value.empty()) return;
    buffer_ += fmt::format(R"(,"{}":)", key);
    AppendJsonString(buffer_, value);
  };
  field("python", p.python);
  field("binary", p.binary);
  field("cwd", p.cwd);
  field("error", p.error);
  if (p.other) buffer_ += R"(,"other":true)";
  if (p.exec) buffer_ += R"(,"exec":true)";
  buffer_ += "}\n";
}

bool StackLogWriter::AddSample(int64_t t_ns, int32_t pid, int32_t tid,
                               std::span<const FrameView> frames, const TextOf& text) {
  Interner& in = *interner_;
  in.ids.clear();
  for (const FrameView& f : frames) {
    auto it = in.frames.find(f);
    if (it == in.frames.end()) {
      if (in.owned.size() >= max_interned_) return false;
      const auto id = static_cast<uint32_t>(in.owned.size());
      StackFrame& owned = in.owned.emplace_back(
          StackFrame{std::string(f.file), std::string(f.function), f.line, text ? text(f) : ""});
      it = in.frames.emplace(FrameView{owned.file, owned.function, owned.line}, id).first;
      AppendFrameLine(id, owned);
      std::string().swap(owned.text);  // written: the key is file, function and line
    }
    in.ids.push_back(it->second);
  }
  auto it = in.stacks.find(in.ids);
  if (it == in.stacks.end()) {
    if (in.stacks.size() >= max_interned_) return false;
    it = in.stacks.emplace(in.ids, static_cast<uint32_t>(in.stacks.size())).first;
    buffer_ += fmt::format(R"({{"stack":{},"frames":[{}]}})"
                           "\n",
                           it->second, fmt::join(in.ids, ","));
  }
  buffer_ += fmt::format("[{},{},{},{}]\n", t_ns, pid, tid, it->second);
  return true;
}

bool StackLogWriter::AddSample(int64_t t_ns, int32_t pid, int32_t tid,
                               const std::vector<StackFrame>& frames) {
  std::vector<FrameView> views;
  for (const StackFrame& f : frames) views.push_back({f.file, f.function, f.line});
  return AddSample(t_ns, pid, tid, views, [&](const FrameView& v) {
    for (const StackFrame& f : frames) {
      if (f.file == v.file && f.function == v.function && f.line == v.line) return f.text;
    }
    return std::string();
  });
}

void StackLogWriter::AppendFrameLine(uint32_t id, const StackFrame& f) {
  buffer_ += fmt::format(R"({{"frame":{},"file":)", id);
  AppendJsonString(buffer_, f.file);
  buffer_ += R"(,"function":)";
  AppendJsonString(buffer_, f.function);
  buffer_ += fmt::format(R"(,"line":{})", f.line);
  if (!f.text.empty()) {
    buffer_ += R"(,"text":)";
    AppendJsonString(buffer_, f.text);
  }
  buffer_ += "}\n";
}

void StackLogWriter::AddTotals(const StackTotals& t) {
  buffer_ += fmt::format(
      R"({{"end":true,"samples":{},"torn":{},"failed":{},"cpu_s":{:.6f},"reads":{},"dropped":{}}})"
      "\n",
      t.samples, t.torn, t.failed, t.cpu_s, t.reads, t.dropped);
}

Status StackLogWriter::Flush() {
  if (error_) return *error_;
  if (buffer_.empty()) return OkStatus();
  Status st = WriteAllTo(fd_, buffer_, path_);
  buffer_.clear();
  if (!st.ok()) error_ = st.error();
  return st;
}

namespace {

// The ids lines give, parallel to StackLog::frames and ::stacks; samples hold the stack id the
// file gives until Resolve renumbers everything.
struct FileIds {
  std::vector<uint32_t> frames;
  std::vector<uint32_t> stacks;
  size_t max_kept = StackLog::kMaxFrames;  // frames, and stacks, kept (ReadStackLog's bound)
  int64_t over_bound = 0;                  // frame and stack lines past it
  // Once the stacks' bound is met: the ids kept (at most kMaxStacks), so that a sample of a
  // stack skipped is not held until Resolve (a file past the bound has many: 160 MB for 10 M).
  std::unordered_set<uint32_t> kept_stacks;
};

bool ApplySampleLine(const json& j, StackLog& log, FileIds& ids) {
  if (j.size() != 4 || !j[0].is_number_integer() || !j[1].is_number_integer() ||
      !j[2].is_number_integer() || !j[3].is_number_unsigned() || j[3].get<uint64_t>() > UINT32_MAX)
    return false;
  const auto stack = j[3].get<uint32_t>();
  if (!ids.kept_stacks.empty() && !ids.kept_stacks.contains(stack)) {
    ++log.unresolved;  // its stack is past the bound (or not there at all)
    return true;
  }
  log.samples.push_back(
      StackSample{j[0].get<int64_t>(), j[1].get<int32_t>(), j[2].get<int32_t>(), stack});
  return true;
}

bool ApplyFrameLine(const json& j, StackLog& log, FileIds& ids) {
  const auto id = JsonOpt<uint32_t>(j, "frame");
  if (!id) return false;
  if (log.frames.size() >= ids.max_kept) {
    ++ids.over_bound;
    return true;
  }
  StackFrame f;
  f.file = JsonOpt<std::string>(j, "file").value_or("");
  f.function = JsonOpt<std::string>(j, "function").value_or("");
  f.line = JsonOpt<int32_t>(j, "line").value_or(0);
  f.text = JsonOpt<std::string>(j, "text").value_or("");
  log.frames.push_back(std::move(f));
  ids.frames.push_back(*id);
  return true;
}

bool ApplyStackLine(const json& j, StackLog& log, FileIds& ids) {
  const auto id = JsonOpt<uint32_t>(j, "stack");
  auto it = j.find("frames");
  if (!id || it == j.end() || !it->is_array() || it->size() > StackLog::kMaxStackDepth)
    return false;
  std::vector<uint32_t> frames;
  frames.reserve(it->size());
  for (const auto& v : *it) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > UINT32_MAX) return false;
    frames.push_back(v.get<uint32_t>());
  }
  if (log.stacks.size() >= ids.max_kept) {
    if (ids.kept_stacks.empty()) ids.kept_stacks.insert(ids.stacks.begin(), ids.stacks.end());
    ++ids.over_bound;
    return true;
  }
  log.stacks.push_back(std::move(frames));
  ids.stacks.push_back(*id);
  return true;
}

bool ApplyProcessLine(const json& j, StackLog& log) {
  StackProcess p;
  p.pid = JsonOpt<int32_t>(j, "process").value_or(0);
  if (p.pid <= 0) return false;
  p.rank = JsonOpt<int32_t>(j, "rank").value_or(0);
  p.worker = JsonOpt<bool>(j, "worker").value_or(false);
  p.forked_from = JsonOpt<int32_t>(j, "forked_from").value_or(0);
  p.python = JsonOpt<std::string>(j, "python").value_or("");
  p.binary = JsonOpt<std::string>(j, "binary").value_or("");
  p.cwd = JsonOpt<std::string>(j, "cwd").value_or("");
  p.error = JsonOpt<std::string>(j, "error").value_or("");
  p.other = JsonOpt<bool>(j, "other").value_or(false);
  p.exec = JsonOpt<bool>(j, "exec").value_or(false);
  log.processes.push_back(std::move(p));
  return true;
}

bool ApplyEndLine(const json& j, StackLog& log) {
  StackTotals t;
  t.samples = JsonOpt<int64_t>(j, "samples").value_or(0);
  t.torn = JsonOpt<int64_t>(j, "torn").value_or(0);
  t.failed = JsonOpt<int64_t>(j, "failed").value_or(0);
  t.reads = JsonOpt<int64_t>(j, "reads").value_or(0);
  t.dropped = JsonOpt<int64_t>(j, "dropped").value_or(0);
  auto cpu = j.find("cpu_s");
  if (cpu != j.end() && cpu->is_number()) t.cpu_s = cpu->get<double>();
  log.totals = t;
  return true;
}

bool ApplyLine(const json& j, StackLog& log, FileIds& ids) {
  if (j.is_array()) return ApplySampleLine(j, log, ids);
  if (!j.is_object()) return false;
  if (j.contains("frame")) return ApplyFrameLine(j, log, ids);
  if (j.contains("stack")) return ApplyStackLine(j, log, ids);
  if (j.contains("process")) return ApplyProcessLine(j, log);
  if (j.contains("end")) return ApplyEndLine(j, log);
  if (auto v = JsonOpt<int32_t>(j, "stallscope_stacks")) {
    log.main_hz = JsonOpt<int32_t>(j, "hz").value_or(0);
    log.worker_hz = JsonOpt<int32_t>(j, "worker_hz").value_or(0);
    return *v == kStacksVersion;
  }
  return false;
}

// Orders `items` by their file ids (stable: of an id given twice the first line stands, the
// others are counted in `duplicates`), leaving `file_ids` sorted and unique. Files our writer
// made are in order already: nothing moves.
template <typename T>
void SortById(std::vector<T>& items, std::vector<uint32_t>& file_ids, int64_t& duplicates) {
  if (std::adjacent_find(file_ids.begin(), file_ids.end(), std::greater_equal<>()) ==
      file_ids.end())
    return;
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return file_ids[a] < file_ids[b]; });
  std::vector<T> sorted;
  std::vector<uint32_t> sorted_ids;
  sorted.reserve(items.size());
  sorted_ids.reserve(items.size());
  for (size_t i : order) {
    if (!sorted_ids.empty() && sorted_ids.back() == file_ids[i]) {
      ++duplicates;
      continue;
    }
    sorted.push_back(std::move(items[i]));
    sorted_ids.push_back(file_ids[i]);
  }
  items.swap(sorted);
  file_ids.swap(sorted_ids);
}

// The index of file id `id` in sorted `file_ids`, if any.
std::optional<uint32_t> IndexOf(const std::vector<uint32_t>& file_ids, uint32_t id) {
  if (id < file_ids.size() && file_ids[id] == id) return id;  // the usual file: ids are 0..n-1
  auto it = std::lower_bound(file_ids.begin(), file_ids.end(), id);
  if (it == file_ids.end() || *it != id) return std::nullopt;
  return static_cast<uint32_t>(it - file_ids.begin());
}

// Frames, stacks and samples renumbered 0..n-1 by the ids the file gave; a stack naming a frame
// no line defines is dropped, and so is a sample naming a stack that is not there (counted in
// `unresolved`), nothing else (issue 40 P04: one damaged line dropped every later sample).
void Resolve(StackLog& log, FileIds& ids) {
  SortById(log.frames, ids.frames, log.malformed);
  SortById(log.stacks, ids.stacks, log.malformed);
  std::vector<uint32_t> kept_ids;  // the file ids of the stacks kept, in order
  size_t kept = 0;
  std::vector<bool> own(log.frames.size());  // stallscope's frames: left out of every stack
  for (size_t f = 0; f < own.size(); ++f) own[f] = IsStallscopeFile(log.frames[f].file);
  for (size_t s = 0; s < log.stacks.size(); ++s) {
    std::vector<uint32_t>& frames = log.stacks[s];
    bool whole = true;
    for (uint32_t& id : frames) {
      const auto index = IndexOf(ids.frames, id);
      whole = whole && index.has_value();
      id = index.value_or(0);
    }
    if (!whole) {
      ++log.unresolved;
      continue;
    }
    std::erase_if(frames, [&](uint32_t id) { return own[id]; });
    if (kept != s) log.stacks[kept] = std::move(frames);
    kept_ids.push_back(ids.stacks[s]);
    ++kept;
  }
  log.stacks.resize(kept);
  std::erase_if(log.samples, [&](StackSample& sample) {
    const auto index = IndexOf(kept_ids, sample.stack);
    if (!index) ++log.unresolved;
    sample.stack = index.value_or(0);
    return !index;
  });
}

}  // namespace

StackLog ReadStackLog(const std::string& run_dir, size_t max_kept) {
  StackLog log;
  FileIds ids;
  ids.max_kept = std::min({max_kept, StackLog::kMaxFrames, StackLog::kMaxStacks});
  const std::string path = run_dir + "/" + std::string(kStacksFile);
  bool torn_tail = false;
  auto counts = ForEachLine(path, [&](const TextLine& line) {
    if (line.text.empty()) return;
    if (!line.complete) {
      torn_tail = true;  // a writer killed mid-line: the whole lines before it stand
      return;
    }
    const json j = json::parse(line.text, nullptr, false);
    if (j.is_discarded() || !ApplyLine(j, log, ids)) ++log.malformed;
  });
  if (!counts.ok()) {
    if (counts.error().code != ErrorCode::kNotFound) log.warnings.push_back(counts.error().message);
    log.samples.clear();
    return log;
  }
  Resolve(log, ids);
  if (counts->overlong > 0) log.warnings.push_back(OverlongLinesWarning(path, counts->overlong));
  if (log.malformed > 0)
    log.warnings.push_back(fmt::format("{}: {} malformed lines skipped", path, log.malformed));
  if (ids.over_bound > 0) {
    log.warnings.push_back(
        fmt::format("{}: more than {} frames or {} stacks: {} lines skipped (and what names them)",
                    path, ids.max_kept, ids.max_kept, ids.over_bound));
  }
  if (log.unresolved > 0) {
    log.warnings.push_back(
        fmt::format("{}: {} stack and sample lines skipped: they name a frame or stack no whole "
                    "line defines",
                    path, log.unresolved));
  }
  if (log.totals && log.totals->dropped > 0) {
    log.warnings.push_back(fmt::format(
        "{}: {} samples not recorded: the run met more than {} distinct frames or stacks", path,
        log.totals->dropped, StackLogWriter::kMaxFrames));
  }
  if (torn_tail)
    log.warnings.push_back(fmt::format("{}: the last line is cut off (skipped)", path));
  return log;
}

}  // namespace stallscope::stacks
