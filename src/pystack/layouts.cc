#include "pystack/layouts.h"

#include <charconv>
#include <cstring>

namespace stallscope::pystack {
namespace {

// Offsets measured with offsetof() against each version's own headers (Include/internal/
// pycore_runtime.h or pycore_pystate.h in 3.8, pycore_interp.h, cpython/pystate.h,
// cpython/frameobject.h, pycore_frame.h, cpython/code.h) as installed by pyenv 3.8.18, 3.9.18,
// 3.10.13, 3.11.7, 3.12.1 and Debian 3.11.2 (identical to 3.11.7). The set of fields is the one
// py-spy reads (github:benfred/py-spy src/python_interpreters.rs: tstate_head, frame, f_code,
// f_lasti, f_back, co_filename, co_name, co_firstlineno, co_lnotab/co_linetable,
// co_code_adaptive, compact str sizes). README.md lists the method; another patch release may
// differ (py-spy keeps both v3_11_0.rs and v3_11_6.rs).
Layout Layout38To310(int minor) {
  Layout l;
  l.minor = minor;
  l.frame_model = FrameModel::kFrameObject;
  l.line_table = minor >= 10 ? LineTable::kLinetable310 : LineTable::kLnotab;
  l.runtime_interp_head = 32;
  l.interp_next = 0;
  l.interp_tstate_head = 8;
  l.tstate_next = 8;
  l.tstate_thread_id = 176;
  l.tstate_frame = 24;
  l.frame_back = 24;
  l.frame_code = 32;
  l.frame_instr = minor >= 10 ? 96 : 104;  // f_lasti: 3.10 counts code units, 3.8-3.9 bytes
  l.frame_gen = minor >= 10 ? 88 : 96;     // f_gen: the generator running the frame, or NULL
  l.code_filename = 104;
  l.code_name = 112;
  l.code_firstlineno = 40;
  l.code_linetable = 120;
  return l;
}

Layout Layout311() {
  Layout l;
  l.minor = 11;
  l.frame_model = FrameModel::kCFrame;
  l.line_table = LineTable::kLocations311;
  l.runtime_interp_head = 40;
  l.interp_next = 0;
  l.interp_tstate_head = 16;
  l.tstate_next = 8;
  l.tstate_thread_id = 152;
  l.tstate_native_thread_id = 160;
  l.tstate_datastack_chunk = 296;
  l.tstate_frame = 56;
  l.cframe_current = 8;
  l.frame_back = 48;
  l.frame_code = 32;
  l.frame_instr = 56;
  l.frame_owner = 69;  // after stacktop (int, 64) and is_entry (bool, 68)
  l.code_filename = 112;
  l.code_name = 120;
  l.code_qualname = 128;
  l.code_firstlineno = 72;
  l.code_linetable = 136;
  l.code_adaptive = 184;
  return l;
}

Layout Layout312() {
  Layout l;
  l.minor = 12;
  l.frame_model = FrameModel::kCFrame;
  l.line_table = LineTable::kLocations311;
  l.runtime_interp_head = 40;
  l.interp_next = 0;
  l.interp_tstate_head = 72;
  l.tstate_next = 8;
  l.tstate_thread_id = 136;
  l.tstate_native_thread_id = 144;
  l.tstate_datastack_chunk = 232;
  l.tstate_frame = 56;
  l.cframe_current = 0;
  l.frame_back = 8;
  l.frame_code = 0;
  l.frame_instr = 56;
  l.frame_owner = 70;
  l.code_filename = 112;
  l.code_name = 120;
  l.code_qualname = 128;
  l.code_firstlineno = 68;
  l.code_linetable = 136;
  l.code_adaptive = 192;
  l.ascii_size = 40;  // 3.12 dropped wstr from PyASCIIObject
  l.compact_size = 56;
  return l;
}

// Positions inside 3.13.0's _Py_DebugOffsets (Include/internal/pycore_runtime.h), measured
// with offsetof() by measure_offsets.c: the word at each holds the offset of the named field.
struct DebugField {
  uint64_t Layout::*field;
  size_t position;
};
constexpr DebugField kDebugFields[] = {
    {&Layout::runtime_interp_head, 40}, {&Layout::interp_next, 64},
    {&Layout::interp_tstate_head, 72},  {&Layout::tstate_next, 168},
    {&Layout::tstate_frame, 184},       {&Layout::tstate_thread_id, 192},
    {&Layout::frame_back, 232},         {&Layout::frame_code, 240},
    {&Layout::frame_instr, 248},        {&Layout::code_filename, 280},
    {&Layout::code_name, 288},          {&Layout::code_linetable, 304},
    {&Layout::code_firstlineno, 312},   {&Layout::code_adaptive, 344},
    {&Layout::object_type, 360},        {&Layout::bytes_size, 520},
    {&Layout::bytes_data, 528},         {&Layout::unicode_state, 544},
    {&Layout::unicode_length, 552},     {&Layout::ascii_size, 560},
};
struct DebugOptionalField {
  std::optional<uint64_t> Layout::*field;
  size_t position;
};
constexpr DebugOptionalField kDebugOptionalFields[] = {
    {&Layout::tstate_native_thread_id, 200},
    {&Layout::tstate_datastack_chunk, 208},
    {&Layout::frame_owner, 264},
    {&Layout::code_qualname, 296},
};
// Any real struct offset is far below this; a larger one means the bytes are not a
// _Py_DebugOffsets (3.13's largest, interp.threads.head, is 7344).
constexpr uint64_t kMaxStructOffset = uint64_t{1} << 16;

}  // namespace

Result<Layout> LayoutFromDebugOffsets(std::span<const uint8_t> bytes) {
  if (bytes.size() < kDebugOffsetsBytes) {
    return MakeError(ErrorCode::kParse, "_Py_DebugOffsets cut short ({} bytes)", bytes.size());
  }
  auto at = [&](size_t position) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + position, sizeof(word));
    return word;
  };
  if (std::memcmp(bytes.data(), "xdebugpy", 8) != 0) {
    return MakeError(ErrorCode::kUnsupported, "_PyRuntime has no _Py_DebugOffsets cookie");
  }
  if ((at(8) >> 16) != 0x030D) {
    return MakeError(ErrorCode::kUnsupported,
                     "_Py_DebugOffsets of version {:#x}, only 3.13 is known", at(8));
  }
  if (at(16) != 0) {
    return MakeError(ErrorCode::kUnsupported, "free-threaded 3.13 is not supported yet");
  }
  Layout l;
  l.minor = 13;
  l.frame_model = FrameModel::kCurrentFrame;
  l.line_table = LineTable::kLocations311;
  for (const DebugField& f : kDebugFields) l.*f.field = at(f.position);
  for (const DebugOptionalField& f : kDebugOptionalFields) l.*f.field = at(f.position);
  l.compact_size = l.ascii_size + 16;  // + utf8_length, utf8 (cpython/unicodeobject.h)
  for (const DebugField& f : kDebugFields) {
    if (l.*f.field >= kMaxStructOffset) {
      return MakeError(ErrorCode::kUnsupported, "_Py_DebugOffsets word at {} is implausible ({})",
                       f.position, l.*f.field);
    }
  }
  for (const DebugOptionalField& f : kDebugOptionalFields) {
    if (*(l.*f.field) >= kMaxStructOffset) {
      return MakeError(ErrorCode::kUnsupported, "_Py_DebugOffsets word at {} is implausible ({})",
                       f.position, *(l.*f.field));
    }
  }
  return l;
}

