#include "pystack/layouts.h"

#include <charconv>

namespace stallscope::pystack {
namespace {

// Offsets measured with offsetof() against each version's own headers (Include/internal/
// pycore_runtime.h or pycore_pystate.h in 3.8, pycore_interp.h, cpython/pystate.h,
// cpython/frameobject.h, pycore_frame.h, cpython/code.h) as installed by pyenv 3.8.18, 3.9.18,
// 3.10.13, 3.11.7, 3.12.1 and Debian 3.11.2 (identical to 3.11.7). The set of fields is the one
// py-spy reads (github:benfred/py-spy src/python_interpreters.rs: tstate_head, frame, f_code,
// f_lasti, f_back, co_filename, co_name, co_firstlineno, co_lnotab/co_linetable,
// co_code_adaptive, compact str sizes). STATE.md lists the method; another patch release may
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
  l.tstate_frame = 56;
  l.cframe_current = 8;
  l.frame_back = 48;
  l.frame_code = 32;
  l.frame_instr = 56;
  l.code_filename = 112;
  l.code_name = 120;
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
  l.tstate_frame = 56;
  l.cframe_current = 0;
  l.frame_back = 8;
  l.frame_code = 0;
  l.frame_instr = 56;
  l.frame_owner = 70;
  l.code_filename = 112;
  l.code_name = 120;
  l.code_firstlineno = 68;
  l.code_linetable = 136;
  l.code_adaptive = 192;
  l.ascii_size = 40;  // 3.12 dropped wstr from PyASCIIObject
  l.compact_size = 56;
  return l;
}

}  // namespace

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
