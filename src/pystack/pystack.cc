#include "pystack/pystack.h"

#include <unistd.h>

#include <array>
#include <cstring>

#include "base/file_read.h"
#include "pystack/elf_symbols.h"
#include "pystack/line_table.h"

namespace stallscope::pystack {
namespace {

// Loop guards and size bounds: a torn read must end in an error, never in a hang or a huge copy.
constexpr size_t kMaxThreads = 4096;
constexpr size_t kMaxInterpreters = 256;
constexpr size_t kMaxFrames = 4096;
constexpr uint64_t kMaxLineTableBytes = 1 << 20;
// glibc x86-64: `pid_t tid` in struct pthread (nptl/descr.h), where pthread_t points. Used for
// 3.8-3.10 only, which lack PyThreadState.native_thread_id; validated against /proc/PID/task.
constexpr uint64_t kGlibcPthreadTidOffset = 0x2d0;
// _PyInterpreterFrame.owner: FRAME_OWNED_BY_CSTACK (3.12-3.13 Include/internal/pycore_frame.h).
constexpr uint8_t kOwnedByCStack = 3;

Error Torn(pid_t pid, const std::string& what) {
  return MakeError(ErrorCode::kParse, "pid {}: torn or invalid read: {}", pid, what);
}

Result<uint64_t> ReadPointer(const MemoryReader& memory, uint64_t address) {
  return ReadValue<uint64_t>(memory, address);
}

std::string AppendUtf8(std::string out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

Result<std::string> ReadBytesObject(const MemoryReader& memory, const Layout& layout,
                                    uint64_t address) {
  if (address == 0) return MakeError(ErrorCode::kParse, "null bytes object");
  TRY(auto size, ReadValue<int64_t>(memory, address + layout.bytes_size));
  if (size < 0 || static_cast<uint64_t>(size) > kMaxLineTableBytes) {
    return MakeError(ErrorCode::kParse, "bytes object of implausible size {}", size);
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  if (size > 0) TRY_STATUS(memory.Read(address + layout.bytes_data, bytes.data(), bytes.size()));
  return bytes;
}

std::optional<pid_t> NativeTidOf(const MemoryReader& memory, pid_t pid, uint64_t pthread) {
  auto tid = ReadValue<int32_t>(memory, pthread + kGlibcPthreadTidOffset);
  if (!tid.ok() || *tid <= 0) return std::nullopt;
  if (access(fmt::format("/proc/{}/task/{}", pid, *tid).c_str(), F_OK) != 0) return std::nullopt;
  return *tid;
}

// /proc/PID/maps: its size is 0 to stat, so read to the end, bounded.
Result<std::string> ReadMaps(pid_t pid) {
  constexpr size_t kMaxMapsBytes = size_t{64} << 20;
  std::string path = fmt::format("/proc/{}/maps", pid);
  auto file = ReadOnlyFile::Open(path);
  if (!file.ok()) {
    if (file.error().code == ErrorCode::kNotFound) {
      return MakeError(ErrorCode::kNotFound, "pid {}: no such process", pid);
    }
    if (file.error().code == ErrorCode::kPermission) {
      return MakeError(ErrorCode::kPermission,
                       "pid {}: may not read {} (needs the same user and Yama ptrace_scope, or "
                       "CAP_SYS_PTRACE)",
                       pid, path);
    }
    return file.take_error();
  }
  std::string text;
  std::array<char, 1 << 16> chunk{};
  while (text.size() < kMaxMapsBytes) {
    TRY(size_t n, file->Read(chunk.data(), chunk.size()));
    if (n == 0) return text;
    text.append(chunk.data(), n);
  }
  return MakeError(ErrorCode::kUnsupported, "pid {}: {} is over 64 MiB; not read", pid, path);
}

// 3.13: every offset from _Py_DebugOffsets at the start of _PyRuntime. The positions of the
// fields inside _Py_DebugOffsets are those of 3.13.0 (Include/internal/pycore_runtime.h),
// measured with offsetof(); the "xdebugpy" cookie and the version word guard them.
Result<Layout> LayoutFromDebugOffsets(const MemoryReader& memory, pid_t pid, uint64_t runtime) {
  std::array<uint64_t, 72> words{};  // 576 bytes: up to unicode_object.asciiobject_size
  TRY_STATUS(memory.Read(runtime, words.data(), sizeof(words)));
  if (std::memcmp(words.data(), "xdebugpy", 8) != 0) {
    return MakeError(ErrorCode::kUnsupported, "pid {}: _PyRuntime has no _Py_DebugOffsets cookie",
                     pid);
  }
  uint64_t hex_version = words[1];
  if ((hex_version >> 16) != 0x030D) {
    return MakeError(ErrorCode::kUnsupported,
                     "pid {}: _Py_DebugOffsets of version {:#x}, only 3.13 is known", pid,
                     hex_version);
  }
  if (words[2] != 0) {
    return MakeError(ErrorCode::kUnsupported, "pid {}: free-threaded 3.13 is not supported yet",
                     pid);
  }
  auto at = [&](size_t byte_offset) { return words[byte_offset / 8]; };
  Layout l;
  l.minor = 13;
  l.frame_model = FrameModel::kCurrentFrame;
  l.line_table = LineTable::kLocations311;
  l.runtime_interp_head = at(40);
  l.interp_next = at(64);
  l.interp_tstate_head = at(72);
  l.tstate_next = at(168);
  l.tstate_frame = at(184);
  l.tstate_thread_id = at(192);
  l.tstate_native_thread_id = at(200);
  l.frame_back = at(232);
  l.frame_code = at(240);
  l.frame_instr = at(248);
  l.frame_owner = at(264);
  l.code_filename = at(280);
  l.code_name = at(288);
  l.code_linetable = at(304);
  l.code_firstlineno = at(312);
  l.code_adaptive = at(344);
  l.bytes_size = at(520);
  l.bytes_data = at(528);
  l.unicode_state = at(544);
  l.unicode_length = at(552);
  l.ascii_size = at(560);
  l.compact_size = l.ascii_size + 16;  // + utf8_length, utf8 (cpython/unicodeobject.h)
  return l;
}

}  // namespace

Result<std::string> ReadPyString(const MemoryReader& memory, const Layout& layout, uint64_t address,
                                 uint64_t max_chars) {
  if (address == 0) return MakeError(ErrorCode::kParse, "null str object");
  TRY(auto length, ReadValue<int64_t>(memory, address + layout.unicode_length));
  TRY(auto state, ReadValue<uint32_t>(memory, address + layout.unicode_state));
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
    out = AppendUtf8(std::move(out), c);
  }
  return out;
}

namespace {

Result<Frame> ReadFrame(const MemoryReader& memory, const Layout& layout, uint64_t code,
                        uint64_t code_unit) {
  Frame frame;
  TRY(auto filename, ReadPointer(memory, code + layout.code_filename));
  TRY(auto name, ReadPointer(memory, code + layout.code_name));
  TRY(frame.file, ReadPyString(memory, layout, filename));
  TRY(frame.function, ReadPyString(memory, layout, name));
  TRY(auto first_line, ReadValue<int32_t>(memory, code + layout.code_firstlineno));
  TRY(auto table_address, ReadPointer(memory, code + layout.code_linetable));
  TRY(auto table, ReadBytesObject(memory, layout, table_address));
  frame.line = LineForInstruction(layout.line_table, table, first_line, code_unit);
  return frame;
}

// The code object and the instruction index (in code units) of one frame.
struct FramePosition {
  uint64_t code = 0;
  uint64_t code_unit = 0;
  bool skip = false;  // a shim frame owned by the C stack (3.12+)
};

Result<FramePosition> ReadPosition(const MemoryReader& memory, const Layout& layout,
                                   uint64_t frame) {
  FramePosition position;
  TRY(position.code, ReadPointer(memory, frame + layout.frame_code));
  if (layout.frame_owner) {
    TRY(auto owner, ReadValue<uint8_t>(memory, frame + *layout.frame_owner));
    position.skip = owner == kOwnedByCStack;
    if (position.skip) return position;
  }
  if (position.code == 0) return MakeError(ErrorCode::kParse, "frame without a code object");
  if (layout.frame_model == FrameModel::kFrameObject) {
    TRY(auto lasti, ReadValue<int32_t>(memory, frame + layout.frame_instr));
    uint64_t index = lasti < 0 ? 0 : static_cast<uint64_t>(lasti);
    position.code_unit = layout.minor >= 10 ? index : index / 2;  // 3.8-3.9 count bytes
    return position;
  }
  TRY(auto instr, ReadPointer(memory, frame + layout.frame_instr));
  uint64_t code_start = position.code + layout.code_adaptive;
  position.code_unit = instr > code_start ? (instr - code_start) / 2 : 0;
  return position;
}

Result<uint64_t> InnermostFrame(const MemoryReader& memory, const Layout& layout, uint64_t tstate) {
  TRY(auto pointer, ReadPointer(memory, tstate + layout.tstate_frame));
  if (layout.frame_model != FrameModel::kCFrame || pointer == 0) return pointer;
  return ReadPointer(memory, pointer + layout.cframe_current);
}

Status WalkFrames(const MemoryReader& memory, const PythonProcess& process, uint64_t tstate,
                  ThreadStack& stack) {
  const Layout& layout = process.layout;
  TRY(auto frame, InnermostFrame(memory, layout, tstate));
  for (size_t depth = 0; frame != 0; ++depth) {
    if (depth >= kMaxFrames) return Torn(process.pid, "frame chain longer than 4096 (a cycle?)");
    TRY(auto position, ReadPosition(memory, layout, frame));
    if (!position.skip) {
      TRY(auto read, ReadFrame(memory, layout, position.code, position.code_unit));
      stack.frames.push_back(std::move(read));
    }
    TRY(auto back, ReadPointer(memory, frame + layout.frame_back));
    if (back == frame) return Torn(process.pid, "frame is its own parent");
    frame = back;
  }
  return OkStatus();
}

ThreadStack ReadThread(const MemoryReader& memory, const PythonProcess& process, uint64_t tstate) {
  const Layout& layout = process.layout;
  ThreadStack stack;
  auto thread_id = ReadPointer(memory, tstate + layout.tstate_thread_id);
  if (thread_id.ok()) stack.thread_id = *thread_id;
  if (layout.tstate_native_thread_id) {
    auto tid = ReadValue<int64_t>(memory, tstate + *layout.tstate_native_thread_id);
    if (tid.ok() && *tid > 0) stack.native_thread_id = static_cast<pid_t>(*tid);
  } else if (stack.thread_id != 0) {
    stack.native_thread_id = NativeTidOf(memory, process.pid, stack.thread_id);
  }
  Status walked = WalkFrames(memory, process, tstate, stack);
  if (!walked.ok()) {
    Error error = walked.take_error();
    if (error.code == ErrorCode::kParse && !error.message.starts_with("pid ")) {
      error = Torn(process.pid, error.message);
    }
    stack.error = std::move(error);
  }
  return stack;
}

}  // namespace

Result<std::vector<ThreadStack>> WalkThreads(const MemoryReader& memory,
                                             const PythonProcess& process) {
  const Layout& layout = process.layout;
  std::vector<ThreadStack> threads;
  TRY(auto interp, ReadPointer(memory, process.runtime_address + layout.runtime_interp_head));
  if (interp == 0) {
    return MakeError(ErrorCode::kNotFound,
                     "pid {}: Python has no interpreter (not started or "
                     "finalized)",
                     process.pid);
  }
  for (size_t n = 0; interp != 0; ++n) {
    if (n >= kMaxInterpreters) return Torn(process.pid, "interpreter list does not end");
    TRY(auto tstate, ReadPointer(memory, interp + layout.interp_tstate_head));
    for (size_t t = 0; tstate != 0; ++t) {
      if (t >= kMaxThreads) return Torn(process.pid, "thread list does not end");
      threads.push_back(ReadThread(memory, process, tstate));
      TRY(tstate, ReadPointer(memory, tstate + layout.tstate_next));
    }
    TRY(interp, ReadPointer(memory, interp + layout.interp_next));
  }
  return threads;
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
  PythonProcess process{pid, {}, elf.LoadBias(found->start) + *symbol, found->path};
  if (minor >= 13) {
    TRY(process.layout, LayoutFromDebugOffsets(ProcessMemory(pid), pid, process.runtime_address));
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

Result<std::vector<ThreadStack>> Dump(pid_t pid) {
  TRY(auto process, FindPython(pid));
  return WalkThreads(ProcessMemory(pid), process);
}

}  // namespace stallscope::pystack