std::array<uint8_t, kDebugOffsetsBytes> DebugOffsets3130() {
  std::array<uint8_t, kDebugOffsetsBytes> bytes{};
  auto put = [&](size_t position, uint64_t word) {
    std::memcpy(bytes.data() + position, &word, sizeof(word));
  };
  std::memcpy(bytes.data(), "xdebugpy", 8);
  put(8, 0x030D00F0);  // 3.13.0 final
  // The values measured from pyenv 3.13.0 (src/pystack/README.md, offsets table).
  constexpr std::pair<size_t, uint64_t> kValues[] = {
      {40, 632}, {64, 7264}, {72, 7344}, {168, 8},  {184, 72},  {192, 152}, {200, 160}, {208, 232},
      {232, 8},  {240, 0},   {248, 56},  {264, 70}, {280, 112}, {288, 120}, {296, 128}, {304, 136},
      {312, 68}, {344, 200}, {360, 8},   {520, 16}, {528, 32},  {544, 32},  {552, 16},  {560, 40},
  };
  for (auto [position, value] : kValues) put(position, value);
  return bytes;
}

std::optional<Layout> BuiltinLayout(int minor) {
  if (minor >= 8 && minor <= 10) return Layout38To310(minor);
  if (minor == 11) return Layout311();
  if (minor == 12) return Layout312();
  return std::nullopt;
}

std::optional<int> MinorFromFileName(std::string_view path) {
  size_t slash = path.rfind('/');
  std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (name.starts_with("lib")) name.remove_prefix(3);
  if (!name.starts_with("python3.")) return std::nullopt;
  name.remove_prefix(8);
  int minor = 0;
  auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), minor);
  if (error != std::errc{} || end == name.data()) return std::nullopt;
  std::string_view rest(end, static_cast<size_t>(name.data() + name.size() - end));
  // "python3.11", "libpython3.12.so.1.0", "python3.13t" is free-threaded: not supported yet.
  if (!rest.empty() && !rest.starts_with(".so") && rest != "d") return std::nullopt;
  return minor;
}

}  // namespace stallscope::pystack
