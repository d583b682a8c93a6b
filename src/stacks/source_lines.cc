#include "stacks/source_lines.h"

#include <sys/stat.h>

#include <fmt/format.h>

#include "base/file_read.h"
#include "base/units.h"

namespace stallscope::stacks {
namespace {

// A source file larger than this gives no text (a generated module).
constexpr size_t kMaxSourceBytes = size_t{8} << 20;

}  // namespace

std::optional<std::string> SourceLines::Line(pid_t pid, const std::string& file, int line) {
  if (line <= 0 || file.empty() || file.front() == '<') return std::nullopt;
  const Source& source = Read(OpenPath(pid, file));
  const auto index = static_cast<size_t>(line - 1);
  if (index >= source.starts.size()) return std::nullopt;
  const size_t begin = source.starts[index];
  size_t end = source.text.find('\n', begin);
  if (end == std::string::npos) end = source.text.size();
  return std::string(Trim(std::string_view(source.text).substr(begin, end - begin)));
}

namespace {

bool SameFile(const char* ours, const std::string& theirs) {
  struct stat a {};
  struct stat b {};
  return stat(ours, &a) == 0 && stat(theirs.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

}  // namespace

// The same root directory is not enough: a process in another mount namespace with the same
// root (`unshare -m`, then a mount over a folder) sees other files at the same paths (issue 40
// P07). The namespaces are the same when /proc/PID/ns/mnt is our own (namespaces(7)); when it
// cannot be compared, the process's own view (/proc/PID/root) is the safe one.
bool SourceLines::SameView(pid_t pid) {
  auto [it, fresh] = same_view_.try_emplace(pid, false);
  if (fresh) {
    it->second = SameFile("/", fmt::format("/proc/{}/root", pid)) &&
                 SameFile("/proc/self/ns/mnt", fmt::format("/proc/{}/ns/mnt", pid));
  }
  return it->second;
}

std::string SourceLines::OpenPath(pid_t pid, const std::string& file) {
  if (file.front() != '/') return fmt::format("/proc/{}/cwd/{}", pid, file);
  return SameView(pid) ? file : fmt::format("/proc/{}/root{}", pid, file);
}

const SourceLines::Source& SourceLines::Read(const std::string& path) {
  static const Source kNone;
  auto found = files_.find(path);
  if (found != files_.end()) return found->second;
  if (files_.size() >= kMaxFiles || bytes_ >= kMaxBytes) return kNone;
  Source& source = files_[path];
  auto text = ReadSmallFile(path, kMaxSourceBytes);
  if (!text.ok() || text->size() > kMaxBytes - bytes_) return source;  // kept empty: not again
  bytes_ += text->size();
  source.text = std::move(text).value();
  for (size_t pos = 0; pos < source.text.size();) {
    source.starts.push_back(pos);
    const size_t nl = source.text.find('\n', pos);
    pos = nl == std::string::npos ? source.text.size() : nl + 1;
  }
  return source;
}

}  // namespace stallscope::stacks
