#include "pystack/pystack.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

#include "base/file_read.h"
#include "base/units.h"
#include "pystack/elf_symbols.h"

namespace stallscope::pystack {
namespace {

// /proc/PID/maps, bounded; errors naming the pid.
Result<std::string> ReadMaps(pid_t pid) {
  constexpr size_t kMaxMapsBytes = size_t{64} << 20;
  const std::string path = fmt::format("/proc/{}/maps", pid);
  auto text = ReadSmallFile(path, kMaxMapsBytes);
  if (text.ok()) return text;
  switch (text.error().code) {
    case ErrorCode::kNotFound:
      return MakeError(ErrorCode::kNotFound, "pid {}: no such process", pid);
    case ErrorCode::kPermission:
      return MakeError(ErrorCode::kPermission,
                       "pid {}: may not read {} (needs the same user and Yama ptrace_scope, or "
                       "CAP_SYS_PTRACE)",
                       pid, path);
    case ErrorCode::kUnsupported:
      return MakeError(ErrorCode::kUnsupported, "pid {}: {} is over 64 MiB; not read", pid, path);
    default:
      return text.take_error();
  }
}

// 3.13: every offset from the _Py_DebugOffsets at the start of _PyRuntime.
Result<Layout> ReadDebugOffsets(pid_t pid, uint64_t runtime) {
  std::array<uint8_t, kDebugOffsetsBytes> bytes{};
  TRY_STATUS(ProcessMemory(pid).Read(runtime, bytes.data(), bytes.size()));
  auto layout = LayoutFromDebugOffsets(bytes);
  if (!layout.ok()) {
    return MakeError(layout.error().code, "pid {}: {}", pid, layout.error().message);
  }
  return layout;
}

}  // namespace

Result<std::string> ReadPyString(const MemoryReader& memory, const Layout& layout, uint64_t address,
                                 uint64_t max_chars, std::optional<uint64_t> type) {
  if (address == 0) return MakeError(ErrorCode::kParse, "null str object");
  // ob_type, length and state in one read: they sit within the first 40 bytes on 3.8-3.13.
  uint64_t begin = std::min({layout.object_type, layout.unicode_length, layout.unicode_state});
  uint64_t end =
      std::max({layout.object_type + 8, layout.unicode_length + 8, layout.unicode_state + 4});
  std::array<uint8_t, 256> header{};
  if (end - begin > header.size()) return MakeError(ErrorCode::kParse, "implausible str layout");
  TRY_STATUS(memory.Read(address + begin, header.data(), end - begin));
  auto field = [&](uint64_t offset, auto value) {
    std::memcpy(&value, header.data() + (offset - begin), sizeof(value));
    return value;
  };
  if (type && field(layout.object_type, uint64_t{0}) != *type) {
    return MakeError(ErrorCode::kParse, "object at {:#x} is not a str", address);
  }
  auto length = field(layout.unicode_length, int64_t{0});
  auto state = field(layout.unicode_state, uint32_t{0});
  // PyASCIIObject.state bits: interned:2, kind:3, compact:1, ascii:1 (3.8-3.13).
  uint32_t kind = (state >> 2) & 7u;
  bool compact = ((state >> 5) & 1u) != 0;
  bool ascii = ((state >> 6) & 1u) != 0;
  if (length < 0 || static_cast<uint64_t>(length) > max_chars || !compact ||
      (kind != 1 && kind != 2 && kind != 4)) {
    return MakeError(ErrorCode::kParse, "implausible str object (length {}, state {:#x})", length,
                     state);
  }
  uint64_t data = address + (ascii ? layout.ascii_size : layout.compact_size);
  std::string raw(static_cast<size_t>(length) * kind, '\0');
  if (!raw.empty()) TRY_STATUS(memory.Read(data, raw.data(), raw.size()));
  if (kind == 1 && ascii) return raw;
  std::string out;
  for (size_t i = 0; i < raw.size(); i += kind) {
    uint32_t c = 0;
    std::memcpy(&c, raw.data() + i, kind);  // little-endian
    AppendUtf8(out, c);
  }
  return out;
}

Result<PythonProcess> FindPython(pid_t pid) {
  TRY(auto maps_text, ReadMaps(pid));
  std::vector<Mapping> maps = ParseMaps(maps_text);
  // libpython first: a shared build's executable holds no _PyRuntime of its own.
  const Mapping* found = nullptr;
  for (bool want_lib : {true, false}) {
    for (const Mapping& map : maps) {
      if (found != nullptr) break;
      if (map.offset != 0 || !MinorFromFileName(map.path)) continue;
      bool is_lib = map.path.substr(map.path.rfind('/') + 1).starts_with("lib");
      if (is_lib == want_lib) found = &map;
    }
  }
  if (found == nullptr) {
    return MakeError(ErrorCode::kNotFound,
                     "pid {}: no python3.X or libpython3.X mapping (not "
                     "CPython 3?)",
                     pid);
  }
  int minor = *MinorFromFileName(found->path);
  TRY(auto elf, ElfSymbols::Open(found->path));
  auto symbol = elf.Find("_PyRuntime");
  if (!symbol) {
    return MakeError(ErrorCode::kNotFound, "pid {}: {} has no _PyRuntime symbol", pid, found->path);
  }
  uint64_t bias = elf.LoadBias(found->start);
  PythonProcess process;
  process.pid = pid;
  process.runtime_address = bias + *symbol;
  process.binary = found->path;
  auto address_of = [&](std::string_view name) -> std::optional<uint64_t> {
    auto value = elf.Find(name);
    if (!value) return std::nullopt;
    return bias + *value;
  };
  process.code_type = address_of("PyCode_Type");
  process.str_type = address_of("PyUnicode_Type");
  process.bytes_type = address_of("PyBytes_Type");
  if (minor >= 13) {
    TRY(process.layout, ReadDebugOffsets(pid, process.runtime_address));
    return process;
  }
  auto layout = BuiltinLayout(minor);
  if (!layout) {
    return MakeError(ErrorCode::kUnsupported, "pid {}: Python 3.{} is not supported (3.8-3.13)",
                     pid, minor);
  }
  process.layout = *layout;
  return process;
}

Result<ProcessStacks> Dump(pid_t pid) {
  TRY(auto reader, StackReader::Open(pid));
  return reader.SampleAll(StackReader::kMaxFrames);
}

}  // namespace stallscope::pystack
