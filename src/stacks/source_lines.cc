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

bool SourceLines::SameRoot(pid_t pid) {
  auto [it, fresh] = same_root_.try_emplace(pid, true);
  if (fresh) {
    struct stat ours {};
    struct stat theirs {};
    if (stat("/", &ours) == 0 && stat(fmt::format("/proc/{}/root", pid).c_str(), &theirs) == 0)
      it->second = ours.st_dev == theirs.st_dev && ours.st_ino == theirs.st_ino;
  }
  return it->second;
}

std::string SourceLines::OpenPath(pid_t pid, const std::string& file) {
  if (file.front() != '/') return fmt::format("/proc/{}/cwd/{}", pid, file);
  return SameRoot(pid) ? file : fmt::format("/proc/{}/root{}", pid, file);
}

const SourceLines::Source& SourceLines::Read(const std::string& path) {
  auto [it, fresh] = files_.try_emplace(path);
  Source& source = it->second;
  if (!fresh) return source;
  auto text = ReadSmallFile(path, kMaxSourceBytes);
  if (!text.ok()) return source;
  source.text = std::move(text).value();
  for (size_t pos = 0; pos < source.text.size();) {
    source.starts.push_back(pos);
    const size_t nl = source.text.find('\n', pos);
    pos = nl == std::string::npos ? source.text.size() : nl + 1;
  }
  return source;
}

}  // namespace stallscope::stacks
